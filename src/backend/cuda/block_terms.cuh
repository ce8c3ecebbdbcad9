// The decode products' float arithmetic, with every rounding written out (no contraction left to
// the compiler or to ptxas, which may fuse a mul.f32 and an add.f32 differently in two kernels).
// matvec (decode) and the rows pass's products (dp4a and tensor cores) accumulate through these
// functions, so a row of a batch equals its decode step bit for bit by construction: the same
// terms, in the same order, with the same roundings.
#pragma once

#include <cuda_runtime.h>

namespace gem::cuda {

// acc + one 32-weight block's term, from the block's integer sum as a float s (exact: |isum| <
// 2^22 for both types): Q8_0 (d_w·d_x)·s + acc, Q4_0 d_w·(d_x·s − 8·d_x·Σq_x) + acc, where
// ds = (d_x, d_x·Σq_x). isum = Σ q_w·q_x (Q8_0), or Σ nib·q_x over the raw nibbles (Q4_0, whose −8
// offset comes in as −8·d_x·Σq_x).
template <bool kQ8>
__device__ __forceinline__ float q_block_acc_f(float acc, float s, float dw, float2 ds) {
  if constexpr (kQ8) {
    return __fmaf_rn(__fmul_rn(dw, ds.x), s, acc);
  } else {
    return __fmaf_rn(dw, __fmaf_rn(ds.x, s, __fmul_rn(-8.0f, ds.y)), acc);
  }
}
template <bool kQ8>
__device__ __forceinline__ float q_block_acc(float acc, int isum, float dw, float2 ds) {
  return q_block_acc_f<kQ8>(acc, __int2float_rn(isum), dw, ds);
}

// The same float from a biased integer sum, without a conversion instruction (I2F issues at a
// quarter or less of the float rate, and the products over many rows convert once per row, token
// and block): an integer accumulation that starts at kIsumBias (the bits of 1.5·2^23) ends at the
// bits of the float 1.5·2^23 + isum, exactly, for |isum| < 2^22 (Q4_0 at most 32·15·128, Q8_0
// 32·128·128); one exact subtraction leaves isum, the value __int2float_rn gives.
constexpr int kIsumBias = 0x4B400000;
__device__ __forceinline__ float unbias_isum(int biased) {
  return __fsub_rn(__int_as_float(biased), 12582912.0f);
}

// acc + w·x for the f32-activation products (F32 and Q6_K weights).
__device__ __forceinline__ float f_acc(float acc, float w, float x) { return __fmaf_rn(w, x, acc); }

// The warp sum of 32 lane partials v[0..31] as warp_sum's butterfly leaves it in every lane:
// level by level, lane i adds lane i ^ o for o = 16, 8, 4, 2, 1 (float addition commutes, so
// each level's pair sum is the same in both lanes).
__device__ __forceinline__ float pair_sum(float a, float b) { return __fadd_rn(a, b); }

}  // namespace gem::cuda
