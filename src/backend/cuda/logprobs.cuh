// Launcher of the logprobs reduction on the device (Backend::token_logprobs of the CUDA backend):
// the log-softmax of one logits row at a token and at the row's top n, so a decode step that
// reports logprobs moves 168 bytes to the host instead of the 1 MB row.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace gem::cuda {

constexpr int kMaxRowLogprobTop = 20;  // = kMaxRowLogprobs (backend.h)

// What row_logprobs writes (device memory; copied to the host whole).
struct RowLogprobs {
  float token_logprob;                 // logits[token] - lse
  float lse;                           // log sum exp(logits), f32 partial sums combined in double
  int32_t ids[kMaxRowLogprobTop];      // the top n ids, highest logit first, ties by lower id
  float logprobs[kMaxRowLogprobTop];   // their logprobs
};

// Scratch floats row_logprobs needs for a row of n_vocab.
int row_logprobs_scratch_floats(int n_vocab);

// row_logprobs() of backend.h on the device: logits [n_vocab] f32, 0 <= token < n_vocab,
// top_n clamped to [0, min(kMaxRowLogprobTop, n_vocab)] (entries past it are left as they were).
// Two launches: per-block max, sum of exp and top n; then one block merges them.
void row_logprobs(const float* logits, int n_vocab, int32_t token, int top_n, float* scratch,
                  RowLogprobs* out, cudaStream_t s);

}  // namespace gem::cuda
