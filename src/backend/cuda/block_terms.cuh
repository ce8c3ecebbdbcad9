// The decode products' float arithmetic, with every rounding written out (no contraction left to
// the compiler or to ptxas, which may fuse a mul.f32 and an add.f32 differently in two kernels).
// matvec (decode) and the rows pass's products (dp4a and tensor cores) accumulate through these
// functions, so a row of a batch equals its decode step bit for bit by construction: the same
// terms, in the same order, with the same roundings.
#pragma once

#include <cuda_runtime.h>

namespace gem::cuda {

// One 32-weight block's term, from its exact integer sum and the two scales. The integer sum
// comes biased: its accumulation starts at isum_start (the bits of the float 1.5·2^23, less
// 8·Σq_x for Q4_0), so it ends at the bits of the float F = 1.5·2^23 + isum, exactly, for
// |isum| < 2^22, where isum = Σ q_w·q_x (Q8_0: at most 32·127·127) or Σ (nib − 8)·q_x over the raw
// nibbles (Q4_0: at most 32·8·127). No conversion instruction (I2F issues at a quarter or less
// of the float rate, and the products over many rows convert once per row, token and block),
// and no subtraction: s_x·1.5·2^23 is exact (Q8Ds: s_x has at most 22 significant bits), so
// fma(s_x, F, −s_x·1.5·2^23) = round(s_x·isum), the product of s_x and the integer, rounded once.
// The term is then d_w·that + acc.
constexpr int kIsumBias = 0x4B400000;  // the bits of 1.5·2^23
template <bool kQ8>
__device__ __forceinline__ int isum_start(int qsum) {
  return kQ8 ? kIsumBias : kIsumBias - 8 * qsum;
}
// −s_x·1.5·2^23, exact; computed once per token and block, shared by its rows.
__device__ __forceinline__ float isum_unbias(float s) { return __fmul_rn(s, -12582912.0f); }
__device__ __forceinline__ float q_block_acc(float acc, int biased, float dw, float s, float sb) {
  return __fmaf_rn(dw, __fmaf_rn(s, __int_as_float(biased), sb), acc);
}

// acc + w·x for the f32-activation products (F32 weights).
__device__ __forceinline__ float f_acc(float acc, float w, float x) { return __fmaf_rn(w, x, acc); }

// The warp sum of 32 lane partials v[0..31] as warp_sum's butterfly leaves it in every lane:
// level by level, lane i adds lane i ^ o for o = 16, 8, 4, 2, 1 (float addition commutes, so
// each level's pair sum is the same in both lanes).
__device__ __forceinline__ float pair_sum(float a, float b) { return __fadd_rn(a, b); }

}  // namespace gem::cuda
