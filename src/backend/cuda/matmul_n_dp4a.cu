// The n-token products on the CUDA cores, for small n: the decode matvec's kernel widened to kN
// tokens. A lane loads the weights of its 32-column blocks once and takes the integer dot
// product with the q8 copy of every token, so each weight is read from memory once and reused
// from registers; the activations (n·cols bytes, resident in L1/L2) are re-read per row group.
#include <cuda_fp16.h>

#include <algorithm>

#include "backend/cuda/block_terms.cuh"
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/matmul_n_parts.cuh"

namespace gem::cuda::mmn {
namespace {

constexpr int kWarps = 4;  // warps per block: small blocks, many per SM, as in matvec

// One 32-weight block of one row: Q4_0 16 nibble bytes (lo), Q8_0 32 int8 (lo, hi).
struct WBlock {
  uint4 lo, hi;
};

template <bool kQ8>
__device__ __forceinline__ WBlock load_block(const uint8_t* wrow, int b, uint64_t pol) {
  WBlock w;
  if constexpr (kQ8) {
    w.lo = ld_w128(wrow + 32LL * b, pol);
    w.hi = ld_w128(wrow + 32LL * b + 16, pol);
  } else {
    w.lo = ld_w128(wrow + 16LL * b, pol);
    w.hi = make_uint4(0, 0, 0, 0);
  }
  return w;
}

// The block's quants as eight words of 4 signed (Q8_0) or unsigned (Q4_0 nibble) bytes, weights
// 0..15 in words 0..3 and 16..31 in words 4..7: the Q4_0 low nibbles are weights 0..15 (GGUF order).
template <bool kQ8>
__device__ __forceinline__ void unpack(const WBlock& w, int (&v)[8]) {
  const uint32_t words[8] = {w.lo.x, w.lo.y, w.lo.z, w.lo.w, w.hi.x, w.hi.y, w.hi.z, w.hi.w};
  if constexpr (kQ8) {
#pragma unroll
    for (int k = 0; k < 8; ++k) v[k] = static_cast<int>(words[k]);
  } else {
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      v[k] = static_cast<int>(words[k] & 0x0F0F0F0Fu);
      v[k + 4] = static_cast<int>((words[k] >> 4) & 0x0F0F0F0Fu);
    }
  }
}

// The block's exact integer sum from `start` (block_terms.cuh's isum_start; Q4_0: raw nibbles), as
// matvec takes it: two independent dp4a chains; the float term is q_block_acc's.
__device__ __forceinline__ int block_isum(const int (&v)[8], int4 x0, int4 x1, int start) {
  int lo = __dp4a(v[0], x0.x, start);
  int hi = __dp4a(v[4], x1.x, 0);
  lo = __dp4a(v[1], x0.y, lo);
  hi = __dp4a(v[5], x1.y, hi);
  lo = __dp4a(v[2], x0.z, lo);
  hi = __dp4a(v[6], x1.z, hi);
  lo = __dp4a(v[3], x0.w, lo);
  hi = __dp4a(v[7], x1.w, hi);
  return lo + hi;
}

// y[t, r] (kMats = 1) or gelu_tanh(gate·x)·(up·x) (kMats = 2) for kRows consecutive rows per warp
// and kN tokens (tokens ≥ n repeat token n − 1 and are not stored). Lanes stride over the 32-column
// blocks of the rows, kUnroll blocks loaded before any is used; the weights of the first round
// are in flight before pdl_wait (CudaTuning::mv_preload), the activations are read after it.
template <bool kQ8, int kMats, int kN, int kRows, int kUnroll>
__global__ void __launch_bounds__(kWarps * 32) dp4a_kernel(NArgs a) {
  pdl_trigger();
  const int lane = threadIdx.x & 31;
  const int64_t row0 = (static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5)) * kRows;
  const int cols = a.cols, nb = cols / 32;
  if (!a.preload) pdl_wait();
  if (row0 >= a.rows) return;
  const uint64_t pol = weight_policy(a.evict_first);
  const int64_t row_bytes = kQ8 ? static_cast<int64_t>(cols) : static_cast<int64_t>(cols) / 2;
  const uint8_t* wrow[kMats][kRows];
  const __half* drow[kMats][kRows];
#pragma unroll
  for (int m = 0; m < kMats; ++m) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int64_t row = row0 + r < a.rows ? row0 + r : a.rows - 1;
      wrow[m][r] = a.q[m] + row * row_bytes;
      drow[m][r] = a.d[m] + row * nb;
    }
  }
  // Token t's q8 row (tokens past n read the last one).
  int64_t xoff[kN];
#pragma unroll
  for (int t = 0; t < kN; ++t) xoff[t] = static_cast<int64_t>(t < a.n ? t : a.n - 1) * cols;

  float acc[kMats][kRows][kN] = {};
  bool wait_first = a.preload;
  for (int b0 = lane; b0 < nb; b0 += 32 * kUnroll) {
    WBlock w[kUnroll][kMats][kRows];
    unsigned short dw[kUnroll][kMats][kRows];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int b = b0 + 32 * u;
      if (b < nb) {
#pragma unroll
        for (int m = 0; m < kMats; ++m) {
#pragma unroll
          for (int r = 0; r < kRows; ++r) {
            w[u][m][r] = load_block<kQ8>(wrow[m][r], b, pol);
            dw[u][m][r] = ld_w16(drow[m][r] + b, pol);
          }
        }
      }
    }
    if (wait_first) {
      pdl_wait();
      wait_first = false;
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int b = b0 + 32 * u;
      if (b >= nb) continue;
      int v[kMats][kRows][8];
      float d[kMats][kRows];
#pragma unroll
      for (int m = 0; m < kMats; ++m) {
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          unpack<kQ8>(w[u][m][r], v[m][r]);
          d[m][r] = __half2float(__ushort_as_half(dw[u][m][r]));
        }
      }
#pragma unroll
      for (int t = 0; t < kN; ++t) {
        // Plain loads, not __ldg: the previous kernel writes xq (see pdl_wait in cuda_common.cuh).
        const int4* xp = reinterpret_cast<const int4*>(a.xq.q + xoff[t]) + 2 * b;
        const int4 x0 = xp[0], x1 = xp[1];
        const Q8Ds s = a.xq.ds[xoff[t] / 32 + b];
        const int start = isum_start<kQ8>(s.qsum);
        const float sb = isum_unbias(s.s);
#pragma unroll
        for (int m = 0; m < kMats; ++m) {
#pragma unroll
          for (int r = 0; r < kRows; ++r) {
            acc[m][r][t] = q_block_acc(acc[m][r][t], block_isum(v[m][r], x0, x1, start), d[m][r],
                                       s.s, sb);
          }
        }
      }
    }
  }
  if (wait_first) pdl_wait();
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
#pragma unroll
    for (int t = 0; t < kN; ++t) {
      float v[kMats];
#pragma unroll
      for (int m = 0; m < kMats; ++m) v[m] = warp_sum(acc[m][r][t]);
      if (lane == 0 && t < a.n && row0 + r < a.rows) {
        float out;
        if constexpr (kMats == 2) {
          out = gelu_tanh(v[0]) * v[1];
        } else {
          out = a.cap > 0.0f ? a.cap * tanhf(v[0] / a.cap) : v[0];
        }
        a.y[static_cast<int64_t>(t) * a.rows + row0 + r] = out;
      }
    }
  }
}

template <bool kQ8, int kMats, int kN, int kRows>
void launch_rows(const NArgs& a, cudaStream_t s) {
  // Blocks per lane per round: as matvec for one or two tokens and two rows (Q4_0 4, Q8_0 2),
  // halved for more tokens (their partial sums take the registers) and for more rows.
  constexpr int kBase = std::max(1, (kQ8 ? 2 : 4) / kMats / (kRows / 2));
  constexpr int kUnroll = kN <= 2 ? kBase : (kBase > 1 ? kBase / 2 : 1);
  const int64_t rows_per_block = kWarps * kRows;
  const unsigned grid = static_cast<unsigned>((a.rows + rows_per_block - 1) / rows_per_block);
  launch(dp4a_kernel<kQ8, kMats, kN, kRows, kUnroll>, grid, kWarps * 32, 0, s, a);
}

template <bool kQ8, int kMats, int kN>
void launch_n(const NArgs& a, cudaStream_t s) {
  if (a.form == 1) {
    launch_rows<kQ8, kMats, kN, 4>(a, s);
  } else {
    launch_rows<kQ8, kMats, kN, 2>(a, s);
  }
}

template <bool kQ8, int kMats>
void launch_type(const NArgs& a, cudaStream_t s) {
  if (a.n <= 2) {
    launch_n<kQ8, kMats, 2>(a, s);
  } else if (a.n <= 4) {
    launch_n<kQ8, kMats, 4>(a, s);
  } else {
    launch_n<kQ8, kMats, 8>(a, s);
  }
}

}  // namespace

void launch_dp4a(const NArgs& a, cudaStream_t s) {
  const bool q8 = a.type == WType::kQ8_0;
  if (a.n_mats == 2) {
    q8 ? launch_type<true, 2>(a, s) : launch_type<false, 2>(a, s);
  } else {
    q8 ? launch_type<true, 1>(a, s) : launch_type<false, 1>(a, s);
  }
  GEM_CUDA_LAUNCHED();
}

}  // namespace gem::cuda::mmn
