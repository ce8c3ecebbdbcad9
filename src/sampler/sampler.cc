// The CPU sampler. Order of operations follows llama.cpp's default chain: penalties, top-k,
// top-p, min-p, temperature, then one draw. Truncation works on the penalised logits at
// temperature 1 (as llama.cpp's samplers do); the temperature shapes only the final draw.
#include "sampler/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_map>

namespace gem {
namespace {

uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

struct Candidate {
  int32_t id;
  float logit;
};

// llama.cpp's penalties (llama_sampler_penalties): over the last repeat_last_n tokens of the
// history, the repeat penalty divides positive logits and multiplies negative ones; frequency
// and presence penalties subtract count·f + (count > 0)·p.
void apply_penalties(std::vector<Candidate>& cands, const SamplingParams& p,
                     std::span<const int32_t> history) {
  const bool any = p.repeat_penalty != 1.0f || p.frequency_penalty != 0.0f ||
                   p.presence_penalty != 0.0f;
  if (!any || history.empty() || p.repeat_last_n == 0) return;
  size_t n = history.size();
  if (p.repeat_last_n > 0) n = std::min(n, static_cast<size_t>(p.repeat_last_n));
  std::unordered_map<int32_t, int> counts;
  for (size_t i = history.size() - n; i < history.size(); ++i) counts[history[i]]++;
  for (Candidate& c : cands) {
    auto it = counts.find(c.id);
    if (it == counts.end()) continue;
    if (p.repeat_penalty != 1.0f) {
      c.logit = c.logit <= 0.0f ? c.logit * p.repeat_penalty : c.logit / p.repeat_penalty;
    }
    c.logit -= static_cast<float>(it->second) * p.frequency_penalty +
               (it->second > 0 ? 1.0f : 0.0f) * p.presence_penalty;
  }
}

// Softmax of the candidates' logits scaled by 1/temp, in double for stable normalisation.
std::vector<double> softmax(const std::vector<Candidate>& cands, double inv_temp) {
  std::vector<double> probs(cands.size());
  double max_logit = -std::numeric_limits<double>::infinity();
  for (const Candidate& c : cands) max_logit = std::max(max_logit, static_cast<double>(c.logit));
  double sum = 0.0;
  for (size_t i = 0; i < cands.size(); ++i) {
    probs[i] = std::exp((static_cast<double>(cands[i].logit) - max_logit) * inv_temp);
    sum += probs[i];
  }
  for (double& q : probs) q /= sum;
  return probs;
}

bool by_logit_desc(const Candidate& a, const Candidate& b) {
  return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

}  // namespace

Rng::Rng(uint64_t seed) {
  uint64_t x = seed;
  for (uint64_t& s : s_) s = splitmix64(x);
}

// xoshiro256**.
uint64_t Rng::next_u64() {
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

double Rng::next_double() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

namespace {

// The window's ids with their penalised logits, sorted by id (none without penalties): the only
// entries of a row the penalties change.
std::vector<Candidate> penalised_window(std::span<const float> logits, const SamplingParams& p,
                                        std::span<const int32_t> history) {
  std::vector<Candidate> penalised;
  const bool any = p.repeat_penalty != 1.0f || p.frequency_penalty != 0.0f ||
                   p.presence_penalty != 0.0f;
  if (!any || history.empty() || p.repeat_last_n == 0) return penalised;
  size_t n = history.size();
  if (p.repeat_last_n > 0) n = std::min(n, static_cast<size_t>(p.repeat_last_n));
  for (size_t i = history.size() - n; i < history.size(); ++i) {
    const int32_t id = history[i];
    if (id >= 0 && static_cast<size_t>(id) < logits.size()) penalised.push_back({id, logits[id]});
  }
  std::sort(penalised.begin(), penalised.end(),
            [](const Candidate& a, const Candidate& b) { return a.id < b.id; });
  penalised.erase(std::unique(penalised.begin(), penalised.end(),
                              [](const Candidate& a, const Candidate& b) { return a.id == b.id; }),
                  penalised.end());
  apply_penalties(penalised, p, history);
  return penalised;
}

// The k best entries of the penalised row by by_logit_desc, in that order: one pass in id order
// with a heap of the k best so far (its top the worst of them; an entry enters only with a
// larger logit, since on equal logits the lower id, met first, wins). NaN entries never enter.
std::vector<Candidate> top_k_candidates(std::span<const float> logits, size_t k,
                                        const SamplingParams& p,
                                        std::span<const int32_t> history) {
  const std::vector<Candidate> penalised = penalised_window(logits, p, history);
  std::vector<Candidate> heap;
  heap.reserve(k);
  size_t next = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    float v = logits[i];
    if (next < penalised.size() && static_cast<size_t>(penalised[next].id) == i) {
      v = penalised[next++].logit;
    }
    if (std::isnan(v)) continue;
    if (heap.size() < k) {
      heap.push_back({static_cast<int32_t>(i), v});
      std::push_heap(heap.begin(), heap.end(), by_logit_desc);
    } else if (v > heap.front().logit) {
      std::pop_heap(heap.begin(), heap.end(), by_logit_desc);
      heap.back() = {static_cast<int32_t>(i), v};
      std::push_heap(heap.begin(), heap.end(), by_logit_desc);
    }
  }
  std::sort(heap.begin(), heap.end(), by_logit_desc);
  return heap;
}

// Top-p, min-p and temperature over candidates sorted by descending logit (top-k applied).
std::vector<std::pair<int32_t, float>> truncate_and_scale(std::vector<Candidate> cands,
                                                          const SamplingParams& params) {
  // Top-p: the shortest prefix whose probability (temperature 1) reaches top_p.
  if (params.top_p < 1.0f) {
    std::vector<double> probs = softmax(cands, 1.0);
    double cum = 0.0;
    size_t n = 0;
    while (n < cands.size()) {
      cum += probs[n++];
      if (cum >= params.top_p) break;
    }
    cands.resize(std::max<size_t>(n, 1));
  }

  // Min-p: keep tokens whose probability is at least min_p times the top one's.
  if (params.min_p > 0.0f) {
    const double floor = static_cast<double>(cands.front().logit) + std::log(params.min_p);
    size_t n = 1;
    while (n < cands.size() && static_cast<double>(cands[n].logit) >= floor) ++n;
    cands.resize(n);
  }

  std::vector<double> probs = softmax(cands, 1.0 / static_cast<double>(params.temperature));
  std::vector<std::pair<int32_t, float>> out(cands.size());
  for (size_t i = 0; i < cands.size(); ++i) out[i] = {cands[i].id, static_cast<float>(probs[i])};
  return out;
}

}  // namespace

std::vector<std::pair<int32_t, float>> sampling_distribution_reference(
    std::span<const float> logits, const SamplingParams& params, std::span<const int32_t> history) {
  std::vector<Candidate> cands(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) cands[i] = {static_cast<int32_t>(i), logits[i]};
  apply_penalties(cands, params, history);
  if (cands.empty()) return {};

  // Greedy: all mass on the arg-max (lowest id on ties).
  if (params.temperature <= 0.0f) {
    auto best = std::min_element(cands.begin(), cands.end(), by_logit_desc);
    return {{best->id, 1.0f}};
  }

  // Top-k: keep the k largest, sorted by descending logit.
  size_t keep = cands.size();
  if (params.top_k > 0) keep = std::min(keep, static_cast<size_t>(params.top_k));
  if (keep < cands.size()) {
    std::nth_element(cands.begin(), cands.begin() + static_cast<ptrdiff_t>(keep), cands.end(),
                     by_logit_desc);
    cands.resize(keep);
  }
  std::sort(cands.begin(), cands.end(), by_logit_desc);
  return truncate_and_scale(std::move(cands), params);
}

std::vector<std::pair<int32_t, float>> sampling_distribution(std::span<const float> logits,
                                                             const SamplingParams& params,
                                                             std::span<const int32_t> history) {
  if (params.temperature > 0.0f && params.top_k > 0 &&
      static_cast<size_t>(params.top_k) < logits.size()) {
    std::vector<Candidate> cands =
        top_k_candidates(logits, static_cast<size_t>(params.top_k), params, history);
    if (cands.empty()) return {};
    return truncate_and_scale(std::move(cands), params);
  }
  return sampling_distribution_reference(logits, params, history);
}

// Greedy: sampling_distribution's pick (the first of the penalised logits' maxima in id order,
// as its min_element finds it) without its copy of the row; the penalties touch only the ids of
// the window.
int32_t greedy_token(std::span<const float> logits, const SamplingParams& p,
                     std::span<const int32_t> history) {
  if (logits.empty()) return -1;
  const std::vector<Candidate> penalised = penalised_window(logits, p, history);
  size_t next = 0;  // the next penalised id in id order
  auto value = [&](size_t i) {
    if (next < penalised.size() && static_cast<size_t>(penalised[next].id) == i) {
      return penalised[next++].logit;
    }
    return logits[i];
  };
  int32_t best = 0;
  float best_v = value(0);
  for (size_t i = 1; i < logits.size(); ++i) {
    const float v = value(i);
    if (v > best_v) {  // by_logit_desc: a later id wins only with a larger logit
      best = static_cast<int32_t>(i);
      best_v = v;
    }
  }
  return best;
}

int32_t sample_token(std::span<const float> logits, const SamplingParams& params,
                     std::span<const int32_t> history, double coin) {
  if (params.temperature <= 0.0f) return greedy_token(logits, params, history);
  const auto dist = sampling_distribution(logits, params, history);
  if (dist.empty()) return -1;
  double sum = 0.0;
  for (const auto& [id, p] : dist) sum += p;
  const double target = coin * sum;
  double cum = 0.0;
  for (const auto& [id, p] : dist) {
    cum += p;
    if (target < cum) return id;
  }
  return dist.back().first;
}

}  // namespace gem
