// The request steps the Engine and the Scheduler share (generation.h).
#include "runtime/generation.h"

#include <algorithm>
#include <ctime>
#include <random>

#include "base/timer.h"

namespace gem::runtime {

Status check_prompt(int n_prompt, int n_ctx) {
  if (n_prompt == 0) return errorf("empty prompt: at least one token (<bos>) is required");
  if (n_prompt >= n_ctx) {
    return errorf("request (%d tokens) exceeds the available context size (%d tokens), try "
                  "increasing it",
                  n_prompt, n_ctx);
  }
  return ok_status();
}

uint64_t resolve_seed(uint64_t seed) {
  if (seed != 0xFFFFFFFFu) return seed;
  std::random_device rd;
  return (static_cast<uint64_t>(rd()) << 32) ^ rd();
}

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

ReusePlan plan_reuse(std::span<const int32_t> cached, bool has_logits,
                     const GenerateRequest& request) {
  const std::vector<int32_t>& prompt = request.prompt;
  const int n = static_cast<int>(prompt.size());
  ReusePlan plan;
  plan.identical = !cached.empty() && has_logits && prompt.size() == cached.size() &&
                   std::equal(cached.begin(), cached.end(), prompt.begin());
  plan.extends = !cached.empty() && prompt.size() > cached.size() &&
                 std::equal(cached.begin(), cached.end(), prompt.begin());
  plan.start = plan.identical || plan.extends ? static_cast<int>(cached.size()) : 0;
  // The checkpoint can be neither before what is already cached (the rings cannot be rewound
  // past the open checkpoint) nor past the prompt.
  const int boundary = request.n_history < 0 ? n : std::clamp(request.n_history, 1, n);
  plan.boundary = std::max(boundary, plan.start);
  return plan;
}

int reusable_prefix(std::span<const int32_t> cached, bool has_logits,
                    const GenerateRequest& request) {
  const ReusePlan plan = plan_reuse(cached, has_logits, request);
  return plan.start;
}

int32_t draw_on_host(std::span<const float> logits, const GenerateRequest& request,
                     std::span<const int32_t> history, std::span<const int32_t> generated,
                     double coin, std::vector<float>& scratch) {
  if (!request.constraint) return sample_token(logits, request.sampling, history, coin);
  scratch.assign(logits.begin(), logits.end());
  const int32_t forced = request.constraint(std::span<float>(scratch), generated);
  return forced >= 0 ? forced : sample_token(scratch, request.sampling, history, coin);
}

bool emit_token(int32_t token, bool eog, int n_ctx, const GenerateRequest& request,
                const GenerateCallbacks& cb, std::vector<int32_t>& history,
                GenerateResult& result) {
  history.push_back(token);
  result.n_generated++;
  bool keep_going = true;
  if (cb.on_token) {
    const double t0 = now_seconds(), c0 = thread_cpu_seconds();
    keep_going = cb.on_token(token);
    result.callback_seconds += now_seconds() - t0;
    result.callback_cpu_seconds += thread_cpu_seconds() - c0;
  }
  if (request.stop_at_eog && eog) {
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
  if (static_cast<int>(request.prompt.size()) + result.n_generated >= n_ctx) {
    // The sequence fills the context: the token just emitted has no position to go to.
    result.finish = FinishReason::kContextFull;
    return false;
  }
  return true;
}

}  // namespace gem::runtime

namespace gem::runtime {

void blend_cost(double& estimate, int& n_high, int& n_samples, double sample) {
  if (n_samples == 0 || estimate <= 0.0 || sample < 0.5 * estimate) {
    estimate = sample;
    n_high = 0;
  } else if (n_samples == 1) {
    estimate = std::min(estimate, sample);
    n_high = 0;
  } else if (sample <= 2.0 * estimate) {
    estimate = 0.75 * estimate + 0.25 * sample;
    n_high = 0;
  } else if (++n_high >= 3) {
    estimate = sample;
    n_high = 0;
  }
  ++n_samples;
}

int best_draft_len(std::span<const double> round_s, std::span<const int> n_samples, double draft_s,
                   double alpha, int k_lo, int k_hi, bool allow_plain) {
  k_lo = std::max(k_lo, 1);
  if (k_hi < k_lo) return std::max(k_hi, 0);
  auto measured = [&](int k) { return static_cast<size_t>(k) < round_s.size() && round_s[k] > 0.0; };
  // Explored: two samples (a first one may carry a one-time cost, which the second replaces).
  auto settled = [&](int k) {
    return measured(k) && static_cast<size_t>(k) < n_samples.size() && n_samples[k] >= 2;
  };
  if (!settled(k_hi)) return k_hi;
  int best = -1;
  double best_rate = 0.0;
  double tokens = 1.0, term = 1.0;  // 1 + α + … + α^k
  for (int k = 0; k <= k_hi; ++k) {
    if (k > 0) {
      term *= alpha;
      tokens += term;
    }
    if ((k == 0 ? !allow_plain : k < k_lo) || !measured(k)) continue;
    const double rate = tokens / (round_s[static_cast<size_t>(k)] + k * draft_s);
    if (best < 0 || rate > best_rate) {
      best = k;
      best_rate = rate;
    }
  }
  // The next candidate below the best, while it is not explored.
  const int below = best > k_lo ? best - 1 : (best == k_lo && allow_plain ? 0 : -1);
  return below >= 0 && !settled(below) ? below : best;
}

Speculation::Speculation(const GenerateRequest& request, Rng& rng,
                         const std::vector<int32_t>& history, DraftCosts& costs)
    : request_(request), rng_(rng), history_(history),
      sampled_(request.sampling.temperature > 0.0f), k_cur_(request.draft_max), costs_(costs) {
  const size_t n = static_cast<size_t>(std::max({request.draft_max, request.draft_min, 0})) + 1;
  if (costs_.round_s.size() < n) {
    costs_.round_s.resize(n, 0.0);
    costs_.n_samples.resize(n, 0);
    costs_.n_high.resize(n, 0);
  }
}

void Speculation::note_plain_step(double seconds) {
  if (seconds > 0.0) {
    blend_cost(costs_.round_s[0], costs_.n_high[0], costs_.n_samples[0], seconds);
  }
}

int32_t Speculation::choose(std::span<const float> row) {
  return sample_token(row, request_.sampling, history_, sampled_ ? rng_.next_double() : 0.0);
}

int32_t Speculation::pick(Backend& backend, int i) {
  const size_t r = static_cast<size_t>(i);
  return r < picks_.size() && picks_[r] ? *picks_[r] : choose(backend.batch_logits(i));
}

bool Speculation::verify(Backend& backend, int i, int32_t d, int32_t* next) {
  if (!sampled_) {
    *next = pick(backend, i);
    return *next == d;
  }
  const std::span<const float> row = backend.batch_logits(i);
  const std::vector<std::pair<int32_t, float>> dist =
      sampling_distribution(row, request_.sampling, history_);
  float p_d = 0.0f;
  for (const auto& [id, p] : dist) {
    if (id == d) p_d = p;
  }
  if (rng_.next_double() < p_d) return true;
  // Rejected: draw from p without d (the residual max(0, p − q), normalised).
  const double target = rng_.next_double() * (1.0 - p_d);
  double acc = 0.0;
  *next = -1;
  for (const auto& [id, p] : dist) {
    if (id == d) continue;
    *next = id;  // the last one, should rounding leave target beyond the sum
    acc += p;
    if (acc > target) break;
  }
  return false;
}

int Speculation::draft_len(int cur, int n_ctx, int n_generated) {
  int k = std::min(std::max(k_cur_, request_.draft_min), n_ctx - 1 - cur);
  if (request_.max_tokens >= 0) k = std::min(k, request_.max_tokens - n_generated);
  if (pause_ > 0) {
    if (--pause_ == 0) probe_ = true;
    return 0;
  }
  if (k <= 0 || !request_.draft_by_cost) return std::max(k, 0);
  // The cost model picks under the cap (never below draft_min: such drafts would be dropped).
  const double alpha = (n_hit_ + 0.5) / (n_hit_ + n_miss_ + 1.0);
  const bool allow_plain = !probe_;
  probe_ = false;
  const int best =
      best_draft_len(costs_.round_s, costs_.n_samples, costs_.draft_s, alpha, request_.draft_min, k,
                     allow_plain);
  if (best == 0 && costs_.round_s[0] > 0.0) {
    // Plain steps are worth more than any round: pause (8 tokens, doubling up to 256 while the
    // probes after the pauses do not change that). Not measured yet: this one plain step
    // measures it.
    pause_ = cost_pause_len_ - 1;
    cost_pause_len_ = std::min(256, 2 * cost_pause_len_);
    probe_ = pause_ == 0;
  } else if (best > 0 && allow_plain) {
    cost_pause_len_ = 8;
  }
  return best;
}

std::vector<int32_t> Speculation::propose(int32_t root, int cur, int n_ctx,
                                          GenerateResult& result) {
  const int k = draft_len(cur, n_ctx, result.n_generated);
  if (k <= 0) return {};
  Timer timer;
  std::vector<int32_t> drafts = request_.drafter->propose(root, cur, root_row_, k);
  if (static_cast<int>(drafts.size()) > k) drafts.resize(k);
  if (static_cast<int>(drafts.size()) < request_.draft_min) drafts.clear();
  if (!drafts.empty()) {
    const double s = timer.seconds();
    result.draft_seconds += s;
    blend_cost(costs_.draft_s, costs_.draft_high, costs_.draft_n, s / static_cast<double>(drafts.size()));
  }
  return drafts;
}

Status Speculation::round(Backend& backend, int slot, int32_t root, int cur,
                          std::span<const int32_t> drafts, const std::function<bool(int32_t)>& emit,
                          GenerateResult& result, bool* ended, int32_t* next) {
  *ended = false;
  const Timer whole;  // the round's cost for best_draft_len: verification to the next root
  rows_.clear();
  rows_.push_back({slot, cur, root, true});
  for (size_t i = 0; i < drafts.size(); ++i) {
    rows_.push_back({slot, cur + 1 + static_cast<int>(i), drafts[i], true});
  }
  Timer timer;
  GEM_RETURN_IF_ERROR(backend.eval_batch(rows_));
  const int n_drafts = static_cast<int>(drafts.size());
  picks_.clear();
  if (!sampled_) {
    // Row i follows the history (root included) and the drafts before it.
    ext_.assign(history_.begin(), history_.end());
    ext_.insert(ext_.end(), drafts.begin(), drafts.end());
    std::vector<Backend::BatchSample> reqs(drafts.size() + 1);
    for (size_t i = 0; i < reqs.size(); ++i) {
      reqs[i].params = &request_.sampling;
      reqs[i].history = std::span<const int32_t>(ext_.data(), history_.size() + i);
    }
    picks_ = backend.sample_batch(reqs);
  }
  result.verify_seconds += timer.seconds();
  result.n_rounds++;
  result.n_drafted += n_drafts;
  int accepted = 0;
  int32_t bonus = -1;
  while (accepted < n_drafts && verify(backend, accepted, drafts[accepted], &bonus)) {
    const int32_t d = drafts[accepted];
    ++accepted;
    result.n_draft_accepted++;
    if (!emit(d)) {
      *ended = true;
      return ok_status();
    }
  }
  // Every draft accepted: the last row gives the next token.
  if (accepted == n_drafts) {
    bonus = sampled_ ? choose(backend.batch_logits(accepted)) : pick(backend, accepted);
  }
  // Keep root and the accepted drafts; the rejected ones leave the cache.
  if (accepted < n_drafts) {
    timer.reset();
    GEM_RETURN_IF_ERROR(backend.slot_truncate(slot, cur + 1 + accepted));
    result.truncate_seconds += timer.seconds();
  }
  k_cur_ = accepted == n_drafts ? std::min(request_.draft_max, 2 * k_cur_) : accepted + 1;
  if (accepted > 0) {
    misses_ = 0;
    pause_len_ = 8;
  } else if (++misses_ >= 2) {
    misses_ = 0;
    pause_ = pause_len_;
    pause_len_ = std::min(256, 2 * pause_len_);
  }
  n_hit_ = 0.875 * n_hit_ + accepted;
  n_miss_ = 0.875 * n_miss_ + (accepted < n_drafts ? 1.0 : 0.0);
  if (static_cast<size_t>(n_drafts) < costs_.round_s.size()) {
    const auto k = static_cast<size_t>(n_drafts);
    blend_cost(costs_.round_s[k], costs_.n_high[k], costs_.n_samples[k], whole.seconds());
  }
  *next = bonus;
  root_row_ = accepted;
  return ok_status();
}

}  // namespace gem::runtime
