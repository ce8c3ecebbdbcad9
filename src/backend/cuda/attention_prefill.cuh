// The tensor-core attention of prompt tiles (cuBLAS products over f16 K/V).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "backend/cuda/types.cuh"

namespace gem::cuda {

// The attention of attention.cuh for a prompt tile, on the tensor cores through cuBLAS (see
// attention_prefill.cu).
// Ring layers (ring = true): the cache still holds the positions before pos0 (store the tile
// after this call); k_tile/v_tile are the tile's keys. Full layers: the tile's K/V are already in
// the cache (store before this call); k_tile/v_tile are unused. pos0 is the host's copy.
// out16: [n, n_heads·D] f16. scratch: attention_prefill_scratch_bytes(...) bytes, of which
// score_bytes hold the f32 scores and probabilities of as many query rows as fit.
struct PrefillAttnArgs {
  const float* q;
  const float* k_tile;
  const float* v_tile;
  void* k_cache;
  void* v_cache;
  bool f16;
  bool ring;
  int n_slots;
  int pos0;
  int n;
  int max_n;  // the tile size the scratch was sized for
  int n_heads;
  int n_kv;
  int head_dim;
  int window;
  __half* out16;
  void* scratch;
  size_t scratch_bytes;
};
size_t attention_prefill_scratch_bytes(int max_n, int n_heads, int n_kv, int head_dim,
                                       int window, bool f16, size_t score_bytes);
void attention_prefill(const PrefillAttnArgs& a, cublasHandle_t h, cudaStream_t s);

}  // namespace gem::cuda
