// Launchers of the device sampling: greedy with penalties, and the sampler's top-k chain.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "backend/cuda/types.cuh"

namespace gem::cuda {

// Greedy pick on the device: penalties over history (hist: [n_hist] token ids) applied to a
// copy of the candidates' logits, then argmax. out: one int32.
struct PenaltyArgs {
  const int32_t* hist;
  int n_hist;
  float repeat_penalty;
  float presence_penalty;
  float frequency_penalty;
};
// hist holds at most 256 entries (the window repeat_last_n selects). scratch: floats of
// argmax_scratch_floats(n_vocab).
void argmax_penalized(const float* logits, int n_vocab, const PenaltyArgs& pen, int32_t* out,
                      float* scratch, cudaStream_t s);
int argmax_scratch_floats(int n_vocab);
// The arg-maxes of n rows (row j: logits + rows[j]·n_vocab, rows on the device) with no penalties,
// in two launches: out[j] is what argmax_penalized picks for row j with an empty history.
// n <= argmax_rows_max(n_vocab) (the scratch of argmax_scratch_floats holds their partials).
void argmax_rows(const float* logits, int n_vocab, const int32_t* rows, int n, int32_t* out,
                 float* scratch, cudaStream_t s);
int argmax_rows_max(int n_vocab);

// The host sampler's chain (sampler/sampler.cc: penalties, top-k, top-p, min-p, temperature,
// one draw with `coin`) on the device, for 1 <= top_k <= kMaxTopK and temperature > 0. Same
// scratch as argmax_penalized. out: one int32 (-1 if there is no candidate).
constexpr int kMaxTopK = 256;
struct DrawArgs {
  int top_k;
  float top_p;
  float min_p;
  float temperature;
  double coin;
};
void sample_top_k(const float* logits, int n_vocab, const PenaltyArgs& pen, const DrawArgs& d,
                  int32_t* out, float* scratch, cudaStream_t s);
// The same chain for n rows at once with no penalties and one top_k (row j: logits +
// rows[j]·n_vocab, its draw from draws[j], both on the device; out[j] equals what sample_top_k
// picks for that row alone). scratch: floats of top_k_rows_scratch_floats(n_vocab, n_rows).
void sample_top_k_rows(const float* logits, int n_vocab, const int32_t* rows, int n_rows, int top_k,
                       const DrawArgs* draws, int32_t* out, float* scratch, cudaStream_t s);
int64_t top_k_rows_scratch_floats(int n_vocab, int n_rows);

}  // namespace gem::cuda
