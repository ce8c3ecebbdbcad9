// What the n-token products' files share (matmul_n.cu, matmul_n_dp4a.cu, matmul_n_mma.cu): the
// arguments of one product, the two kernels' launchers, and the weight loads with their L2 policy.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/types.cuh"

namespace gem::cuda::mmn {

// One product: one matrix, or two of the same type and shape (gate, up) for the gated form.
struct NArgs {
  WType type = WType::kQ4_0;
  int n_mats = 1;
  const uint8_t* q[2] = {};  // Q4_0: [rows, cols/2], Q8_0: [rows, cols] split quants; Q6_K: raw
  const __half* d[2] = {};   // Q4_0/Q8_0: [rows, cols/32]
  int64_t rows = 0;
  int cols = 0;
  const float* x = nullptr;  // [n, cols] f32: the mma kernel's input
  Q8Act xq;                  // its q8 copy: the dp4a kernel's input
  int n = 0;                 // tokens
  float* y = nullptr;        // [n, rows]
  float cap = 0.0f;          // > 0: soft-cap (one matrix only)
  bool evict_first = true;   // CudaTuning::mv_evict_first
  bool preload = true;       // CudaTuning::mv_preload
  int form = 0;              // the kernel's form (tile and pipeline shape; 0 = the default)
};

// The dp4a kernel for 1 ≤ a.n ≤ kDp4aMaxN (Q4_0/Q8_0, any cols multiple of 32). Forms: 0 two
// rows per warp, 1 four.
constexpr int kDp4aMaxN = 8;
constexpr int kDp4aForms = 2;
void launch_dp4a(const NArgs& a, cudaStream_t s);
// The mma kernel for 1 ≤ a.n ≤ kMmaMaxN (Q4_0/Q8_0/Q6_K, cols a multiple of 128); split 0 = its
// rule, else blocks per cluster along K (1 to 16). Returns the split it launched with. Forms: 0 x
// copied three chunks ahead, 1 one chunk ahead (matmul_n_mma_*.cu).
constexpr int kMmaMaxN = 32;
constexpr int kMmaForms = 2;
int launch_mma(const NArgs& a, int split, cudaStream_t s);
int launch_mma_q4_0(const NArgs& a, int split, cudaStream_t s);
int launch_mma_q8_0(const NArgs& a, int split, cudaStream_t s);
int launch_mma_q6_k(const NArgs& a, int split, cudaStream_t s);

// ---- weight loads ----
// Every weight byte is read once per product: loads bypass L1 and carry the L2 evict-first
// policy (CudaTuning::mv_evict_first), as the decode matvec's do, so that activations and the
// next kernels' data outlive them. Weights are never written by an earlier kernel of the stream,
// so the non-coherent path is safe before pdl_wait.
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

}  // namespace gem::cuda::mmn
