// What the n-token products' files share (matmul_n.cu, matmul_n_dp4a.cu, matmul_n_mma.cu): the
// arguments of one product, the two kernels' launchers, and the weight loads with their L2 policy.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/types.cuh"
#include "backend/cuda/weight_loads.cuh"

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
  Q8Act yq;                  // the rows pass's gated form: y's q8 copy too, where the kernel can
  float cap = 0.0f;          // > 0: soft-cap (one matrix only)
  bool evict_first = true;   // CudaTuning::mv_evict_first
  bool preload = true;       // CudaTuning::mv_preload
  int form = 0;              // the kernel's form (tile and pipeline shape; 0 = the default)
};

// The dp4a kernel for 1 ≤ a.n ≤ kDp4aMaxN (Q4_0/Q8_0, any cols multiple of 32). Forms: 0 two
// rows per warp, 1 four. Every form computes each token's row as matvec does, bit for bit: the
// same blocks per lane in the same order, the same block term, the same warp sum.
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

// The rows pass's tensor-core kernel (matmul_rows_mma.cu) for 1 ≤ a.n ≤ kRowsMmaMaxN: Q4_0 or
// Q8_0 (gated: Q4_0), cols a multiple of 256, 16-byte aligned weights, scales and q8 rows
// (rows_mma_supports). Each token's row equals matvec's bit for bit.
// With a.yq set (the gated pair, rows a multiple of 32) the kernels of up to 16 rows also write
// y's q8 copy, each 32-row block of a token as quantize_q8 makes it from the same values; returns
// whether this launch wrote it.
constexpr int kRowsMmaMaxN = 32;
bool rows_mma_supports(const NArgs& a);
bool launch_rows_mma(const NArgs& a, cudaStream_t s);

// Weight loads: weight_loads.cuh (weight_policy, ld_w128/32/16), found from this namespace.

}  // namespace gem::cuda::mmn
