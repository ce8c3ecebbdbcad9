// Launchers of the element-wise ops of the forward: embedding lookup, the attention prologue
// (per-head norms, RoPE, KV-cache store), f16 conversion, GELU gating and the soft-cap.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "backend/cuda/types.cuh"

namespace gem::cuda {

// x[t, :] = row(tokens[t]) of the embedding · scale.   x: [n, emb.cols].
void embed(const DevMatrix& emb, const int32_t* tokens, int n, float scale, float* x,
           cudaStream_t s);
// The attention prologue of one layer for n tokens at positions sp->pos0 + t. qkv: [n, qkv_cols]
// = [q (n_heads·D) | k (n_kv·D) | v (n_kv·D), absent when v_from_k]. Writes q: [n, n_heads, D]
// (q-norm, RoPE), k: [n, n_kv, D] (k-norm, RoPE), v: [n, n_kv, D] (RMS₀ of v, or of raw k).
// inv_freq: [D/2] f64 (freq factors folded in).
// With cache.k set, k and v also land in the layer's cache at slot pos % n_slots (ring) or pos:
// decode's store (n = 1: the ring slot it takes holds a position the query no longer sees).
struct KvDest {
  void* k = nullptr;  // [n_kv, n_slots, D], f32 or f16
  void* v = nullptr;
  bool f16 = false;
  bool ring = false;
  int n_slots = 0;
  // A rows pass: row t is rows[t] (its position, and its sequence slot's part of the cache at
  // slot·slot_bytes from k and v) instead of position sp->pos0 + t of one sequence.
  const RowParams* rows = nullptr;
  size_t slot_bytes = 0;
};
void qkv_prologue(const float* qkv, int n, int n_heads, int n_kv, int head_dim, bool v_from_k,
                  const float* q_norm, const float* k_norm, float eps, const double* inv_freq,
                  const StepParams* sp, float* q, float* k, float* v, KvDest cache,
                  cudaStream_t s);
// Writes the tile's k/v ([n, n_kv, D] f32) into a layer's cache ([n_kv, n_slots, D], f32 or
// f16). Ring layers (ring = true): slot = pos % n_slots, only the last n_slots positions land.
void kv_store(const float* k, const float* v, int n, int n_kv, int head_dim, bool f16, bool ring,
              int n_slots, const StepParams* sp, void* k_cache, void* v_cache, cudaStream_t s);
void to_f16(const float* x, int64_t count, __half* y, cudaStream_t s);
void to_f32(const __half* x, int64_t count, float* y, cudaStream_t s);
// g[t, i] = gelu_tanh(gu[t, i]) · gu[t, F + i]   (gu: [n, 2F] from the fused gate|up product).
void gelu_mul(const float* gu, int n, int F, float* g, cudaStream_t s);
void softcap(float* x, int64_t count, float cap, cudaStream_t s);

}  // namespace gem::cuda
