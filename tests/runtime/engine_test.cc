// Engine: prefix reuse (extension, identical replay, divergence), rollback after each request,
// cancellation in the prompt and in generation, length limits, constraints. The scripted backend's
// history-hash logits make every output depend on the whole sequence held, so a token that leaked
// from an earlier request (or was lost) changes the output. The CPU backend on the tiny fixture
// checks that an extended prompt evaluates only its new tokens and gives a cold run's logits.
#include <gtest/gtest.h>

#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "common/test_util.h"
#include "model/model.h"
#include "runtime/engine.h"
#include "runtime/scripted_backend.h"

namespace gem::runtime {
namespace {

constexpr int kVocab = 1000;

std::unique_ptr<Engine> scripted_engine(int n_ctx = 512, int n_tile = 16, ScriptFn fn = {}) {
  BackendOptions bo;
  bo.n_ctx = n_ctx;
  bo.n_tile = n_tile;
  ScriptedOptions so;
  so.n_vocab = kVocab;
  return std::make_unique<Engine>(std::make_unique<ScriptedBackend>(bo, so, std::move(fn)));
}

ScriptedBackend& scripted(Engine& e) { return static_cast<ScriptedBackend&>(e.backend()); }

std::vector<int32_t> make_prompt(int n, int salt) {
  std::vector<int32_t> p = {2};
  for (int i = 1; i < n; ++i) p.push_back(200 + (i * 37 + salt * 11) % 700);
  return p;
}

struct Outcome {
  GenerateResult result;
  std::vector<int32_t> tokens;
};

Outcome gen(Engine& e, const std::vector<int32_t>& prompt, int max_tokens = 12, uint64_t seed = 7,
        float temperature = 0.8f) {
  GenerateRequest req;
  req.prompt = prompt;
  req.max_tokens = max_tokens;
  req.sampling.seed = seed;
  req.sampling.temperature = temperature;
  Outcome r;
  GenerateCallbacks cb;
  cb.on_token = [&](int32_t t) {
    r.tokens.push_back(t);
    return true;
  };
  auto res = e.generate(req, cb);
  EXPECT_TRUE(res.ok()) << res.message();
  if (res.ok()) r.result = *res;
  return r;
}

TEST(Engine, ExtendingPromptEvaluatesOnlyNewTokensAndMatchesColdRun) {
  auto warm = scripted_engine();
  const auto p1 = make_prompt(40, 1);
  auto p2 = p1;
  for (int i = 0; i < 25; ++i) p2.push_back(300 + i);
  const Outcome first = gen(*warm, p1);
  EXPECT_EQ(first.result.n_cached, 0);
  EXPECT_EQ(first.result.n_evaluated, 40);
  const int64_t before = scripted(*warm).n_evaluated_total();
  const Outcome second = gen(*warm, p2);
  EXPECT_EQ(second.result.n_cached, 40);
  EXPECT_EQ(second.result.n_prompt, 65);
  EXPECT_EQ(second.result.n_evaluated, 25);
  // 25 new prompt tokens, then one eval per generated token except the last.
  EXPECT_EQ(scripted(*warm).n_evaluated_total() - before, 25 + second.result.n_generated - 1);

  auto cold = scripted_engine();
  const Outcome reference = gen(*cold, p2);
  EXPECT_EQ(second.tokens, reference.tokens);
  // Nothing generated stays behind: the backend holds exactly the prompt.
  EXPECT_EQ(scripted(*warm).tokens(), p2);
  EXPECT_EQ(warm->cached_tokens(), p2);
}

TEST(Engine, IdenticalReplayReusesLogitsAndGivesTheSameOutput) {
  auto e = scripted_engine();
  const auto p = make_prompt(50, 2);
  const Outcome a = gen(*e, p);
  const int64_t before = scripted(*e).n_evaluated_total();
  const Outcome b = gen(*e, p);
  EXPECT_EQ(b.result.n_cached, 50);
  EXPECT_EQ(b.result.n_evaluated, 0);
  EXPECT_EQ(scripted(*e).n_evaluated_total() - before, b.result.n_generated - 1);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_EQ(a.tokens.size(), 12u);
}

TEST(Engine, DivergentAndShorterPromptsStartOver) {
  auto e = scripted_engine();
  const auto p1 = make_prompt(60, 3);
  auto p_div = p1;
  p_div[20] = 999;
  const std::vector<int32_t> p_short(p1.begin(), p1.begin() + 30);
  gen(*e, p1);
  const Outcome div = gen(*e, p_div);
  EXPECT_EQ(div.result.n_cached, 0);
  EXPECT_EQ(div.result.n_evaluated, 60);
  const Outcome shorter = gen(*e, p_short);
  EXPECT_EQ(shorter.result.n_cached, 0);
  auto cold1 = scripted_engine();
  EXPECT_EQ(div.tokens, gen(*cold1, p_div).tokens);
  auto cold2 = scripted_engine();
  EXPECT_EQ(shorter.tokens, gen(*cold2, p_short).tokens);
}

TEST(Engine, CancelDuringPromptRestoresTheCachedState) {
  auto e = scripted_engine(512, 8);
  const auto p1 = make_prompt(30, 4);
  auto p2 = p1;
  for (int i = 0; i < 40; ++i) p2.push_back(400 + i);
  gen(*e, p1);
  GenerateRequest req;
  req.prompt = p2;
  int calls = 0;
  GenerateCallbacks cb;
  cb.on_prompt_progress = [&](int done, int total) {
    EXPECT_EQ(total, 70);
    if (calls == 0) {
      EXPECT_EQ(done, 30);  // the first report is the cached part
    }
    return ++calls < 3;                   // cancel after two tiles
  };
  bool token_seen = false;
  cb.on_token = [&](int32_t) {
    token_seen = true;
    return true;
  };
  auto res = e->generate(req, cb);
  ASSERT_TRUE(res.ok()) << res.message();
  EXPECT_EQ(res->finish, FinishReason::kCancelledInPrompt);
  EXPECT_FALSE(token_seen);
  EXPECT_EQ(scripted(*e).tokens(), p1);  // rolled back to the previous request's boundary
  // The next request still reuses the old prompt and matches a fresh engine.
  const Outcome after = gen(*e, p2);
  EXPECT_EQ(after.result.n_cached, 30);
  auto cold = scripted_engine(512, 8);
  EXPECT_EQ(after.tokens, gen(*cold, p2).tokens);
}

TEST(Engine, StopByCallerDuringGenerationRollsBack) {
  auto e = scripted_engine();
  const auto p = make_prompt(20, 5);
  GenerateRequest req;
  req.prompt = p;
  req.sampling.seed = 3;
  int n = 0;
  GenerateCallbacks cb;
  cb.on_token = [&](int32_t) { return ++n < 4; };
  auto res = e->generate(req, cb);
  ASSERT_TRUE(res.ok());
  EXPECT_EQ(res->finish, FinishReason::kStoppedByCaller);
  EXPECT_EQ(res->n_generated, 4);
  EXPECT_EQ(scripted(*e).tokens(), p);
  auto cold = scripted_engine();
  EXPECT_EQ(gen(*e, p, 12, 9).tokens, gen(*cold, p, 12, 9).tokens);
}

TEST(Engine, LengthLimitsAndContext) {
  auto e = scripted_engine(64);
  const Outcome limited = gen(*e, make_prompt(10, 6), 5);
  EXPECT_EQ(limited.result.finish, FinishReason::kLength);
  EXPECT_EQ(limited.result.n_generated, 5);
  // No limit: generation runs until the sequence fills the context, never past it.
  const Outcome full = gen(*e, make_prompt(50, 6), -1);
  EXPECT_EQ(full.result.finish, FinishReason::kContextFull);
  EXPECT_EQ(full.result.n_prompt + full.result.n_generated, 64);
  // A prompt that leaves no room is an error naming both sizes.
  GenerateRequest req;
  req.prompt = make_prompt(64, 6);
  auto res = e->generate(req, {});
  ASSERT_FALSE(res.ok());
  EXPECT_NE(res.message().find("64 tokens"), std::string::npos) << res.message();
  EXPECT_NE(res.message().find("exceeds the available context size"), std::string::npos);
  req.prompt.clear();
  EXPECT_FALSE(e->generate(req, {}).ok());
}

TEST(Engine, ScriptStopsAtEndOfGenerationAndConstraintForces) {
  auto e = scripted_engine(512, 16, [](std::span<const int32_t>) {
    return std::vector<int32_t>{500, 501, 502, tok::kTurnEnd, 503};
  });
  const Outcome r = gen(*e, make_prompt(10, 7), 50);
  EXPECT_EQ(r.tokens, (std::vector<int32_t>{500, 501, 502, tok::kTurnEnd}));
  EXPECT_EQ(r.result.finish, FinishReason::kEog);

  GenerateRequest req;
  req.prompt = make_prompt(10, 7);
  req.max_tokens = 3;
  req.constraint = [](std::span<float> logits, std::span<const int32_t> gen) -> int32_t {
    if (gen.empty()) return 42;          // forced
    logits[501] = -INFINITY;             // banned: the script's next token
    return -1;
  };
  std::vector<int32_t> got;
  GenerateCallbacks cb;
  cb.on_token = [&](int32_t t) {
    got.push_back(t);
    return true;
  };
  ASSERT_TRUE(e->generate(req, cb).ok());
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0], 42);
  EXPECT_NE(got[1], 501);
}

// The real CPU backend on the tiny fixture: an extended prompt evaluates only its new tokens
// and its last-row logits equal a cold run's; greedy continuations agree too.
TEST(Engine, CpuBackendPrefixReuseMatchesColdRun) {
  const std::string path = test::fixture("tiny-q4_0.gguf");
  GEM_REQUIRE_FIXTURE(path);
  auto make = [&](std::unique_ptr<model::Model>* keep) {
    auto m = model::load_model(path);
    EXPECT_TRUE(m.ok()) << m.message();
    BackendOptions bo;
    bo.n_ctx = 256;
    bo.n_tile = 16;
    bo.n_threads = 2;
    auto b = cpu::make_cpu_backend(**m, bo);
    EXPECT_TRUE(b.ok()) << b.message();
    *keep = std::move(*m);
    return std::make_unique<Engine>(std::move(*b));
  };
  std::unique_ptr<model::Model> m1, m2;
  auto warm = make(&m1);
  auto cold = make(&m2);
  // Long enough that the sliding rings (window 16) wrap, both in the prompt and in generation.
  const auto p1 = make_prompt(70, 8);
  auto p2 = p1;
  for (int i = 0; i < 23; ++i) p2.push_back(1000 + i * 13);
  gen(*warm, p1, 6, 1, 0.0f);
  const Outcome w = gen(*warm, p2, 6, 1, 0.0f);
  EXPECT_EQ(w.result.n_cached, 70);
  EXPECT_EQ(w.result.n_evaluated, 23);
  const std::vector<float> warm_logits(warm->prompt_logits().begin(), warm->prompt_logits().end());
  const Outcome c = gen(*cold, p2, 6, 1, 0.0f);
  EXPECT_EQ(c.result.n_cached, 0);
  const std::span<const float> cold_logits = cold->prompt_logits();
  ASSERT_EQ(warm_logits.size(), cold_logits.size());
  double max_diff = 0.0;
  for (size_t i = 0; i < warm_logits.size(); ++i) {
    max_diff = std::max(max_diff, static_cast<double>(std::fabs(warm_logits[i] - cold_logits[i])));
  }
  EXPECT_LT(max_diff, 1e-3) << "warm vs cold last-row logits";
  EXPECT_EQ(w.tokens, c.tokens);
  // An identical replay and a divergent prompt stay correct on the real backend too.
  const Outcome replay = gen(*warm, p2, 6, 1, 0.0f);
  EXPECT_EQ(replay.result.n_evaluated, 0);
  EXPECT_EQ(replay.tokens, c.tokens);
  auto p3 = p2;
  p3[40] = 777;
  const Outcome div = gen(*warm, p3, 6, 1, 0.0f);
  EXPECT_EQ(div.result.n_cached, 0);
  EXPECT_EQ(div.tokens, gen(*cold, p3, 6, 1, 0.0f).tokens);
}

}  // namespace
}  // namespace gem::runtime
