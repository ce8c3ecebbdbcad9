// Engine: prefix reuse (extension, identical replay, divergence), rollback after each request,
// cancellation in the prompt and in generation, length limits, constraints. The scripted backend's
// history-hash logits make every output depend on the whole sequence held, so a token that leaked
// from an earlier request (or was lost) changes the output. The CPU backend on the tiny fixture
// checks that an extended prompt evaluates only its new tokens and gives a cold run's logits.
// A history boundary (thinking-off chat turns) keeps the conversation cached across turns whose
// generation prompts the next history does not repeat.
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
        float temperature = 0.8f, int n_history = -1) {
  GenerateRequest req;
  req.prompt = prompt;
  req.n_history = n_history;
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
  // A fixed seed: with the script's token banned the second draw is from a flat row, where an
  // unseeded draw lands on an end-of-generation token now and then (3 of the 1,000 ids).
  req.sampling.seed = 7;
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

// logprobs: every drawn token's, before on_token, from the raw row it was drawn from (the
// backend's, not the constraint's masked copy), with the top n in order.
TEST(Engine, LogprobsComeFromTheRawRowOfEachDraw) {
  auto e = scripted_engine(512, 16, [](std::span<const int32_t>) {
    return std::vector<int32_t>{500, 501, 502, 503, 504};
  });
  for (bool constrained : {false, true}) {
    SCOPED_TRACE(constrained ? "with a constraint" : "without a constraint");
    GenerateRequest req;
    req.prompt = make_prompt(10, constrained ? 3 : 4);
    req.max_tokens = 4;
    req.sampling.temperature = 0.0f;
    req.top_logprobs = 5;
    if (constrained) {
      req.constraint = [](std::span<float> logits, std::span<const int32_t>) -> int32_t {
        logits[501] = -INFINITY;  // the script's second token
        return -1;
      };
    }
    std::vector<int32_t> tokens, reported;
    GenerateCallbacks cb;
    cb.on_logprobs = [&](int32_t token, const TokenLogprobs& lp) {
      reported.push_back(token);
      // The backend's last row is the one this token was drawn from.
      const TokenLogprobs want = row_logprobs(e->backend().logits(-1), token, 5);
      EXPECT_EQ(lp.logprob, want.logprob);
      EXPECT_EQ(lp.top, want.top);
      ASSERT_EQ(lp.top.size(), 5u);
      for (size_t i = 1; i < lp.top.size(); ++i) EXPECT_GE(lp.top[i - 1].second, lp.top[i].second);
      if (constrained && tokens.size() == 1) {
        EXPECT_EQ(lp.top[0].first, 501) << "the raw row: the banned token still leads";
        EXPECT_NE(token, 501);
      }
    };
    cb.on_token = [&](int32_t t) {
      tokens.push_back(t);
      return true;
    };
    ASSERT_TRUE(e->generate(req, cb).ok());
    EXPECT_EQ(reported, tokens) << "one report per token, before it";
    EXPECT_EQ(tokens.size(), 4u);
  }
}

// Thinking-off chat turns: P1 = H + G1 (G1 the generation prompt, here an empty thought
// channel), then P2 = H + A + U + G2 where the history renders the answer A without G1. The
// request marks H (and then H + A + U) as history, so the engine keeps exactly that cached.
struct ChatTurns {
  std::vector<int32_t> h, p1, p2;
  int n_history2 = 0;
};

ChatTurns chat_turns(int n_h, int salt) {
  const std::vector<int32_t> gen_prompt = {100, 101, 102, 103};  // differs from A's first token
  ChatTurns t;
  t.h = make_prompt(n_h, salt);
  t.p1 = t.h;
  t.p1.insert(t.p1.end(), gen_prompt.begin(), gen_prompt.end());
  t.p2 = t.h;
  for (int i = 0; i < 23; ++i) t.p2.push_back(600 + (i * 29 + salt) % 300);  // A, then U
  t.n_history2 = static_cast<int>(t.p2.size());
  t.p2.insert(t.p2.end(), gen_prompt.begin(), gen_prompt.end());
  return t;
}

std::vector<int32_t> head(const std::vector<int32_t>& v, int n) {
  return std::vector<int32_t>(v.begin(), v.begin() + n);
}

TEST(Engine, HistoryBoundaryKeepsTheConversationCachedAcrossTurns) {
  auto warm = scripted_engine();
  const ChatTurns t = chat_turns(40, 11);
  const int n_h = static_cast<int>(t.h.size());
  const Outcome first = gen(*warm, t.p1, 12, 7, 0.8f, n_h);
  EXPECT_EQ(first.result.n_cached, 0);
  EXPECT_EQ(first.result.n_evaluated, n_h + 4);
  // Rolled back to the history boundary, not to the end of the prompt.
  EXPECT_EQ(scripted(*warm).tokens(), t.h);
  EXPECT_EQ(warm->cached_tokens(), t.h);
  auto cold0 = scripted_engine();
  EXPECT_EQ(first.tokens, gen(*cold0, t.p1).tokens);

  const int64_t before = scripted(*warm).n_evaluated_total();
  const Outcome second = gen(*warm, t.p2, 12, 7, 0.8f, t.n_history2);
  EXPECT_EQ(second.result.n_cached, n_h);
  EXPECT_EQ(second.result.n_prompt, static_cast<int>(t.p2.size()));
  EXPECT_EQ(second.result.n_evaluated, static_cast<int>(t.p2.size()) - n_h);
  EXPECT_EQ(scripted(*warm).n_evaluated_total() - before,
            static_cast<int64_t>(t.p2.size()) - n_h + second.result.n_generated - 1);
  auto cold = scripted_engine();
  EXPECT_EQ(second.tokens, gen(*cold, t.p2).tokens);
  EXPECT_EQ(scripted(*warm).tokens(), head(t.p2, t.n_history2));

  // Regenerating the turn re-evaluates only the generation prompt and gives the same output.
  const Outcome again = gen(*warm, t.p2, 12, 7, 0.8f, t.n_history2);
  EXPECT_EQ(again.result.n_cached, t.n_history2);
  EXPECT_EQ(again.result.n_evaluated, 4);
  EXPECT_EQ(again.tokens, second.tokens);
  // A prompt that is exactly the kept history replays its saved last-row logits.
  const std::vector<int32_t> hist = head(t.p2, t.n_history2);
  const Outcome exact = gen(*warm, hist, 12, 7, 0.8f, t.n_history2);
  EXPECT_EQ(exact.result.n_cached, t.n_history2);
  EXPECT_EQ(exact.result.n_evaluated, 0);
  auto cold2 = scripted_engine();
  EXPECT_EQ(exact.tokens, gen(*cold2, hist).tokens);
  // Without a boundary the whole prompt stays cached, as before.
  const Outcome whole = gen(*warm, t.p2);
  EXPECT_EQ(whole.result.n_cached, t.n_history2);
  EXPECT_EQ(scripted(*warm).tokens(), t.p2);
  EXPECT_EQ(whole.tokens, second.tokens);
}

TEST(Engine, HistoryBoundaryCancellationKeepsAValidCache) {
  const ChatTurns t = chat_turns(30, 12);
  const int n_h = static_cast<int>(t.h.size());
  for (int cancel_at : {1, 2}) {  // a tile of the history part, then the generation prompt
    auto e = scripted_engine(512, 8);
    gen(*e, t.p1, 12, 7, 0.8f, n_h);
    GenerateRequest req;
    req.prompt = t.p2;
    req.n_history = t.n_history2;
    int calls = 0;
    std::vector<int> done_seen;
    GenerateCallbacks cb;
    cb.on_prompt_progress = [&](int done, int total) {
      EXPECT_EQ(total, static_cast<int>(t.p2.size()));
      done_seen.push_back(done);
      // Reports: the cached part, 3 tiles of the 23 history tokens, then the generation prompt.
      return calls++ < (cancel_at == 1 ? 1 : 4);
    };
    cb.on_token = [&](int32_t) {
      ADD_FAILURE() << "a token after cancellation";
      return true;
    };
    auto res = e->generate(req, cb);
    ASSERT_TRUE(res.ok()) << res.message();
    EXPECT_EQ(res->finish, FinishReason::kCancelledInPrompt);
    ASSERT_FALSE(done_seen.empty());
    EXPECT_EQ(done_seen.front(), n_h);
    for (size_t i = 1; i < done_seen.size(); ++i) EXPECT_GT(done_seen[i], done_seen[i - 1]);
    // In the history part: back to the previous boundary. In the generation prompt: the new
    // history is complete and stays (nothing generated, nothing of the tail kept).
    const std::vector<int32_t> kept = cancel_at == 1 ? t.h : head(t.p2, t.n_history2);
    EXPECT_EQ(scripted(*e).tokens(), kept);
    EXPECT_EQ(e->cached_tokens(), kept);
    const Outcome after = gen(*e, t.p2, 12, 7, 0.8f, t.n_history2);
    EXPECT_EQ(after.result.n_cached, static_cast<int>(kept.size()));
    auto cold = scripted_engine(512, 8);
    EXPECT_EQ(after.tokens, gen(*cold, t.p2).tokens);
  }
}

// Cancellation is a status code (Status::is_cancelled), not words: a backend failure whose
// message happens to begin with "cancelled" is an error the caller sees, not a quiet cancel.
class FailingBackend : public ScriptedBackend {
 public:
  using ScriptedBackend::ScriptedBackend;
  Status eval(std::span<const int32_t> tokens, bool all_logits,
              const TileCallback& on_tile) override {
    if (tokens.size() > 1) return Status::error("cancelled by the driver: device lost");
    return ScriptedBackend::eval(tokens, all_logits, on_tile);
  }
};

TEST(Engine, CancellationIsAStatusCodeNotAMessagePrefix) {
  BackendOptions bo;
  bo.n_ctx = 128;
  bo.n_tile = 8;
  ScriptedOptions so;
  so.n_vocab = kVocab;
  Engine e(std::make_unique<FailingBackend>(bo, so, ScriptFn{}));
  GenerateRequest req;
  req.prompt = make_prompt(20, 1);
  auto res = e.generate(req, GenerateCallbacks{});
  ASSERT_FALSE(res.ok()) << "a backend error was taken for a cancellation";
  EXPECT_FALSE(res.status().is_cancelled());
  EXPECT_NE(res.message().find("device lost"), std::string::npos) << res.message();

  // The backends report a refused tile with the code.
  ScriptedBackend sb(bo, so, ScriptFn{});
  const auto p = make_prompt(20, 2);
  const Status st = sb.eval(p, false, [](int, int) { return false; });
  EXPECT_TRUE(st.is_cancelled()) << st.message();
  EXPECT_EQ(st.code(), StatusCode::kCancelled);
  // Context keeps the code.
  EXPECT_TRUE(st.with_context("prompt: ").is_cancelled());
  EXPECT_FALSE(Status::error("cancelled").is_cancelled());
}

// An engine on the CPU backend over the model at `path` (context 256, tiles of 16, 2 threads);
// *keep owns the model, which must outlive the engine.
std::unique_ptr<Engine> make_cpu_engine(const std::string& path,
                                        std::unique_ptr<model::Model>* keep) {
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
}

// The real CPU backend on the tiny fixture: an extended prompt evaluates only its new tokens
// and its last-row logits equal a cold run's; greedy continuations agree too.
TEST(Engine, CpuBackendPrefixReuseMatchesColdRun) {
  const std::string path = test::fixture("tiny-q4_0.gguf");
  GEM_REQUIRE_FIXTURE(path);
  auto make = [&](std::unique_ptr<model::Model>* keep) { return make_cpu_engine(path, keep); };
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

// The CPU backend's refused tile is a kCancelled status, and the engine turns it into
// kCancelledInPrompt.
TEST(Engine, CpuBackendCancellationCarriesTheCode) {
  const std::string path = test::fixture("tiny-q4_0.gguf");
  GEM_REQUIRE_FIXTURE(path);
  std::unique_ptr<model::Model> keep;
  auto e = make_cpu_engine(path, &keep);
  const auto p = make_prompt(40, 3);
  const Status st = e->backend().eval(p, false, [](int done, int) { return done < 16; });
  EXPECT_TRUE(st.is_cancelled()) << st.message();
  e->clear_cache();
  GenerateRequest req;
  req.prompt = p;
  GenerateCallbacks cb;
  int calls = 0;
  cb.on_prompt_progress = [&](int, int) { return ++calls < 2; };
  auto res = e->generate(req, cb);
  ASSERT_TRUE(res.ok()) << res.message();
  EXPECT_EQ(res->finish, FinishReason::kCancelledInPrompt);
}

// The CPU backend with a history boundary: the checkpoint sits inside the prompt, so the ring
// slots written by the generation prompt and by a generation long enough to wrap every ring
// (window 16) must all be put back. Every step's logits equal a cold run's.
TEST(Engine, CpuBackendHistoryBoundaryMatchesColdRun) {
  const std::string path = test::fixture("tiny-q4_0.gguf");
  GEM_REQUIRE_FIXTURE(path);
  auto make = [&](std::unique_ptr<model::Model>* keep) { return make_cpu_engine(path, keep); };
  // Greedy, recording the logits row of every step (the constraint sees a copy of it).
  auto run = [](Engine& e, const std::vector<int32_t>& prompt, int n_history,
                std::vector<std::vector<float>>* rows) {
    GenerateRequest req;
    req.prompt = prompt;
    req.n_history = n_history;
    req.max_tokens = 24;
    req.stop_at_eog = false;
    req.sampling.temperature = 0.0f;
    req.constraint = [rows](std::span<float> logits, std::span<const int32_t>) {
      rows->emplace_back(logits.begin(), logits.end());
      return -1;
    };
    Outcome r;
    GenerateCallbacks cb;
    cb.on_token = [&](int32_t tkn) {
      r.tokens.push_back(tkn);
      return true;
    };
    auto res = e.generate(req, cb);
    EXPECT_TRUE(res.ok()) << res.message();
    if (res.ok()) r.result = *res;
    return r;
  };
  auto max_diff = [](const std::vector<std::vector<float>>& a,
                     const std::vector<std::vector<float>>& b) {
    EXPECT_EQ(a.size(), b.size());
    double d = 0.0;
    for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
      EXPECT_EQ(a[i].size(), b[i].size());
      for (size_t j = 0; j < std::min(a[i].size(), b[i].size()); ++j) {
        d = std::max(d, static_cast<double>(std::fabs(a[i][j] - b[i][j])));
      }
    }
    return d;
  };
  std::unique_ptr<model::Model> m1, m2;
  auto warm = make(&m1);
  auto cold = make(&m2);
  const ChatTurns t = chat_turns(70, 13);
  const int n_h = static_cast<int>(t.h.size());
  std::vector<std::vector<float>> w1, c1, w2, c2, w3;
  const Outcome first = run(*warm, t.p1, n_h, &w1);
  const Outcome first_cold = run(*cold, t.p1, -1, &c1);
  EXPECT_EQ(first.tokens, first_cold.tokens);
  EXPECT_LT(max_diff(w1, c1), 1e-3) << "first turn, warm vs cold logits";
  const Outcome second = run(*warm, t.p2, t.n_history2, &w2);
  EXPECT_EQ(second.result.n_cached, n_h);
  EXPECT_EQ(second.result.n_evaluated, static_cast<int>(t.p2.size()) - n_h);
  cold->clear_cache();
  const Outcome second_cold = run(*cold, t.p2, -1, &c2);
  EXPECT_EQ(second_cold.result.n_cached, 0);
  EXPECT_EQ(second.tokens, second_cold.tokens);
  EXPECT_LT(max_diff(w2, c2), 1e-3) << "second turn, warm vs cold logits";
  // Regenerating: only the generation prompt is evaluated again, the same logits come out.
  const Outcome again = run(*warm, t.p2, t.n_history2, &w3);
  EXPECT_EQ(again.result.n_evaluated, 4);
  EXPECT_EQ(again.tokens, second_cold.tokens);
  EXPECT_LT(max_diff(w3, c2), 1e-3) << "regenerated turn, warm vs cold logits";
}

}  // namespace
}  // namespace gem::runtime
