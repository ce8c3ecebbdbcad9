// Device loads of weight bytes, shared by the products (matvec.cu, matmul_n*): every weight byte
// is read once per product, so loads bypass L1 and carry an L2 policy — evict-first by default
// (CudaTuning::mv_evict_first), so the activations, norm weights and KV rows the small kernels
// read outlive them (305 vs 295 tok/s on the 12B), or evict-normal. Weights are never written by
// an earlier kernel of the stream, so the non-coherent path is safe before pdl_wait.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

namespace gem::cuda {

__device__ __forceinline__ uint64_t weight_policy(bool evict_first) {
  uint64_t pol;
  if (evict_first) {
    asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
  } else {
    asm("createpolicy.fractional.L2::evict_normal.b64 %0, 1.0;" : "=l"(pol));
  }
  return pol;
}
__device__ __forceinline__ uint4 ld_w128(const void* p, uint64_t pol) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p), "l"(pol));
  return v;
}
__device__ __forceinline__ uint32_t ld_w32(const void* p, uint64_t pol) {
  uint32_t v;
  asm("ld.global.nc.L1::no_allocate.L2::cache_hint.b32 %0, [%1], %2;" : "=r"(v) : "l"(p), "l"(pol));
  return v;
}
__device__ __forceinline__ unsigned short ld_w16(const void* p, uint64_t pol) {
  unsigned short v;
  asm("ld.global.nc.L1::no_allocate.L2::cache_hint.b16 %0, [%1], %2;" : "=h"(v) : "l"(p), "l"(pol));
  return v;
}
__device__ __forceinline__ int4 ld_weight(const int4* p, uint64_t pol) {
  int4 v;
  asm("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.s32 {%0, %1, %2, %3}, [%4], %5;"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p), "l"(pol));
  return v;
}
__device__ __forceinline__ __half ld_scale(const __half* p, uint64_t pol) {
  return __ushort_as_half(ld_w16(p, pol));
}

}  // namespace gem::cuda
