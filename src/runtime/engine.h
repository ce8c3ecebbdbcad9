// The engine: one sequence, one request at a time, on one backend. Owns the prefix cache
// (DESIGN.md Runtime): a new prompt reuses the cached state only when it strictly extends the
// cached tokens; after each request the state is rolled back to the request boundary (the end
// of its prompt), so nothing generated leaks into the next request. Cancellation (a callback
// returning false) stops at the next prompt tile or token and restores the state.
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

struct GenerateRequest {
  std::vector<int32_t> prompt;  // the whole prompt, <bos> included
  SamplingParams sampling;
  int max_tokens = -1;          // -1: until end of generation or the context is full
  bool stop_at_eog = true;      // stop at <eos>, <turn|>, <|tool_response>
};

struct GenerateCallbacks {
  // After each prompt tile: (prompt tokens done, including cached ones; total). false cancels.
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
  int n_generated = 0;   // tokens passed to on_token
  double prompt_seconds = 0.0;
  double decode_seconds = 0.0;
};

class Engine {
 public:
  Engine(std::unique_ptr<model::Model> model, std::unique_ptr<Backend> backend,
         std::unique_ptr<Tokenizer> tokenizer);
  ~Engine();

  // Runs one request to completion (or cancellation). Errors: a prompt that does not fit the
  // context (message names both sizes), an empty prompt, backend failures.
  Result<GenerateResult> generate(const GenerateRequest& request, const GenerateCallbacks& cb);

  const model::Model& model() const { return *model_; }
  const model::Config& config() const { return model_->config; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  Backend& backend() { return *backend_; }
  int n_ctx() const { return backend_->options().n_ctx; }
  // Tokens of the cached prompt (for tests and /slots-like introspection).
  const std::vector<int32_t>& cached_tokens() const { return cached_; }
  void clear_cache();

 private:
  std::unique_ptr<model::Model> model_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::vector<int32_t> cached_;          // prompt of the last request, as held in the backend
  std::vector<float> cached_logits_;     // logits of its last row (an identical replay reuses them)
};

}  // namespace gem::runtime
