// Device helpers of the attention kernels: the parts (each split's online-softmax state) and
// element loads as float.
#pragma once

#include <cuda_fp16.h>

#include "backend/cuda/attention.cuh"

namespace gem::cuda {

__device__ __forceinline__ float to_f(float v) { return v; }
__device__ __forceinline__ float to_f(__half v) { return __half2float(v); }

// The parts (the attention's per-split state) of one (query, head): part_stride(D) floats per
// split, m and l first, then two unused floats so that the D accumulated values start 16-byte
// aligned (rows from cudaMalloc, D a multiple of 32): the merge reads them as float4.
constexpr int kPartHead = 4;
__host__ __device__ constexpr int part_stride(int D) { return D + kPartHead; }

// The arguments of row z of a rows pass (AttnArgs::rows): one decode query as its own decode
// step sees it.
__device__ __forceinline__ AttnArgs row_view(AttnArgs a, int z) {
  const RowParams* r = a.rows + z;
  const int64_t hd = static_cast<int64_t>(a.n_heads) * a.head_dim, row = r->row;
  const size_t cache_off = static_cast<size_t>(r->slot) * a.slot_bytes;
  a.sp = reinterpret_cast<const StepParams*>(r);
  a.q += row * hd;
  a.out += row * hd;
  if (a.outq.q) {
    a.outq.q += row * hd;
    a.outq.ds += row * hd / 32;
  }
  a.part += static_cast<int64_t>(z) * a.n_heads * a.n_splits * part_stride(a.head_dim);
  a.k_cache = static_cast<const char*>(a.k_cache) + cache_off;
  a.v_cache = static_cast<const char*>(a.v_cache) + cache_off;
  return a;
}

}  // namespace gem::cuda
