// Device math of the attention prologue shared by qkv_prologue_kernel (ops.cu) and the decode
// attention kernels that do the prologue themselves (attention.cu, GEM_CUDA_FUSED_PROLOGUE):
// one NeoX pair of a head after its RMS norm and RoPE, and the store of a pair into a KV cache.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

#include "backend/cuda/kernels.cuh"

namespace gem::cuda {

// The pair (i, i + D/2) of one head, (a0, a1), after the head's RMS norm (inv = 1/rms, weights
// w0 = w[i], w1 = w[i + D/2]) and the rotation by pos·freq (freq = inv_freq[i]; the angle in
// double, as the CPU reference computes it).
__device__ __forceinline__ float2 norm_rope_pair(float a0, float a1, float inv, float w0,
                                                 float w1, double freq, int pos) {
  double sn, cs;
  sincos(static_cast<double>(pos) * freq, &sn, &cs);
  a0 = a0 * inv * w0;
  a1 = a1 * inv * w1;
  const float c = static_cast<float>(cs), s = static_cast<float>(sn);
  return make_float2(a0 * c - a1 * s, a0 * s + a1 * c);
}

// Elements i and i + D/2 of kv head g at position pos into a cache (f32 or f16).
__device__ __forceinline__ void store_cache(const KvDest& c, void* base, int g, int pos, int D,
                                            int i, float a, float b) {
  const int slot = c.ring ? pos % c.n_slots : pos;
  const int64_t off = (static_cast<int64_t>(g) * c.n_slots + slot) * D;
  if (c.f16) {
    static_cast<__half*>(base)[off + i] = __float2half_rn(a);
    static_cast<__half*>(base)[off + i + D / 2] = __float2half_rn(b);
  } else {
    static_cast<float*>(base)[off + i] = a;
    static_cast<float*>(base)[off + i + D / 2] = b;
  }
}

}  // namespace gem::cuda
