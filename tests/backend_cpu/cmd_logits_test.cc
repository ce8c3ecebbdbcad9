// `gem logits` end to end: the binary on a fixture model, its JSON top-K and its --out vector
// against llama.cpp's case file; bad arguments exit non-zero with a message.
#include <gtest/gtest.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <sys/wait.h>

#include "backend_cpu/fixture_cases.h"
#include "common/test_util.h"

namespace gem::test {
namespace {


TEST(CmdLogits, MatchesFixture) {
  GEM_REQUIRE_FIXTURE(fixture("tiny6-f32.gguf"));
  ASSERT_TRUE(file_exists(gem_binary())) << gem_binary();
  const FixtureCase c = load_case("tiny6-f32", "short");
  std::string ids;
  for (int32_t t : c.prompt) {
    if (!ids.empty()) ids.push_back(',');
    ids.append(std::to_string(t));
  }
  const std::string out = temp_dir() + "/logits.f32";
  const auto [rc, text] = run_command(gem_binary() + " logits -m " + fixture("tiny6-f32.gguf") + " --ids " +
                              ids + " --top 20 --full-at 5 --out " + out + " --reference -t 2 2>&1");
  ASSERT_EQ(rc, 0) << text;
  const nlohmann::json j = nlohmann::json::parse(text);
  EXPECT_EQ(j["backend"], "cpu-reference");
  ASSERT_EQ(j["positions"].size(), c.prompt.size());
  for (size_t p = 0; p < c.prompt.size(); ++p) {
    const auto& top = j["positions"][p]["top"];
    ASSERT_EQ(top.size(), 20u);
    // The same ids (near-ties at rank 20 may swap) with logits within the float tolerance.
    int shared = 0;
    for (const TopEntry& e : c.prompt_top[p]) {
      for (size_t i = 0; i < 20; ++i) {
        if (top[i][0].get<int>() != e.id) continue;
        ++shared;
        EXPECT_NEAR(top[i][1].get<float>(), e.logit, 0.02) << "pos " << p << " id " << e.id;
      }
    }
    EXPECT_GE(shared, 18) << "pos " << p;
    EXPECT_EQ(top[0][0].get<int>(), c.prompt_top[p][0].id) << "pos " << p;
  }
  ASSERT_EQ(j["full"].size(), 1u);
  EXPECT_EQ(j["full"][0]["pos"], 5);
  const std::vector<float> ours = load_f32(out);
  const std::vector<float> ref = load_f32(c.full_logits.at(0).second);
  ASSERT_EQ(ours.size(), ref.size());
  ErrorStats stats;
  compare_full(ours.data(), ref, Tolerance{1e-3, 0.02, -1.0, 0.0}, "gem logits --out", stats);
}

TEST(CmdLogits, RejectsBadArguments) {
  GEM_REQUIRE_FIXTURE(fixture("tiny6-f32.gguf"));
  ASSERT_TRUE(file_exists(gem_binary())) << gem_binary();
  const std::string base = gem_binary() + " logits -m " + fixture("tiny6-f32.gguf");
  auto [rc1, t1] = run_command(base + " --ids 2,abc 2>&1");
  EXPECT_NE(rc1, 0);
  EXPECT_NE(t1.find("'abc' is not an integer"), std::string::npos) << t1;
  auto [rc2, t2] = run_command(base + " --ids 2,818 --full-at 2 2>&1");
  EXPECT_NE(rc2, 0);
  EXPECT_NE(t2.find("--full-at"), std::string::npos) << t2;
  auto [rc3, t3] = run_command(base + " --ids 2,999999 2>&1");
  EXPECT_NE(rc3, 0);
  EXPECT_NE(t3.find("999999"), std::string::npos) << t3;
}

}  // namespace
}  // namespace gem::test
