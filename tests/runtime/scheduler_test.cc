// The scheduler (continuous batching over sequence slots) on the CPU backend of the tiny fixture,
// against the same requests served alone by the one-sequence Engine: the CPU backend's batched
// rows change no bit (tests/backend_cpu/batch_test.cc), so every concurrent stream must equal
// its solo run token for token, greedy or sampled with a seed, with or without a constraint.
// Requests overlap deterministically: the first request's progress callback (on the scheduler
// thread) waits until the others are queued. Also: a disconnect or a cancelled prompt leaves the
// others unchanged; a continued conversation finds its own slot after unrelated requests; the
// least recently used slot is the one evicted; a request whose rows the backend refuses fails
// alone; a long prompt delays a generating stream by at
// most one chunk per token (the stall bound). Speculative decoding with several slots:
// tests/server/parallel_test.cc.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <mutex>
#include <chrono>
#include <thread>

#include "backend/cpu/cpu_backend.h"
#include "backend_cpu/fixture_cases.h"
#include "common/forwarding_backend.h"
#include "common/test_util.h"
#include "model/model.h"
#include "runtime/engine.h"
#include "runtime/scheduler.h"

namespace gem::runtime {
namespace {

constexpr int kCtx = 256;
constexpr int kTile = 16;  // the scheduler's chunk

std::unique_ptr<Backend> cpu_backend(int n_slots) {
  BackendOptions o;
  o.n_ctx = kCtx;
  o.n_tile = kTile;
  o.n_threads = 2;
  o.kv_type = model::KvType::kF16;
  o.n_slots = n_slots;
  auto b = cpu::make_cpu_backend(*test::fixture_model("tiny-q4_0.gguf"), o);
  EXPECT_TRUE(b.ok()) << b.message();
  return b.ok() ? std::move(b).value() : nullptr;
}

bool eog(int32_t t) { return t == tok::kEos || t == tok::kTurnEnd || t == tok::kToolRespStart; }

std::vector<int32_t> prompt_of(int n, int salt) {
  std::vector<int32_t> p = {2};
  for (int i = 1; i < n; ++i) p.push_back(300 + (i * 53 + salt * 101) % 4000);
  return p;
}

// A constraint that bans the token the greedy choice would pick at every step whose count of
// generated tokens has the given parity.
Constraint ban_greedy_every_other(size_t parity) {
  return [parity](std::span<float> logits, std::span<const int32_t> generated) {
    if (generated.size() % 2 == parity) {
      const auto best = std::max_element(logits.begin(), logits.end()) - logits.begin();
      logits[static_cast<size_t>(best)] = -INFINITY;
    }
    return int32_t{-1};
  };
}

// A request and what came back.
struct Job {
  GenerateRequest req;
  int stop_after = -1;         // on_token returns false at this many tokens (a disconnect)
  int cancel_at_progress = -1; // on_prompt_progress returns false once done >= this
  std::vector<int32_t> tokens;
  std::vector<int32_t> logprob_tokens;     // with req.top_logprobs >= 0: what on_logprobs named
  std::vector<TokenLogprobs> logprobs;
  GenerateResult result;
  Status status;
};

GenerateRequest request(std::vector<int32_t> prompt, int max_tokens, float temperature = 0.0f,
                        uint64_t seed = 1) {
  GenerateRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.sampling.temperature = temperature;
  r.sampling.seed = seed;
  r.stop_at_eog = false;  // a random model's end of turn would cut runs short
  return r;
}

GenerateCallbacks callbacks(Job& run, std::function<void()> on_first_progress = {}) {
  GenerateCallbacks cb;
  auto first = std::make_shared<std::function<void()>>(std::move(on_first_progress));
  cb.on_prompt_progress = [&run, first](int done, int) {
    if (*first) {
      (*first)();
      *first = nullptr;
    }
    return run.cancel_at_progress < 0 || done < run.cancel_at_progress;
  };
  cb.on_logprobs = [&run](int32_t t, const TokenLogprobs& lp) {
    run.logprob_tokens.push_back(t);
    run.logprobs.push_back(lp);
  };
  cb.on_token = [&run](int32_t t) {
    run.tokens.push_back(t);
    return run.stop_after < 0 || static_cast<int>(run.tokens.size()) < run.stop_after;
  };
  return cb;
}

// The request alone on a fresh one-slot engine.
Job solo(const Job& like) {
  Engine engine(cpu_backend(1));
  Job r;
  r.req = like.req;
  r.stop_after = like.stop_after;
  r.cancel_at_progress = like.cancel_at_progress;
  auto res = engine.generate(r.req, callbacks(r));
  r.status = res.status();
  if (res.ok()) r.result = *res;
  return r;
}

// Runs `runs` concurrently on `s`, one thread each; the first one's first progress callback (on
// the scheduler thread, before any prompt row is evaluated) waits until every request has reached
// the scheduler, so that they all overlap.
void run_concurrently(Scheduler& s, std::vector<Job>& runs) {
  std::vector<std::thread> threads;
  const int n = static_cast<int>(runs.size());
  const uint64_t before = s.stats().n_requests;
  auto others_in = [&s, n, before] {
    for (int i = 0; i < 5000; ++i) {
      if (s.stats().n_requests >= before + static_cast<uint64_t>(n)) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    ADD_FAILURE() << "the requests never overlapped";
  };
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      Job& r = runs[static_cast<size_t>(i)];
      auto res = s.generate(r.req, callbacks(r, i == 0 ? std::function<void()>(others_in)
                                                         : std::function<void()>()));
      r.status = res.status();
      if (res.ok()) r.result = *res;
    });
    // The first request reaches the scheduler first (it takes the first slot).
    while (i == 0 && s.stats().n_requests == before) std::this_thread::yield();
  }
  for (auto& t : threads) t.join();
}

void expect_same_as_solo(const Job& r, const std::string& what) {
  const Job alone = solo(r);
  ASSERT_TRUE(alone.status.ok()) << alone.status.message();
  ASSERT_TRUE(r.status.ok()) << what << ": " << r.status.message();
  EXPECT_EQ(r.tokens, alone.tokens) << what;
  EXPECT_EQ(r.result.finish, alone.result.finish) << what;
  EXPECT_EQ(r.result.n_generated, alone.result.n_generated) << what;
  // Log-probabilities: reported for every token before it, from the same row as alone.
  EXPECT_EQ(r.logprob_tokens, alone.logprob_tokens) << what;
  if (r.req.top_logprobs >= 0) {
    EXPECT_EQ(r.logprob_tokens, r.tokens) << what;
  }
  ASSERT_EQ(r.logprobs.size(), alone.logprobs.size()) << what;
  for (size_t i = 0; i < r.logprobs.size(); ++i) {
    EXPECT_EQ(r.logprobs[i].logprob, alone.logprobs[i].logprob) << what << ", token " << i;
    EXPECT_EQ(r.logprobs[i].top, alone.logprobs[i].top) << what << ", token " << i;
  }
}

// Records the slot of every row of every eval_batch.
class RecordingBackend : public test::ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  Status eval_batch(std::span<const BatchRow> rows) override {
    std::vector<int> slots;
    for (const BatchRow& r : rows) slots.push_back(r.slot);
    {
      std::lock_guard<std::mutex> lock(mu_);
      batches_.push_back(std::move(slots));
    }
    return ForwardingBackend::eval_batch(rows);
  }
  std::vector<std::vector<int>> batches() {
    std::lock_guard<std::mutex> lock(mu_);
    return batches_;
  }

 private:
  std::mutex mu_;
  std::vector<std::vector<int>> batches_;
};

// Four streams of different prompt lengths (several chunks each, past the sliding window), one
// sampled with a seed and one under a constraint, at once on four slots: each equals its solo
// run, the steps really batched several rows, and prompt chunks were shared.
TEST(Scheduler, ConcurrentStreamsEqualEachServedAlone) {
  GEM_REQUIRE_FIXTURE(test::fixture("tiny-q4_0.gguf"));
  RecordingBackend backend(cpu_backend(4));
  Scheduler s(backend, eog);
  std::vector<Job> runs(4);
  runs[0].req = request(prompt_of(45, 0), 30);
  runs[1].req = request(prompt_of(20, 1), 40);
  runs[2].req = request(prompt_of(70, 2), 24, 0.8f, 11);  // sampled, seeded
  runs[3].req = request(prompt_of(33, 3), 36);
  runs[3].req.constraint = ban_greedy_every_other(1);
  run_concurrently(s, runs);
  for (int i = 0; i < 4; ++i) expect_same_as_solo(runs[i], "stream " + std::to_string(i));
  const SchedulerStats st = s.stats();
  EXPECT_GT(st.n_decode_rows, st.n_steps) << "decode steps should hold several slots' rows";
  // The thread's time: evaluations (some with prompt rows), draws and emits, disjoint parts of
  // its busy time.
  EXPECT_GT(st.time.eval_seconds, 0.0);
  EXPECT_GT(st.time.n_prompt_steps, 0u);
  EXPECT_GT(st.time.prompt_eval_seconds, 0.0);
  EXPECT_LT(st.time.prompt_eval_seconds, st.time.eval_seconds);
  EXPECT_GT(st.time.sample_seconds, 0.0);
  EXPECT_GT(st.time.emit_seconds, 0.0);
  EXPECT_GE(st.time.busy_seconds,
            st.time.eval_seconds + st.time.sample_seconds + st.time.emit_seconds + st.time.release_seconds);
  // At most one chunk of prompt rows a step; a prompt ending inside a chunk shares it with the
  // next one (two slots with several rows in one batch).
  bool shared = false;
  for (const std::vector<int>& rows : backend.batches()) {
    EXPECT_LE(rows.size(), static_cast<size_t>(kTile + 4));
    int n_prefilling = 0;
    for (int slot = 0; slot < 4; ++slot) {
      n_prefilling += std::count(rows.begin(), rows.end(), slot) > 1 ? 1 : 0;
    }
    shared = shared || n_prefilling >= 2;
  }
  EXPECT_TRUE(shared) << "no chunk held the rows of two prompts";
}

// More requests than slots: the rest wait for a slot, and every output still equals its solo run.
TEST(Scheduler, RequestsBeyondTheSlotsWaitAndStillMatch) {
  GEM_REQUIRE_FIXTURE(test::fixture("tiny-q4_0.gguf"));
  auto backend = cpu_backend(2);
  ASSERT_NE(backend, nullptr);
  Scheduler s(*backend, eog);
  std::vector<Job> runs(5);
  for (int i = 0; i < 5; ++i) runs[i].req = request(prompt_of(18 + 9 * i, 10 + i), 12 + 3 * i);
  run_concurrently(s, runs);
  for (int i = 0; i < 5; ++i) expect_same_as_solo(runs[i], "request " + std::to_string(i));
}

// logprobs (OpenAI's top_logprobs) under concurrency: every token's log-probabilities come from
// the row it was drawn from, as when the request runs alone (greedy, sampled, constrained, and a
// repeated prompt whose first token comes from the kept logits); then one request alone on the
// solo slot (the single-sequence decode path) reports them too.
TEST(Scheduler, LogprobsOfConcurrentStreamsEqualEachServedAlone) {
  GEM_REQUIRE_FIXTURE(test::fixture("tiny-q4_0.gguf"));
  auto backend = cpu_backend(3);
  ASSERT_NE(backend, nullptr);
  Scheduler s(*backend, eog);
  std::vector<Job> runs(3);
  runs[0].req = request(prompt_of(30, 4), 14);
  runs[1].req = request(prompt_of(21, 5), 12, 0.9f, 7);
  runs[2].req = request(prompt_of(40, 6), 10);
  runs[2].req.constraint = ban_greedy_every_other(0);
  for (int i = 0; i < 3; ++i) runs[i].req.top_logprobs = 1 + 2 * i;
  run_concurrently(s, runs);
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(runs[i].logprobs.size(), runs[i].tokens.size()) << "stream " << i;
    for (const TokenLogprobs& lp : runs[i].logprobs) {
      EXPECT_EQ(lp.top.size(), static_cast<size_t>(runs[i].req.top_logprobs));
    }
    expect_same_as_solo(runs[i], "stream " + std::to_string(i));
  }
  // The same prompt again, alone: its first token from the slot's kept logits, the rest through
  // the solo path (slot 0 takes it: its cache extends furthest only if the prompt was slot 0's).
  Job again;
  again.req = runs[0].req;
  auto res = s.generate(again.req, callbacks(again));
  again.status = res.status();
  if (res.ok()) again.result = *res;
  ASSERT_TRUE(again.status.ok()) << again.status.message();
  EXPECT_EQ(again.result.n_cached, static_cast<int>(again.req.prompt.size()));
  EXPECT_EQ(again.tokens, runs[0].tokens);
  expect_same_as_solo(again, "the repeated request");
}

// One stream disconnects mid-generation, another's prompt is cancelled after its first chunk,
// a third is cancelled before its prompt starts: the two that run to the end equal their solo
// runs, and the cancelled ones end as the Engine ends them.
TEST(Scheduler, CancellationOfOneLeavesTheOthersUnchanged) {
  GEM_REQUIRE_FIXTURE(test::fixture("tiny-q4_0.gguf"));
  auto backend = cpu_backend(5);
  ASSERT_NE(backend, nullptr);
  Scheduler s(*backend, eog);
  std::vector<Job> runs(5);
  runs[0].req = request(prompt_of(40, 20), 30);
  runs[1].req = request(prompt_of(50, 21), 30);
  runs[1].stop_after = 6;  // decode: the client goes away
  runs[2].req = request(prompt_of(60, 22), 30);
  runs[2].cancel_at_progress = kTile;  // prefill: cancelled after its first chunk
  runs[3].req = request(prompt_of(30, 23), 30);
  runs[3].cancel_at_progress = 0;  // before its prompt
  runs[4].req = request(prompt_of(25, 24), 28, 0.7f, 5);
  run_concurrently(s, runs);
  expect_same_as_solo(runs[0], "stream 0");
  expect_same_as_solo(runs[4], "stream 4");
  ASSERT_TRUE(runs[1].status.ok());
  EXPECT_EQ(runs[1].result.finish, FinishReason::kStoppedByCaller);
  EXPECT_EQ(runs[1].tokens.size(), 6u);
  const Job alone1 = solo(runs[1]);
  EXPECT_EQ(runs[1].tokens, alone1.tokens);
  EXPECT_EQ(runs[2].result.finish, FinishReason::kCancelledInPrompt);
  EXPECT_TRUE(runs[2].tokens.empty());
  EXPECT_EQ(runs[3].result.finish, FinishReason::kCancelledInPrompt);
  EXPECT_EQ(runs[3].result.n_evaluated, 0);
  // The slots of the cancelled requests hold nothing of them (a prompt cancelled before its
  // history checkpoint leaves the slot as if the request had not run).
  for (const SlotInfo& si : s.slots()) {
    EXPECT_FALSE(si.busy);
    EXPECT_EQ(si.n_past, si.n_cached) << "slot " << si.id << " rolled back to its cache";
  }
  // And the server goes on: the cancelled prompt, run again, equals its solo run.
  Job again;
  again.req = runs[2].req;
  auto res = s.generate(again.req, callbacks(again));
  again.status = res.status();
  if (res.ok()) again.result = *res;
  Job plain;
  plain.req = runs[2].req;
  const Job alone2 = solo(plain);
  EXPECT_EQ(again.tokens, alone2.tokens);
}

// The stall bound: while a long prompt (11 chunks) is evaluated, a generating stream gets a
// decode row in every step, and no step holds more than one chunk of prompt rows. Both outputs
// equal their solo runs.
TEST(Scheduler, ALongPromptDelaysAStreamByOneChunkPerToken) {
  GEM_REQUIRE_FIXTURE(test::fixture("tiny-q4_0.gguf"));
  RecordingBackend backend(cpu_backend(2));
  Scheduler s(backend, eog);
  Job a, b;
  a.req = request(prompt_of(20, 50), 60);
  b.req = request(prompt_of(170, 51), 8);
  std::atomic<int> a_tokens{0};
  std::thread ta([&] {
    GenerateCallbacks cb = callbacks(a);
    cb.on_token = [&](int32_t t) {
      a.tokens.push_back(t);
      a_tokens.store(static_cast<int>(a.tokens.size()));
      return true;
    };
    auto res = s.generate(a.req, cb);
    a.status = res.status();
    if (res.ok()) a.result = *res;
  });
  while (a_tokens.load() < 3) std::this_thread::yield();
  auto res = s.generate(b.req, callbacks(b));
  b.status = res.status();
  if (res.ok()) b.result = *res;
  ta.join();
  expect_same_as_solo(a, "the generating stream");
  expect_same_as_solo(b, "the long prompt");
  const int slot_b = 1;  // A took slot 0 (the first empty one), B slot 1
  int n_prompt_steps = 0;
  for (const std::vector<int>& rows : backend.batches()) {
    const int of_b = static_cast<int>(std::count(rows.begin(), rows.end(), slot_b));
    const int of_a = static_cast<int>(rows.size()) - of_b;
    if (of_b <= 1) continue;  // not a prompt step of B
    ++n_prompt_steps;
    EXPECT_LE(of_b, kTile) << "one chunk at most per step";
    EXPECT_EQ(of_a, 1) << "the generating stream's decode row rides along";
  }
  EXPECT_EQ(n_prompt_steps, (170 + kTile - 1) / kTile);
}

Job one(Scheduler& s, GenerateRequest req) {
  Job r;
  r.req = std::move(req);
  auto res = s.generate(r.req, callbacks(r));
  r.status = res.status();
  EXPECT_TRUE(res.ok()) << res.message();
  if (res.ok()) r.result = *res;
  return r;
}

// Refuses (evaluating nothing) any batch with a row of token kPoison.
class PoisonedBackend : public test::ForwardingBackend {
 public:
  static constexpr int32_t kPoison = 7777;
  using ForwardingBackend::ForwardingBackend;
  Status eval_batch(std::span<const BatchRow> rows) override {
    for (const BatchRow& r : rows) {
      if (r.token == kPoison) return errorf("poisoned row (slot %d, position %d)", r.slot, r.pos);
    }
    return ForwardingBackend::eval_batch(rows);
  }
};

// A request whose rows the backend refuses fails alone: the streams batched with it go on and
// equal their solo runs.
TEST(Scheduler, AnErrorOfOneLeavesTheOthersUnchanged) {
  GEM_REQUIRE_FIXTURE(test::fixture("tiny-q4_0.gguf"));
  PoisonedBackend backend(cpu_backend(3));
  Scheduler s(backend, eog);
  std::vector<Job> runs(3);
  runs[0].req = request(prompt_of(30, 60), 40);
  runs[1].req = request(prompt_of(40, 61), 10);
  runs[1].req.prompt[35] = PoisonedBackend::kPoison;
  runs[2].req = request(prompt_of(20, 62), 40, 0.9f, 3);
  run_concurrently(s, runs);
  EXPECT_FALSE(runs[1].status.ok());
  EXPECT_NE(runs[1].status.message().find("poisoned row"), std::string::npos)
      << runs[1].status.message();
  expect_same_as_solo(runs[0], "stream 0");
  expect_same_as_solo(runs[2], "stream 2");
  // Its slot starts over; the next request there runs normally.
  Job again = one(s, request(prompt_of(40, 61), 10));
  EXPECT_EQ(again.tokens, solo(again).tokens);
}

// A conversation (A) continues after unrelated requests (B before it, C after) ran on the other
// slots: it finds its own slot (not the least recently used one, B's) and evaluates only its new
// tokens; its output equals a cold run's. A fourth
// conversation (D) with every slot holding a cache evicts the least recently used one (B's).
TEST(Scheduler, ContinuedConversationFindsItsSlotAndLruIsEvicted) {
  GEM_REQUIRE_FIXTURE(test::fixture("tiny-q4_0.gguf"));
  auto backend = cpu_backend(3);
  ASSERT_NE(backend, nullptr);
  Scheduler s(*backend, eog);
  const auto a1 = prompt_of(40, 30), b1 = prompt_of(35, 31), c1 = prompt_of(28, 32),
             d1 = prompt_of(22, 33);
  auto extend = [](std::vector<int32_t> p, int n, int salt) {
    for (int i = 0; i < n; ++i) p.push_back(500 + (i * 7 + salt) % 300);
    return p;
  };
  one(s, request(b1, 8));  // B first: its slot is the least recently used one below
  const Job ra1 = one(s, request(a1, 8));
  const int slot_a = [&] {
    for (const SlotInfo& si : s.slots()) if (si.n_cached == 40) return si.id;
    return -1;
  }();
  ASSERT_GE(slot_a, 0);
  one(s, request(c1, 8));
  // Each took its own (empty) slot: three caches.
  int n_holding = 0;
  for (const SlotInfo& si : s.slots()) n_holding += si.n_cached > 0 ? 1 : 0;
  EXPECT_EQ(n_holding, 3);

  const auto a2 = extend(a1, 17, 1);
  const Job ra2 = one(s, request(a2, 10));
  EXPECT_EQ(ra2.result.n_cached, 40);
  EXPECT_EQ(ra2.result.n_evaluated, 17);
  EXPECT_EQ(s.slots()[static_cast<size_t>(slot_a)].n_cached, 57);
  EXPECT_EQ(ra2.tokens, solo(ra2).tokens);

  // D: no cache to extend, no empty slot: B's slot (least recently used) is evicted.
  const Job rd = one(s, request(d1, 8));
  EXPECT_EQ(rd.result.n_cached, 0);
  EXPECT_EQ(s.stats().n_evictions, 1u);
  // C kept its cache, B lost it.
  const Job rc2 = one(s, request(extend(c1, 5, 2), 6));
  EXPECT_EQ(rc2.result.n_cached, 28);
  const Job rb2 = one(s, request(extend(b1, 5, 3), 6));
  EXPECT_EQ(rb2.result.n_cached, 0);
  EXPECT_EQ(rb2.tokens, solo(rb2).tokens);
  EXPECT_GE(s.stats().n_reuse_hits, 2u);
}

// A history boundary inside the prompt (thinking-off chat turns): the slot keeps the history
// only; the next turn, extending the history, reuses it on the same slot while another
// conversation runs at the same time; outputs equal solo runs.
TEST(Scheduler, HistoryBoundaryReusedUnderConcurrency) {
  GEM_REQUIRE_FIXTURE(test::fixture("tiny-q4_0.gguf"));
  auto backend = cpu_backend(2);
  ASSERT_NE(backend, nullptr);
  Scheduler s(*backend, eog);
  auto p1 = prompt_of(50, 40);
  GenerateRequest r1 = request(p1, 20);
  r1.n_history = 46;  // the last 4 tokens: a generation prompt the next turn will not repeat
  const Job t1 = one(s, r1);
  EXPECT_EQ(t1.tokens, solo(t1).tokens);
  auto p2 = std::vector<int32_t>(p1.begin(), p1.begin() + 46);
  for (int i = 0; i < 30; ++i) p2.push_back(700 + i);
  std::vector<Job> runs(2);
  runs[0].req = request(p2, 25);
  runs[0].req.n_history = 72;
  runs[1].req = request(prompt_of(60, 41), 25);
  run_concurrently(s, runs);
  EXPECT_EQ(runs[0].result.n_cached, 46);
  EXPECT_EQ(runs[0].result.n_evaluated, 30);
  expect_same_as_solo(runs[0], "continued turn");
  expect_same_as_solo(runs[1], "other conversation");
}

}  // namespace
}  // namespace gem::runtime
