// Lossless speculative decoding on the CUDA backend: greedy output with drafting equals greedy
// output without it, token for token — with a drafter that proposes the known continuation
// (every round fully accepted, so every verification row must choose what the decode step
// chose), one right for 3 tokens a round (partial acceptance, truncation), one never right, and
// the MTP assistant (tiny fixture; with GEM_CUDA_SYNTH_12B(_MTP) / GEM_CUDA_SYNTH_31B(_MTP), the
// synthetic 12B/31B and their assistants). Holds only when the backend's N-row evaluation
// computes each row exactly as its one-token decode step does. Skips without a CUDA device.
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "common/test_util.h"
#include "cuda/cuda_test_util.h"
#include "model/assistant.h"
#include "model/model.h"
#include "runtime/engine.h"
#include "runtime/mtp_draft.h"
#include "runtime/speculative_util.h"

namespace gem::runtime {
namespace {

std::unique_ptr<Engine> cuda_engine(const model::Model& m, int n_ctx) {
  BackendOptions o;
  o.n_ctx = n_ctx;
  o.n_tile = 64;
  o.kv_type = model::KvType::kF16;
  auto b = make_cuda_backend(m, o);
  EXPECT_TRUE(b.ok()) << b.message();
  if (!b.ok()) return nullptr;
  return std::make_unique<Engine>(std::move(b).value());
}

// Plain greedy, then the same request with each drafter on a fresh engine: equal outputs.
void check_lossless(const std::string& model_path, const std::string& asst_path, int prompt_len,
                    int max_tokens) {
  auto m = model::load_model(model_path);
  ASSERT_TRUE(m.ok()) << m.message();
  const std::vector<int32_t> prompt = prompt_of(prompt_len);
  const int n_ctx = prompt_len + max_tokens + 16;
  auto plain_engine = cuda_engine(**m, n_ctx);
  ASSERT_TRUE(plain_engine);
  const Output plain = generate(*plain_engine, prompt, max_tokens, nullptr);
  ASSERT_EQ(static_cast<int>(plain.tokens.size()), max_tokens);
  plain_engine.reset();
  std::vector<int32_t> truth = prompt;
  truth.insert(truth.end(), plain.tokens.begin(), plain.tokens.end());

  for (int right : {8, 3, 0}) {
    auto e = cuda_engine(**m, n_ctx);
    ASSERT_TRUE(e);
    OracleDrafter d(truth, right);
    const Output r = generate(*e, prompt, max_tokens, &d);
    EXPECT_EQ(r.tokens, plain.tokens) << model_path << ": a drafter right for " << right
                                      << " tokens a round";
    std::printf("  %s, drafter right for %d: %d drafted, %d accepted; output %s plain greedy\n",
                model_path.c_str(), right, r.result.n_drafted, r.result.n_draft_accepted,
                r.tokens == plain.tokens ? "equals" : "DIFFERS FROM");
  }
  auto e = cuda_engine(**m, n_ctx);
  ASSERT_TRUE(e);
  auto a = model::load_assistant(asst_path);
  ASSERT_TRUE(a.ok()) << a.message();
  auto mtp = MtpDraftSource::make(e->backend(), std::move(a).value());
  ASSERT_TRUE(mtp.ok()) << mtp.message();
  const Output r = generate(*e, prompt, max_tokens, mtp->get());
  EXPECT_EQ(r.tokens, plain.tokens) << model_path << ": the MTP assistant";
  EXPECT_GT(r.result.n_drafted, 0);
  std::printf("  %s, MTP assistant: %d drafted, %d accepted; output %s plain greedy\n",
              model_path.c_str(), r.result.n_drafted, r.result.n_draft_accepted,
              r.tokens == plain.tokens ? "equals" : "DIFFERS FROM");
}

TEST(CudaSpeculative, GreedyOutputEqualsPlainOnTheTinyFixture) {
  REQUIRE_GPU();
  const std::string tiny = test::fixture("tiny-q4_0.gguf");
  const std::string asst = test::fixture("mtp/tiny-q4_0-assistant.gguf");
  GEM_REQUIRE_FIXTURE(tiny);
  GEM_REQUIRE_FIXTURE(asst);
  check_lossless(tiny, asst, 30, 100);  // past the 16-position window and its 48-slot ring
}

void check_synth(const char* env) {
  const char* path = std::getenv(env);
  const std::string asst_env = std::string(env) + "_MTP";
  const char* asst = std::getenv(asst_env.c_str());
  if (!path || !asst) GTEST_SKIP() << env << " and " << asst_env << " are not both set";
  check_lossless(path, asst, 24, 64);
}

TEST(CudaSpeculative, Synthetic12B) {
  REQUIRE_GPU();
  check_synth("GEM_CUDA_SYNTH_12B");
}
TEST(CudaSpeculative, Synthetic31B) {
  REQUIRE_GPU();
  check_synth("GEM_CUDA_SYNTH_31B");
}

}  // namespace
}  // namespace gem::runtime
