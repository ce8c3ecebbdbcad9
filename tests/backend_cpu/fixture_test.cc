// The CPU backend against llama.cpp's fixture outputs (fixtures/README.md, "Suggested checks for
// gem"): every model and prompt, the top-20 at every prompt position, every stored full-logit
// vector, and teacher-forced greedy decoding (the fixture's greedy tokens fed one by one, the
// logits compared with greedy_top at each step). Reference path against the float tags; fast path
// (8-bit activations in Q4_0/Q8_0/Q6_K matmuls, float with F32 weights) against the matching tags.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend_cpu/fixture_cases.h"
#include "base/timer.h"
#include "common/test_util.h"

namespace gem::test {
namespace {

struct CaseSetup {
  const char* name;        // test-name prefix
  const char* model_file;  // fixtures/<model_file>
  const char* tag;         // fixtures/outputs/<tag>
  bool reference;          // BackendOptions::reference
  Tolerance tol;
  int greedy_steps;        // teacher-forced steps checked (the fixtures hold 32)
  int position_stride;     // 1: every prompt position in one all-logits eval; k > 1: every k-th
                           // position, the last and the full-vector ones, one eval ending at each
};

// Float math: the fixture table's float rows. 8-bit activations: its llama.cpp-like rows.
constexpr Tolerance kF32Tol{1e-3, 0.02, 0.02, 0.85};
constexpr Tolerance kExactTol{2e-3, 0.03, 0.03, 0.85};
constexpr Tolerance kQ4Tol{0.04, 0.6, -1.0, 0.75};
constexpr Tolerance kQ6KTol{0.05, 0.8, -1.0, 0.75};

const CaseSetup kSetups[] = {
    {"ref_tiny6_f32", "tiny6-f32.gguf", "tiny6-f32", true, kF32Tol, 32, 1},
    {"ref_tiny_q4_0_exact", "tiny-q4_0.gguf", "tiny-q4_0.exact", true, kExactTol, 32, 1},
    // The reference decodes and dots all 262144 Q6_K rows (256 wide) of the head in double for
    // every logit row: fewer rows keep it fast.
    {"ref_tiny256_q6_k_exact", "tiny256-q6_k.gguf", "tiny256-q6_k.exact", true, kExactTol, 8, 8},
    {"fast_tiny6_f32", "tiny6-f32.gguf", "tiny6-f32", false, kF32Tol, 32, 1},
    {"fast_tiny_q4_0", "tiny-q4_0.gguf", "tiny-q4_0", false, kQ4Tol, 32, 1},
    {"fast_tiny256_q6_k", "tiny256-q6_k.gguf", "tiny256-q6_k", false, kQ6KTol, 32, 1},
};

struct Param {
  CaseSetup setup;
  std::string prompt;
};

class FixtureTest : public ::testing::TestWithParam<Param> {};

TEST_P(FixtureTest, PromptAndTeacherForcedGreedy) {
  const CaseSetup& s = GetParam().setup;
  GEM_REQUIRE_FIXTURE(fixture(s.model_file));
  const model::Model* model = fixture_model(s.model_file);
  ASSERT_NE(model, nullptr);
  const FixtureCase c = load_case(s.tag, GetParam().prompt);
  ASSERT_FALSE(c.prompt.empty());
  const int64_t n_vocab = model->config.n_vocab;

  BackendOptions opt;
  opt.n_ctx = 256;
  opt.reference = s.reference;
  opt.n_tile = 64;
  auto made = cpu::make_cpu_backend(*model, opt);
  ASSERT_TRUE(made.ok()) << made.message();
  Backend& be = **made;

  Timer timer;
  ErrorStats stats;
  ASSERT_EQ(c.prompt_top.size(), c.prompt.size());
  const int n_prompt = static_cast<int>(c.prompt.size());
  auto compare_position = [&](int p, std::span<const float> logits) {
    ASSERT_EQ(static_cast<int64_t>(logits.size()), n_vocab);
    compare_top(logits.data(), n_vocab, c.prompt_top[p], s.tol,
                c.prompt_name + " pos " + std::to_string(p), stats);
    for (const auto& [pos, file] : c.full_logits) {
      if (pos != p) continue;
      const std::vector<float> ref = load_f32(file);
      ASSERT_EQ(static_cast<int64_t>(ref.size()), n_vocab) << file;
      compare_full(logits.data(), ref, s.tol, c.prompt_name + " full pos " + std::to_string(pos), stats);
    }
  };
  if (s.position_stride == 1) {
    // The prompt in one eval, logits of every position.
    ASSERT_TRUE(be.eval(c.prompt, /*all_logits=*/true).ok());
    for (int p = 0; p < n_prompt; ++p) compare_position(p, be.logits(p));
  } else {
    std::vector<bool> wanted(n_prompt, false);
    for (int p = s.position_stride - 1; p < n_prompt; p += s.position_stride) wanted[p] = true;
    for (const auto& full : c.full_logits) wanted[full.first] = true;
    wanted[n_prompt - 1] = true;
    for (int done = 0, p = 0; p < n_prompt; ++p) {
      if (!wanted[p]) continue;
      ASSERT_TRUE(be.eval({c.prompt.data() + done, static_cast<size_t>(p + 1 - done)}, false).ok());
      compare_position(p, be.logits());
      done = p + 1;
    }
  }
  // Teacher-forced greedy: greedy_top[k] are the logits after feeding greedy[k].
  const int steps = std::min<int>(s.greedy_steps, static_cast<int>(c.greedy.size()));
  for (int k = 0; k < steps; ++k) {
    const int32_t token = c.greedy[k];
    ASSERT_TRUE(be.eval({&token, 1}, false).ok());
    compare_top(be.logits().data(), n_vocab, c.greedy_top[k], s.tol,
                c.prompt_name + " greedy step " + std::to_string(k), stats);
  }
  std::printf("[stats] %s %s: full rel_l2 %.3g max|d| %.3g; top-20 max|d| %.3g, min overlap %.2f, "
              "top-1 %d/%d; %.2f s\n",
              s.name, c.prompt_name.c_str(), stats.rel_l2, stats.full_max_abs, stats.top_max_abs,
              stats.min_overlap, stats.top1_agree, stats.top1_checked, timer.seconds());
}

std::vector<Param> all_params() {
  std::vector<Param> out;
  for (const CaseSetup& s : kSetups) {
    for (const std::string& p : fixture_prompt_names()) out.push_back({s, p});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Cases, FixtureTest, ::testing::ValuesIn(all_params()),
                         [](const ::testing::TestParamInfo<Param>& info) {
                           return std::string(info.param.setup.name) + "_" + info.param.prompt;
                         });

}  // namespace
}  // namespace gem::test
