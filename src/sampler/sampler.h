// Sampling: pure functions of logits, parameters and explicit random numbers, so that every
// method can be tested exactly. A GPU sampler, if any, lives in backend/cuda and is tested
// against this one.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace gem {

struct SamplingParams {
  float temperature = 1.0f;   // <= 0: greedy
  int top_k = 64;             // <= 0: off
  float top_p = 0.95f;        // >= 1: off
  float min_p = 0.0f;         // <= 0: off
  float repeat_penalty = 1.0f;     // 1: off (llama.cpp's repeat penalty over the last repeat_last_n)
  int repeat_last_n = 64;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  uint64_t seed = 0xFFFFFFFFu;     // llama.cpp's LLAMA_DEFAULT_SEED means "random"
};

// Deterministic random source (xoshiro-style); one per sequence.
class Rng {
 public:
  explicit Rng(uint64_t seed);
  uint64_t next_u64();
  double next_double();  // [0, 1)

 private:
  uint64_t s_[4];
};

// Picks a token. `history` holds the tokens the penalties look at (prompt + generated).
// `coin` is a uniform random number in [0, 1) that decides the draw (ignored when greedy).
int32_t sample_token(std::span<const float> logits, const SamplingParams& params,
                     std::span<const int32_t> history, double coin);

// The probability distribution sample_token draws from (after penalties, temperature and
// truncation), as (id, p) sorted by descending p; used by tests and by speculative decoding.
// With a top-k below the row's size, the k candidates come from one pass over the row (penalties
// on the window's ids only, NaN logits never kept) instead of a penalised copy of all of it.
std::vector<std::pair<int32_t, float>> sampling_distribution(std::span<const float> logits,
                                                             const SamplingParams& params,
                                                             std::span<const int32_t> history);
// The plain reference: every candidate of the row penalised and ordered (tests, gem_sampler_bench).
std::vector<std::pair<int32_t, float>> sampling_distribution_reference(
    std::span<const float> logits, const SamplingParams& params, std::span<const int32_t> history);

}  // namespace gem
