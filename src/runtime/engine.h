// The engine: one sequence, one request at a time, on one backend. Owns the prefix cache
// (DESIGN.md Runtime): a new prompt reuses the cached state only when it strictly extends the
// cached tokens (an identical prompt reuses the cached last-row logits); after each request the
// state is rolled back to the request boundary (the end of its prompt) with Backend::restore(),
// so nothing generated leaks into the next request. Cancellation (a callback returning false)
// stops at the next prompt tile or token and restores the state as if the request had not run.
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

struct GenerateRequest {
  std::vector<int32_t> prompt;  // the whole prompt, <bos> included
  SamplingParams sampling;
  int max_tokens = -1;          // -1: until end of generation or the context is full
  bool stop_at_eog = true;      // stop at <eos>, <turn|>, <|tool_response>
  Constraint constraint;        // optional
};

struct GenerateCallbacks {
  // Before the prompt (done = cached tokens) and after each prompt tile: (prompt tokens done,
  // cached ones included; total). false cancels.
  std::function<bool(int done, int total)> on_prompt_progress;
  // Each generated token (the end-of-generation token too). false stops generation (the caller
  // decides why: a stop string, a disconnect).
  std::function<bool(int32_t token)> on_token;
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
  // Tokens of the cached prompt (for tests and /slots-like introspection).
  const std::vector<int32_t>& cached_tokens() const { return cached_; }
  // Logits of the cached prompt's last row (what its first generated token was drawn from).
  std::span<const float> prompt_logits() const { return cached_logits_; }
  void clear_cache();

  // Progress log cadence for long prompts (tokens between log lines).
  static constexpr int kProgressLogStep = 4096;

 private:
  // Brings the backend to the state of `prompt` (reusing the cache when allowed) and leaves the
  // last row's logits in cached_logits_. Returns false when cancelled.
  Result<bool> prefill(const std::vector<int32_t>& prompt, const GenerateCallbacks& cb,
                       GenerateResult& result);

  std::unique_ptr<model::Model> model_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::vector<int32_t> cached_;          // prompt of the last request, as held in the backend
  std::vector<float> cached_logits_;     // logits of its last row (an identical replay reuses them)
  std::vector<float> scratch_logits_;    // mutable copy for constraints
};

}  // namespace gem::runtime
