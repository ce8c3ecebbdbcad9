// Engine::generate: prefix reuse against the cached history, tiled prefill (history, checkpoint,
// generation prompt) with progress and cancellation, the sampling loop, and the rollback to the
// history boundary afterwards.
#include "runtime/engine.h"

#include <algorithm>
#include <optional>

#include "base/log.h"
#include "base/timer.h"
#include "runtime/generation.h"

namespace gem::runtime {

Engine::Engine(std::unique_ptr<model::Model> model, std::unique_ptr<Backend> backend,
               std::unique_ptr<Tokenizer> tokenizer)
    : model_(std::move(model)), backend_(std::move(backend)), tokenizer_(std::move(tokenizer)) {}

Engine::Engine(std::unique_ptr<Backend> backend) : backend_(std::move(backend)) {}

Engine::~Engine() = default;

bool Engine::is_eog(int32_t token) const {
  if (tokenizer_ != nullptr) return tokenizer_->is_eog(token);
  return token == tok::kEos || token == tok::kTurnEnd || token == tok::kToolRespStart;
}

void Engine::clear_cache() {
  backend_->reset();
  cached_.clear();
  cached_logits_.clear();
}

void Engine::rollback() {
  backend_->restore();
  // A backend that could not keep its checkpoint (no memory for the journal) drops its cache
  // instead: then so does the engine, and the next request starts cold.
  if (backend_->n_past() != static_cast<int>(cached_.size())) clear_cache();
}

Status Engine::eval_prompt(std::span<const int32_t> prompt, int from, int to,
                           const GenerateCallbacks& cb) {
  const int n = static_cast<int>(prompt.size());
  const Timer timer;
  int next_log = ((from / kProgressLogStep) + 1) * kProgressLogStep;
  bool cancel_requested = false;
  TileCallback on_tile = [&](int done, int /*total*/) {
    const int done_all = from + done;
    if (done_all >= next_log && done_all < n) {
      const double secs = timer.seconds();
      const double rate = secs > 0 ? (done_all - from) / secs : 0.0;
      GEM_LOG_INFO("prompt: %d/%d tokens, %.1f tok/s, ETA %.1f s", done_all, n, rate,
                   rate > 0 ? (n - done_all) / rate : 0.0);
      next_log = (done_all / kProgressLogStep + 1) * kProgressLogStep;
    }
    if (cb.on_prompt_progress && !cb.on_prompt_progress(done_all, n)) {
      cancel_requested = true;
      return false;
    }
    return true;
  };
  Status st = backend_->eval(prompt.subspan(from, to - from), /*all_logits=*/false, on_tile);
  // A backend that saw the refusal only after its last tile finishes normally; the request is
  // cancelled all the same.
  if (cancel_requested && st.ok()) return cancelledf("cancelled after %d of %d prompt tokens", to, n);
  return st;
}

Result<bool> Engine::prefill(const GenerateRequest& request, const GenerateCallbacks& cb,
                             GenerateResult& result, std::span<const float>& logits) {
  const std::vector<int32_t>& prompt = request.prompt;
  const int n = static_cast<int>(prompt.size());
  const ReusePlan plan = plan_reuse(cached_, !cached_logits_.empty(), request);
  const bool extends = plan.extends;
  if (plan.identical) {
    // The backend already holds exactly this prompt (rolled back after the last request) and
    // its last-row logits are kept: nothing to evaluate.
    result.n_cached = n;
    if (cb.on_prompt_progress && !cb.on_prompt_progress(n, n)) return false;
    logits = cached_logits_;
    return true;
  }
  const int start = plan.start;
  if (!extends) {
    // A divergent or shorter prompt: the sliding rings cannot be rewound to an arbitrary
    // position, so start over.
    backend_->reset();
    cached_.clear();
    cached_logits_.clear();
  }
  const int boundary = plan.boundary;
  result.n_cached = start;
  if (cb.on_prompt_progress && !cb.on_prompt_progress(start, n)) return false;

  const std::span<const int32_t> tokens(prompt);
  if (boundary > start) {
    Status st = eval_prompt(tokens, start, boundary, cb);
    if (st.is_cancelled()) {
      // Put the state back as if this request had never run.
      if (extends) {
        rollback();
      } else {
        backend_->reset();
      }
      return false;
    }
    if (!st.ok()) {
      clear_cache();
      return st.with_context("prompt evaluation: ");
    }
    backend_->checkpoint();
    const std::span<const float> row = backend_->logits(-1);
    cached_logits_.assign(row.begin(), row.end());
    cached_.assign(prompt.begin(), prompt.begin() + boundary);
    result.n_evaluated += boundary - start;
  }
  // Otherwise the cache already ends at the boundary, its checkpoint and logits in place.
  if (boundary == n) {
    logits = cached_logits_;
    return true;
  }
  // The generation prompt, after the checkpoint: rolled back with the output afterwards.
  Status st = eval_prompt(tokens, boundary, n, cb);
  if (st.is_cancelled()) {
    rollback();  // back to the boundary: the new history stays cached
    return false;
  }
  if (!st.ok()) {
    clear_cache();
    return st.with_context("prompt evaluation: ");
  }
  result.n_evaluated += n - boundary;
  logits = backend_->logits(-1);
  return true;
}

Result<GenerateResult> Engine::generate(const GenerateRequest& request,
                                        const GenerateCallbacks& cb) {
  GenerateResult result;
  const int n = static_cast<int>(request.prompt.size());
  result.n_prompt = n;
  GEM_RETURN_IF_ERROR(check_prompt(n, n_ctx()));

  const Timer prompt_timer;
  std::span<const float> logits;
  Result<bool> filled = prefill(request, cb, result, logits);
  result.prompt_seconds = prompt_timer.seconds();
  if (!filled.ok()) return filled.status();
  if (!*filled) {
    result.finish = FinishReason::kCancelledInPrompt;
    return result;
  }

  const Timer decode_timer;
  if (request.drafter != nullptr && request.draft_max > 0 && !request.constraint &&
      request.top_logprobs < 0) {
    Status st = decode_speculative(request, cb, logits, result);
    result.decode_seconds = decode_timer.seconds();
    rollback();
    if (!st.ok()) {
      clear_cache();
      return st.with_context("generation: ");
    }
    return result;
  }
  Rng rng(resolve_seed(request.sampling.seed));
  std::vector<int32_t> history = request.prompt;  // what the penalties look at
  std::vector<int32_t> generated;
  Status failure;
  for (;;) {
    if (request.max_tokens >= 0 && result.n_generated >= request.max_tokens) {
      result.finish = FinishReason::kLength;
      break;
    }
    int32_t token = -1;
    const double coin = rng.next_double();
    if (!request.constraint && result.n_generated > 0) {
      // The backend may sample on the device (CUDA); otherwise read its logits row.
      std::optional<int32_t> on_device = backend_->sample(request.sampling, history, coin);
      if (on_device) {
        token = *on_device;
      } else {
        if (logits.empty()) logits = backend_->logits(-1);
        token = sample_token(logits, request.sampling, history, coin);
      }
    } else {
      token = draw_on_host(logits, request, history, generated, coin, scratch_logits_);
    }
    generated.push_back(token);
    if (request.top_logprobs >= 0 && cb.on_logprobs) {
      // The raw row the token was drawn from: on the host when it is there already (the first
      // step, a constraint's), else where the backend keeps it.
      cb.on_logprobs(token, logits.empty()
                                ? backend_->token_logprobs(token, request.top_logprobs)
                                : row_logprobs(logits, token, request.top_logprobs));
    }
    if (!emit(token, request, cb, history, result)) break;
    const int32_t one[1] = {token};
    failure = backend_->eval(std::span<const int32_t>(one, 1), /*all_logits=*/false);
    if (!failure.ok()) break;
    // Read lazily: a backend that samples on the device never copies the row.
    logits = request.constraint ? backend_->logits(-1) : std::span<const float>();
  }
  result.decode_seconds = decode_timer.seconds();
  // Roll back to the history boundary: neither the generated tokens nor the generation prompt
  // after the boundary leak into the next request.
  rollback();
  if (!failure.ok()) {
    clear_cache();
    return failure.with_context("generation: ");
  }
  GEM_LOG_DEBUG("request: prompt %d (cached %d), generated %d, prompt %.3f s, decode %.3f s", n,
                result.n_cached, result.n_generated, result.prompt_seconds,
                result.decode_seconds);
  return result;
}

bool Engine::emit(int32_t token, const GenerateRequest& request, const GenerateCallbacks& cb,
                  std::vector<int32_t>& history, GenerateResult& result) {
  return emit_token(token, is_eog(token), n_ctx(), request, cb, history, result);
}

// The decode loop with drafting: the rounds are generation.h's Speculation; tokens are emitted
// one by one with the plain loop's checks, so the output and where it stops equal plain greedy
// decoding (sampled requests: equal in distribution).
Status Engine::decode_speculative(const GenerateRequest& request, const GenerateCallbacks& cb,
                                  std::span<const float> logits, GenerateResult& result) {
  const int n = static_cast<int>(request.prompt.size());
  std::vector<int32_t> history = request.prompt;
  auto emit = [&](int32_t token) { return this->emit(token, request, cb, history, result); };
  Rng rng(resolve_seed(request.sampling.seed));
  Speculation spec(request, rng, history,
                   draft_costs_[request.sampling.temperature > 0.0f ? 1 : 0]);
  if (request.max_tokens == 0) {
    result.finish = FinishReason::kLength;
    return ok_status();
  }
  int32_t root = spec.choose(logits);
  for (;;) {
    if (!emit(root)) return ok_status();
    const int cur = n + result.n_generated - 1;  // root's position
    const std::vector<int32_t> drafts = spec.propose(root, cur, n_ctx(), result);
    if (drafts.empty()) {
      // A plain decode step (on CUDA the decode graph, sampling on the device).
      const int32_t one[1] = {root};
      const Timer step;
      GEM_RETURN_IF_ERROR(backend_->eval(std::span<const int32_t>(one, 1), false));
      const bool sampled = request.sampling.temperature > 0.0f;
      const double coin = sampled ? rng.next_double() : 0.0;
      const std::optional<int32_t> on_device = backend_->sample(request.sampling, history, coin);
      root = on_device ? *on_device
                       : sample_token(backend_->logits(-1), request.sampling, history, coin);
      spec.note_plain_step(step.seconds());
      spec.set_root_row(-1);
      continue;
    }
    bool ended = false;
    GEM_RETURN_IF_ERROR(spec.round(*backend_, 0, root, cur, drafts, emit, result, &ended, &root));
    if (ended) return ok_status();
  }
}

}  // namespace gem::runtime
