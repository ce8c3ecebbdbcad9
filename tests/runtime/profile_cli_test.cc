// `gem profile` end to end on the tiny test model: the JSON has every field README "Profiling"
// describes and the product stages carry the model's tensor sizes; the table prints a row per
// stage and layer kind; the attention sweep; bad flags exit non-zero with a message.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>

#include "common/test_util.h"
#include "model/model.h"

namespace gem::test {
namespace {


std::string base() {
  return gem_binary() + " profile -m " + fixture("tiny-q4_0.gguf") + " --backend cpu -t 2";
}

TEST(ProfileCli, Json) {
  GEM_REQUIRE_FIXTURE(fixture("tiny-q4_0.gguf"));
  ASSERT_TRUE(file_exists(gem_binary())) << gem_binary();
  const auto [rc, text] = run_command(base() + " -d 24 -n 2 --rows 1,16 --json 2>/dev/null");
  ASSERT_EQ(rc, 0) << text;
  const nlohmann::json j = nlohmann::json::parse(text);
  for (const char* key : {"model", "file", "backend", "kv_type", "n_ctx", "n_tile", "method",
                          "build_commit", "passes"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_EQ(j["backend"], "cpu");
  EXPECT_EQ(j["kv_type"], "f16");
  EXPECT_EQ(j["n_ctx"], 24 + 16);
  auto m = model::load_model(fixture("tiny-q4_0.gguf"));
  ASSERT_TRUE(m.ok()) << m.message();
  uint64_t qkv_sliding = 0, ffn_down_full = 0;
  for (size_t l = 0; l < (*m)->plan.size(); ++l) {
    const model::LayerWeights& w = (*m)->weights.layers[l];
    if ((*m)->plan[l].kind == model::AttnKind::kSliding) {
      qkv_sliding += w.attn_q.n_bytes + w.attn_k.n_bytes + w.attn_v.n_bytes;
    } else {
      ffn_down_full += w.ffn_down.n_bytes;
    }
  }
  ASSERT_EQ(j["passes"].size(), 2u);
  EXPECT_EQ(j["passes"][0]["rows"], 1);
  EXPECT_EQ(j["passes"][1]["rows"], 16);
  for (const auto& pass : j["passes"]) {
    EXPECT_EQ(pass["depth"], 24);
    EXPECT_EQ(pass["samples"], 2);
    std::set<std::string> seen;
    double share = 0.0, sum_us = 0.0;
    for (const auto& s : pass["stages"]) {
      for (const char* key : {"stage", "kind", "layers", "mean_us", "min_us", "weight_bytes",
                              "kv_bytes", "act_bytes", "bytes", "gbps", "share_pct"}) {
        ASSERT_TRUE(s.contains(key)) << key << " in " << s.dump();
      }
      seen.insert(s["stage"].get<std::string>() + "/" + s["kind"].get<std::string>());
      EXPECT_GE(s["min_us"].get<double>(), 0.0);
      EXPECT_GE(s["mean_us"].get<double>(), s["min_us"].get<double>());
      EXPECT_EQ(s["bytes"].get<uint64_t>(), s["weight_bytes"].get<uint64_t>() +
                                                s["kv_bytes"].get<uint64_t>() +
                                                s["act_bytes"].get<uint64_t>());
      share += s["share_pct"].get<double>();
      sum_us += s["mean_us"].get<double>();
      if (s["stage"] == "qkv" && s["kind"] == "sliding") {
        EXPECT_EQ(s["weight_bytes"], qkv_sliding);
      }
      if (s["stage"] == "ffn_down" && s["kind"] == "full") {
        EXPECT_EQ(s["weight_bytes"], ffn_down_full);
      }
    }
    EXPECT_NEAR(share, 100.0, 1e-6);
    for (const char* kind : {"sliding", "full"}) {
      for (const char* st : {"norm", "qkv", "rope", "kv_write", "attention", "attn_out",
                             "ffn_gate_up", "gelu", "ffn_down", "epilogue"}) {
        EXPECT_TRUE(seen.count(std::string(st) + "/" + kind)) << st << " " << kind;
      }
    }
    EXPECT_TRUE(seen.count("embed/global"));
    EXPECT_TRUE(seen.count("head/global"));
    const auto& t = pass["totals"];
    for (const char* key :
         {"stages_us", "forward_us", "forward_min_us", "sample_us", "profiled_eval_us", "plain_us",
          "plain_min_us", "forward_vs_plain_pct", "forward_vs_plain_min_pct"}) {
      ASSERT_TRUE(t.contains(key)) << key;
    }
    EXPECT_NEAR(t["stages_us"].get<double>(), sum_us, 1e-6 * sum_us);
    EXPECT_LE(t["forward_us"].get<double>(), t["profiled_eval_us"].get<double>() * 1.0001);
  }
}

TEST(ProfileCli, TableAndAttentionSweep) {
  GEM_REQUIRE_FIXTURE(fixture("tiny-q4_0.gguf"));
  auto [rc, text] = run_command(base() + " -d 8 -n 1 --reference 2>/dev/null");
  ASSERT_EQ(rc, 0) << text;
  EXPECT_NE(text.find("backend cpu-reference"), std::string::npos) << text;
  EXPECT_NE(text.find("decode step: 1 row at depth 8"), std::string::npos) << text;
  EXPECT_NE(text.find("| qkv | sliding |"), std::string::npos) << text;
  EXPECT_NE(text.find("| attention | full |"), std::string::npos) << text;
  EXPECT_NE(text.find("| sample | global |"), std::string::npos) << text;
  EXPECT_NE(text.find("plain eval, timed as gem bench times it"), std::string::npos) << text;

  auto [rc2, sweep] = run_command(base() + " --attention-sweep 0,40 -n 1 --json 2>/dev/null");
  ASSERT_EQ(rc2, 0) << sweep;
  const nlohmann::json j = nlohmann::json::parse(sweep);
  ASSERT_EQ(j["attention_sweep"].size(), 2u);
  EXPECT_EQ(j["attention_sweep"][1]["depth"], 40);
  for (const char* kind : {"sliding", "full"}) {
    for (const char* key : {"layers", "mean_us", "min_us", "kv_bytes", "gbps", "share_pct"}) {
      EXPECT_TRUE(j["attention_sweep"][1][kind].contains(key)) << kind << " " << key;
    }
  }
  EXPECT_GT(j["attention_sweep"][1]["full"]["kv_bytes"].get<uint64_t>(),
            j["attention_sweep"][0]["full"]["kv_bytes"].get<uint64_t>());
}

// --parallel B: a batched decode step of B sequences (B slots), titled as such, in the JSON with
// batch true, each sequence's keys in attention's bytes.
TEST(ProfileCli, BatchedDecodeStep) {
  GEM_REQUIRE_FIXTURE(fixture("tiny-q4_0.gguf"));
  auto [rc, text] = run_command(base() + " -d 12 -n 1 --parallel 3 2>/dev/null");
  ASSERT_EQ(rc, 0) << text;
  EXPECT_NE(text.find("decode step: 1 row at depth 12"), std::string::npos) << text;
  EXPECT_NE(text.find("batched decode step: 3 sequences, one row each at depth 12"),
            std::string::npos)
      << text;
  auto [rc2, out] = run_command(base() + " -d 12 -n 1 --parallel 3 --json 2>/dev/null");
  ASSERT_EQ(rc2, 0) << out;
  const nlohmann::json j = nlohmann::json::parse(out);
  ASSERT_EQ(j["passes"].size(), 2u);
  EXPECT_EQ(j["passes"][0]["batch"], false);
  EXPECT_EQ(j["passes"][1]["batch"], true);
  EXPECT_EQ(j["passes"][1]["rows"], 3);
  auto kv_of = [](const nlohmann::json& pass, const char* kind) {
    for (const auto& s : pass["stages"]) {
      if (s["stage"] == "attention" && s["kind"] == kind) return s["kv_bytes"].get<uint64_t>();
    }
    return uint64_t{0};
  };
  for (const char* kind : {"sliding", "full"}) {
    EXPECT_GT(kv_of(j["passes"][0], kind), 0u) << kind;
    EXPECT_EQ(kv_of(j["passes"][1], kind), 3 * kv_of(j["passes"][0], kind)) << kind;
  }
}

// --verify N: a speculative verification of N rows of one sequence, titled as such, in the JSON
// with shape "verify", the sequence's keys once in attention's bytes (those of a tile of N rows).
TEST(ProfileCli, Verification) {
  GEM_REQUIRE_FIXTURE(fixture("tiny-q4_0.gguf"));
  auto [rc, text] = run_command(base() + " -d 12 -n 1 --rows '' --verify 5 2>/dev/null");
  ASSERT_EQ(rc, 0) << text;
  EXPECT_EQ(text.find("decode step: 1 row"), std::string::npos) << text;
  EXPECT_NE(text.find("verification: 5 rows of one sequence at depths 12..16, every row's logits"),
            std::string::npos)
      << text;
  auto [rc2, out] = run_command(base() + " -d 12 -n 1 --rows 5 --verify 5 --json 2>/dev/null");
  ASSERT_EQ(rc2, 0) << out;
  const nlohmann::json j = nlohmann::json::parse(out);
  ASSERT_EQ(j["passes"].size(), 2u);
  EXPECT_EQ(j["passes"][0]["shape"], "tile");
  EXPECT_EQ(j["passes"][1]["shape"], "verify");
  EXPECT_EQ(j["passes"][1]["batch"], false);
  EXPECT_EQ(j["passes"][1]["rows"], 5);
  auto bytes_of = [](const nlohmann::json& pass, const char* stage, const char* kind,
                     const char* what) {
    for (const auto& s : pass["stages"]) {
      if (s["stage"] == stage && s["kind"] == kind) return s[what].get<uint64_t>();
    }
    return uint64_t{0};
  };
  for (const char* kind : {"sliding", "full"}) {
    EXPECT_GT(bytes_of(j["passes"][1], "attention", kind, "kv_bytes"), 0u) << kind;
    EXPECT_EQ(bytes_of(j["passes"][1], "attention", kind, "kv_bytes"),
              bytes_of(j["passes"][0], "attention", kind, "kv_bytes"))
        << kind;
  }
  // Every row's logits against the tile's last row's.
  EXPECT_GT(bytes_of(j["passes"][1], "head", "global", "act_bytes"),
            bytes_of(j["passes"][0], "head", "global", "act_bytes"));
}

TEST(ProfileCli, RejectsBadFlags) {
  GEM_REQUIRE_FIXTURE(fixture("tiny-q4_0.gguf"));
  const std::pair<std::string, std::string> cases[] = {
      {"--rows 0", "--rows: '0' is not an integer >= 1"},
      {"--rows 1,abc", "'abc'"},
      {"--parallel 0", "--parallel: '0' is not an integer >= 1"},
      {"--parallel 2,300", "--parallel 300: expected at most 256 sequence slots"},
      {"--attention-sweep 5 --parallel 2", "excludes"},
      {"--verify 0", "--verify: '0' is not an integer >= 1"},
      {"--attention-sweep 5 --verify 2", "excludes"},
      {"-c 20 -d 16 --verify 8", "-c 20 is smaller than the depth 16 + 8 rows"},
      {"--attention-sweep 4,-2", "--attention-sweep: '-2'"},
      {"-n 0", "--samples"},
      {"-d -5", "--depth"},
      {"--attention-sweep 5 -d 3", "excludes"},
      {"--timing sometimes", "--timing"},
      {"--timing eager", "stage timing 'eager'"},
      {"--tile 8 --rows 16", "--tile 8 is smaller than --rows 16"},
      {"-c 10 -d 20", "-c 10 is smaller"},
      {"--backend tpu", "--backend"},
  };
  for (const auto& [args, message] : cases) {
    auto [rc, text] = run_command(base() + " " + args + " 2>&1");
    EXPECT_NE(rc, 0) << args;
    EXPECT_NE(text.find(message), std::string::npos) << args << ": " << text;
  }
  auto [rc, text] = run_command(gem_binary() + " profile -m /nonexistent.gguf 2>&1");
  EXPECT_NE(rc, 0);
  EXPECT_NE(text.find("/nonexistent.gguf"), std::string::npos) << text;
}

}  // namespace
}  // namespace gem::test
