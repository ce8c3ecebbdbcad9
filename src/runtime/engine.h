// The engine: one sequence, one request at a time, on one backend. Owns the prefix cache
// (DESIGN.md Runtime): a new prompt reuses the cached state only when it strictly extends the
// cached tokens (an identical prompt reuses the cached last-row logits); after each request the
// state is rolled back with Backend::restore() to the request's history boundary, so nothing
// generated leaks into the next request.
//
// The history boundary (GenerateRequest::n_history) is where the conversation ends and the
// generation prompt begins. It defaults to the end of the prompt. A chat request whose next turn
// will not repeat its generation prompt sets it earlier: with thinking off Gemma 4 opens the reply
// with an empty thought channel that the history renders without, so the follow-up prompt
// diverges a few tokens before the end of this one and would otherwise start over. The engine
// evaluates the prompt in two parts, takes the checkpoint at the boundary, and afterwards keeps
// only the history (and its last-row logits) cached: any prompt extending the history reuses it,
// and a regeneration re-evaluates just the generation prompt.
//
// Cancellation (a callback returning false) stops at the next prompt tile or token. In the history
// part it restores the state as if the request had not run; in the generation prompt (after the
// boundary's checkpoint) it leaves the new history cached, which a retry extends.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "base/status.h"
#include "model/model.h"
#include "sampler/sampler.h"
#include "tokenizer/tokenizer.h"

namespace gem::runtime {

// Per-step constraint on what may be sampled (the server's tool_choice). Called before each
// draw with the tokens generated so far; it may lower entries of `logits` (a mutable copy of the
// backend's row) to -inf, or return a token id >= 0 to force that token without sampling.
// Returns -1 to sample normally.
using Constraint = std::function<int32_t(std::span<float> logits,
                                         std::span<const int32_t> generated)>;

// A source of draft tokens for speculative decoding (the MTP assistant, or a test's oracle).
// propose() returns up to k tokens expected to follow `root`, the token just chosen at position
// `pos` from the row `row` of the backend's last eval (a drafter may read that row's state
// through the backend); the engine verifies them with one batched eval and keeps the longest
// prefix the target itself would have chosen, so the output never depends on the drafter.
class DraftSource {
 public:
  virtual ~DraftSource() = default;
  virtual std::vector<int32_t> propose(int32_t root, int pos, int row, int k) = 0;
};

struct GenerateRequest {
  std::vector<int32_t> prompt;  // the whole prompt, <bos> included
  // Leading prompt tokens that are conversation history, kept cached after the request; the rest
  // (the generation prompt) is evaluated after the checkpoint and rolled back with the output.
  // -1 (or >= the prompt size): the whole prompt is kept.
  int n_history = -1;
  SamplingParams sampling;
  int max_tokens = -1;          // -1: until end of generation or the context is full
  bool stop_at_eog = true;      // stop at <eos>, <turn|>, <|tool_response>
  Constraint constraint;        // optional
  // Speculative decoding (optional): drafts of up to draft_max tokens per round, verified in one
  // eval; greedy requests accept the prefix the target itself would choose (the same tokens as
  // without drafting), sampled ones by speculative rejection sampling (the same distribution).
  // Requests with a constraint decode one token at a time.
  DraftSource* drafter = nullptr;
  int draft_max = 8;
  // Log-probabilities of each drawn token with this many alternatives (0..kMaxRowLogprobs),
  // reported through GenerateCallbacks::on_logprobs; -1: none. Such requests decode one token at
  // a time (no drafting).
  int top_logprobs = -1;
  // llama-server's --draft-min: a round drafts at least this many tokens (when the context and
  // max_tokens leave room), and a shorter draft is dropped (that round decodes one token).
  int draft_min = 0;
  // Under the acceptance cap, each round's length is the one with the most tokens a second from
  // the costs measured so far, plain steps included (generation.h, best_draft_len). Tests of the
  // rounds' machinery turn it off, so that every round drafts up to the cap whatever it costs.
  bool draft_by_cost = true;
};

// What speculative rounds cost on this backend and model, learnt across requests (generation.h's
// Speculation reads and updates it): a round's seconds by its draft count (index 0: a plain step;
// 0 = not measured yet) and one draft step's. Greedy and sampled requests keep one each (a
// sampled round also draws its rows on the host).
struct DraftCosts {
  std::vector<double> round_s;
  std::vector<int> n_samples;  // rounds measured, by draft count
  std::vector<int> n_high;     // samples in a row above twice the estimate, by draft count
  double draft_s = 0.0;
  int draft_n = 0;     // draft steps measured
  int draft_high = 0;
};

struct GenerateCallbacks {
  // Before the prompt (done = cached tokens) and after each prompt tile: (prompt tokens done,
  // cached ones included; total). false cancels.
  std::function<bool(int done, int total)> on_prompt_progress;
  // Each generated token (the end-of-generation token too). false stops generation (the caller
  // decides why: a stop string, a disconnect).
  std::function<bool(int32_t token)> on_token;
  // With GenerateRequest::top_logprobs >= 0, just before on_token: the token's log-probabilities
  // in the raw row it was drawn from (Backend::token_logprobs, where the backend holds the row).
  std::function<void(int32_t token, const TokenLogprobs& logprobs)> on_logprobs;
};

enum class FinishReason { kEog, kLength, kContextFull, kStoppedByCaller, kCancelledInPrompt };

struct GenerateResult {
  FinishReason finish = FinishReason::kEog;
  int n_prompt = 0;      // prompt tokens, cached ones included
  int n_cached = 0;      // prompt tokens reused from the previous request
  int n_evaluated = 0;   // prompt tokens actually evaluated by the backend for this request
  int n_generated = 0;   // tokens passed to on_token
  double prompt_seconds = 0.0;
  double decode_seconds = 0.0;
  double callback_seconds = 0.0;      // of decode_seconds, spent in on_token (the caller's work)
  double callback_cpu_seconds = 0.0;  // CPU time of this thread in on_token (no scheduler waits)
  int n_drafted = 0;           // draft tokens verified (llama-server's timings.draft_n)
  int n_draft_accepted = 0;    // of them, accepted (draft_n_accepted)
  // Speculative rounds (a draft verified) and the time of their parts: drafting (propose),
  // verification (the batched eval), truncation of the rejected tail.
  int n_rounds = 0;
  double draft_seconds = 0.0;
  double verify_seconds = 0.0;
  double truncate_seconds = 0.0;
};

class Engine {
 public:
  Engine(std::unique_ptr<model::Model> model, std::unique_ptr<Backend> backend,
         std::unique_ptr<Tokenizer> tokenizer);
  // A bare engine over a backend only (tests, scripted backends): end-of-generation ids are
  // Gemma 4's fixed ones (<eos> 1, <turn|> 106, <|tool_response> 50).
  explicit Engine(std::unique_ptr<Backend> backend);
  ~Engine();

  // Runs one request to completion (or cancellation). Errors: a prompt that does not fit the
  // context (message names both sizes), an empty prompt, backend failures. A cancelled prompt
  // is not an error: finish = kCancelledInPrompt.
  Result<GenerateResult> generate(const GenerateRequest& request, const GenerateCallbacks& cb);

  bool has_model() const { return model_ != nullptr; }
  const model::Model& model() const { return *model_; }
  const model::Config& config() const { return model_->config; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  Backend& backend() { return *backend_; }
  int n_ctx() const { return backend_->options().n_ctx; }
  bool is_eog(int32_t token) const;
  // Tokens held in the cache between requests: the last request's prompt up to its history
  // boundary (for tests and /slots-like introspection).
  const std::vector<int32_t>& cached_tokens() const { return cached_; }
  // Logits of the cached tokens' last row (without a history boundary: what the last request's
  // first generated token was drawn from).
  std::span<const float> prompt_logits() const { return cached_logits_; }
  void clear_cache();

  // Progress log cadence for long prompts (tokens between log lines).
  static constexpr int kProgressLogStep = 4096;

 private:
  // Brings the backend to the state of the request's prompt (reusing the cache when allowed)
  // with the checkpoint at its history boundary (cached_ = the prompt up to it, cached_logits_ =
  // their last row) and points `logits` at the prompt's last row (valid until the next eval).
  // Returns false when cancelled.
  Result<bool> prefill(const GenerateRequest& request, const GenerateCallbacks& cb,
                       GenerateResult& result, std::span<const float>& logits);
  // Backend::restore() to the cached history boundary; the cache is cleared when the backend
  // did not land there (it dropped its checkpoint).
  void rollback();
  // Evaluates prompt[from, to) on top of the cache, reporting progress over the whole prompt.
  // A cancellation comes back as a kCancelled status (Status::is_cancelled).
  Status eval_prompt(std::span<const int32_t> prompt, int from, int to,
                     const GenerateCallbacks& cb);
  // Hands one generated token out: history, count, the caller's callback, then the stop checks
  // (end of generation, the caller, max_tokens, a full context); false when generation ends
  // after it (result.finish says why).
  bool emit(int32_t token, const GenerateRequest& request, const GenerateCallbacks& cb,
            std::vector<int32_t>& history, GenerateResult& result);
  // The decode loop with drafting (no constraint); same emission and stop rules as the plain
  // loop. `logits`: the prompt's last row.
  Status decode_speculative(const GenerateRequest& request, const GenerateCallbacks& cb,
                            std::span<const float> logits, GenerateResult& result);

  std::unique_ptr<model::Model> model_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::vector<int32_t> cached_;          // the last prompt up to its history boundary, as held
  std::vector<float> cached_logits_;     // logits of its last row (an identical replay reuses them)
  std::vector<float> scratch_logits_;    // mutable copy for constraints
  DraftCosts draft_costs_[2];            // greedy, sampled
};

}  // namespace gem::runtime
