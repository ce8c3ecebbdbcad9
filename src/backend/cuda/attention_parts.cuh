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

// The key range [kb, ke) of one split for the decode query at pos0 (n = 1): the visible range
// cut into n_splits chunks of at least kSplitMinKeys keys. A split past the visible keys is
// empty (kb >= ke). In a rows pass its blocks exit at once, writing no part, and the merge skips
// it (an empty part's l is 0, which the merge skipped before too: the sums are the same bit for
// bit, and each row still equals its decode step). A decode step's empty blocks still write their
// parts: exiting there too made decode 2 % slower (bench/results/cuda.md).
struct SplitRange {
  int kb, ke;
};
// The visible keys [lo, lo + len) of the decode query at pos0 and its splits' chunk.
struct DecodeChunks {
  int lo, len, chunk;
};
__device__ __forceinline__ DecodeChunks decode_chunks(const AttnArgs& a) {
  const int p = a.sp->pos0;
  const int lo = a.window > 0 ? max(0, p - a.window + 1) : 0;
  const int len = p + 1 - lo;
  const int chunk = (len + a.n_splits - 1) / a.n_splits;
  return {lo, len, chunk < kSplitMinKeys ? kSplitMinKeys : chunk};
}
__device__ __forceinline__ SplitRange decode_split_range(const AttnArgs& a, int split) {
  const DecodeChunks c = decode_chunks(a);
  const int kb = c.lo + split * c.chunk;
  return {kb, min(c.lo + c.len, kb + c.chunk)};
}
// The splits that hold keys: 0 .. busy − 1 (split s has keys while s·chunk < len).
__device__ __forceinline__ int decode_busy_splits(const AttnArgs& a) {
  const DecodeChunks c = decode_chunks(a);
  return min(a.n_splits, (c.len + c.chunk - 1) / c.chunk);
}

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
