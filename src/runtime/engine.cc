// Engine::generate: prefix reuse against the cached history, tiled prefill (history, checkpoint,
// generation prompt) with progress and cancellation, the sampling loop, and the rollback to the
// history boundary afterwards.
#include "runtime/engine.h"

#include <algorithm>
#include <optional>
#include <random>
#include <ctime>

#include "base/log.h"
#include "base/timer.h"

namespace gem::runtime {
namespace {

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

uint64_t resolve_seed(uint64_t seed) {
  // llama.cpp's LLAMA_DEFAULT_SEED (0xFFFFFFFF) asks for a random seed.
  if (seed != 0xFFFFFFFFu) return seed;
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

}  // namespace

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
  const bool identical = !cached_.empty() && !cached_logits_.empty() && prompt == cached_;
  const bool extends = !cached_.empty() && prompt.size() > cached_.size() &&
                       std::equal(cached_.begin(), cached_.end(), prompt.begin());
  if (identical) {
    // The backend already holds exactly this prompt (rolled back after the last request) and
    // its last-row logits are kept: nothing to evaluate.
    result.n_cached = n;
    if (cb.on_prompt_progress && !cb.on_prompt_progress(n, n)) return false;
    logits = cached_logits_;
    return true;
  }
  int start = 0;
  if (extends) {
    start = static_cast<int>(cached_.size());
  } else {
    // A divergent or shorter prompt: the sliding rings cannot be rewound to an arbitrary
    // position, so start over.
    backend_->reset();
    cached_.clear();
    cached_logits_.clear();
  }
  // The history boundary: the checkpoint goes there, so it can be neither before what is
  // already cached (the rings cannot be rewound past the open checkpoint) nor past the prompt.
  int boundary = request.n_history < 0 ? n : std::clamp(request.n_history, 1, n);
  boundary = std::max(boundary, start);
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
  if (n == 0) return errorf("empty prompt: at least one token (<bos>) is required");
  if (n >= n_ctx()) {
    return errorf("request (%d tokens) exceeds the available context size (%d tokens), try "
                  "increasing it",
                  n, n_ctx());
  }

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
    if (request.constraint) {
      scratch_logits_.assign(logits.begin(), logits.end());
      token = request.constraint(std::span<float>(scratch_logits_), generated);
      if (token < 0) token = sample_token(scratch_logits_, request.sampling, history, coin);
    } else if (result.n_generated > 0) {
      // The backend may sample on the device (CUDA); otherwise read its logits row.
      std::optional<int32_t> on_device = backend_->sample(request.sampling, history, coin);
      if (on_device) {
        token = *on_device;
      } else {
        if (logits.empty()) logits = backend_->logits(-1);
        token = sample_token(logits, request.sampling, history, coin);
      }
    } else {
      token = sample_token(logits, request.sampling, history, coin);
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
  history.push_back(token);
  result.n_generated++;
  bool keep_going = true;
  if (cb.on_token) {
    const double t0 = now_seconds(), c0 = thread_cpu_seconds();
    keep_going = cb.on_token(token);
    result.callback_seconds += now_seconds() - t0;
    result.callback_cpu_seconds += thread_cpu_seconds() - c0;
  }
  if (request.stop_at_eog && is_eog(token)) {
    result.finish = FinishReason::kEog;
    return false;
  }
  if (!keep_going) {
    result.finish = FinishReason::kStoppedByCaller;
    return false;
  }
  if (request.max_tokens >= 0 && result.n_generated >= request.max_tokens) {
    result.finish = FinishReason::kLength;  // no eval for a token nothing will follow
    return false;
  }
  if (static_cast<int>(request.prompt.size()) + result.n_generated >= n_ctx()) {
    // The sequence fills the context: the token just emitted has no position to go to.
    result.finish = FinishReason::kContextFull;
    return false;
  }
  return true;
}

// Each round: the root (chosen from the last row, not yet in the cache) and the drafts are
// evaluated as one batch at positions cur..cur+k; row i's logits are the target's own choice
// after root, d_1..d_i, so d_{i+1} is accepted while it equals that choice, and the first row
// that disagrees gives the next root (the bonus token). The cache then drops the rejected
// drafts (slot_truncate: positions after the last accepted one). Tokens are emitted one by one
// with the plain loop's checks, so the output and where it stops equal plain greedy decoding
// (sampled requests: equal in distribution, see verify below).
Status Engine::decode_speculative(const GenerateRequest& request, const GenerateCallbacks& cb,
                                  std::span<const float> logits, GenerateResult& result) {
  const int n = static_cast<int>(request.prompt.size());
  std::vector<int32_t> history = request.prompt;
  auto emit = [&](int32_t token) { return this->emit(token, request, cb, history, result); };
  // Greedy: a draft is accepted when it is the target's own choice. Sampled: speculative
  // rejection sampling with the drafts as certain proposals (q = 1 on the drafted token): accept
  // d with probability p(d), else draw from p without d (the residual max(0, p − q), normalised),
  // so every token is distributed exactly as plain sampling draws it.
  const bool sampled = request.sampling.temperature > 0.0f;
  Rng rng(resolve_seed(request.sampling.seed));
  auto choose = [&](std::span<const float> row) {
    return sample_token(row, request.sampling, history, sampled ? rng.next_double() : 0.0);
  };
  // Verification of draft d against `row`: true when accepted; otherwise *next is the token
  // drawn in its place.
  auto verify = [&](std::span<const float> row, int32_t d, int32_t* next) {
    if (!sampled) {
      *next = choose(row);
      return *next == d;
    }
    const std::vector<std::pair<int32_t, float>> dist =
        sampling_distribution(row, request.sampling, history);
    float p_d = 0.0f;
    for (const auto& [id, p] : dist) {
      if (id == d) p_d = p;
    }
    if (rng.next_double() < p_d) return true;
    const double target = rng.next_double() * (1.0 - p_d);
    double acc = 0.0;
    *next = -1;
    for (const auto& [id, p] : dist) {
      if (id == d) continue;
      *next = id;  // the last one, should rounding leave target beyond the sum
      acc += p;
      if (acc > target) break;
    }
    return false;
  };

  if (request.max_tokens == 0) {
    result.finish = FinishReason::kLength;
    return ok_status();
  }
  int32_t root = choose(logits);
  int root_row = -1;  // the row of the last eval root was chosen from (-1: its last)
  // Adaptation: the draft length follows acceptance (doubling after a fully accepted round, the
  // accepted count plus one after a partial one); two rounds in a row with nothing accepted pause
  // drafting for `pause_len` tokens (doubling up to 256 while probes keep failing), so a drafter
  // that is rarely right costs a probe now and then.
  int k_cur = request.draft_max, misses = 0, pause = 0, pause_len = 8;
  std::vector<BatchRow> rows;
  for (;;) {
    if (!emit(root)) return ok_status();
    const int cur = n + result.n_generated - 1;  // root's position
    int k = std::min(k_cur, n_ctx() - 1 - cur);
    if (request.max_tokens >= 0) k = std::min(k, request.max_tokens - result.n_generated);
    if (pause > 0) {
      --pause;
      k = 0;
    }
    std::vector<int32_t> drafts =
        k > 0 ? request.drafter->propose(root, cur, root_row, k) : std::vector<int32_t>{};
    if (static_cast<int>(drafts.size()) > k) drafts.resize(k);
    if (drafts.empty()) {
      // A plain decode step (on CUDA the decode graph, sampling on the device).
      const int32_t one[1] = {root};
      GEM_RETURN_IF_ERROR(backend_->eval(std::span<const int32_t>(one, 1), false));
      const double coin = sampled ? rng.next_double() : 0.0;
      const std::optional<int32_t> on_device = backend_->sample(request.sampling, history, coin);
      root = on_device ? *on_device
                       : sample_token(backend_->logits(-1), request.sampling, history, coin);
      root_row = -1;
      continue;
    }
    rows.clear();
    rows.push_back({0, cur, root, true});
    for (size_t i = 0; i < drafts.size(); ++i) {
      rows.push_back({0, cur + 1 + static_cast<int>(i), drafts[i], true});
    }
    GEM_RETURN_IF_ERROR(backend_->eval_batch(rows));
    result.n_drafted += static_cast<int>(drafts.size());
    int accepted = 0;
    int32_t next = -1;
    while (accepted < static_cast<int>(drafts.size()) &&
           verify(backend_->batch_logits(accepted), drafts[accepted], &next)) {
      const int32_t d = drafts[accepted];
      ++accepted;
      result.n_draft_accepted++;
      if (!emit(d)) return ok_status();
    }
    // Every draft accepted: the last row gives the next token.
    if (accepted == static_cast<int>(drafts.size())) next = choose(backend_->batch_logits(accepted));
    // Keep root and the accepted drafts; the rejected ones leave the cache.
    if (accepted < static_cast<int>(drafts.size())) {
      GEM_RETURN_IF_ERROR(backend_->slot_truncate(0, cur + 1 + accepted));
    }
    if (accepted == static_cast<int>(drafts.size())) {
      k_cur = std::min(request.draft_max, 2 * k_cur);
    } else {
      k_cur = accepted + 1;
    }
    if (accepted > 0) {
      misses = 0;
      pause_len = 8;
    } else if (++misses >= 2) {
      misses = 0;
      pause = pause_len;
      pause_len = std::min(256, 2 * pause_len);
    }
    root = next;
    root_row = accepted;
  }
}

}  // namespace gem::runtime
