// The rows pass's Q4_0/Q8_0 products on the tensor cores, each row equal bit for bit to its decode
// step (matvec): the weights are read once for up to 32 rows, and each row's arithmetic is
// matvec's.
//
// Why that is possible: matvec's lane l adds the terms of blocks l, l + 32, l + 64, ... in that
// order (q_block_acc, from each block's exact integer sum), then warp_sum adds the 32 lane
// partials in a fixed butterfly. The integer sum of one 32-weight block is exact however it is
// computed, so one mma.sync m16n8k32 (int8, k = one block) gives it for 16 rows × 8 tokens at
// once. This kernel keeps matvec's 32 lane partials as 32 "classes" (block b belongs to class
// b mod 32): one CTA owns 16 rows, warp w the classes w, w + 8, w + 16 and w + 24, and it runs
// through the chunks of 32 blocks in order, so each class partial sees its blocks in matvec's
// order. At the end warp w adds its four partials as the butterfly's first two levels do, and the
// last three levels run over the eight warps' sums in shared memory.
//
// Data: the weights of a chunk (16 rows × 32 blocks, and their scales) and the activations' q8
// rows (n tokens × 32 blocks, and their ds) go global → shared by cp.async, kStages − 1 chunks in
// flight; fragments are read from shared memory without bank conflicts (padded rows). One CTA a
// 16-row tile: measured on the H200 (12B, 8 rows) at 0.7-1.1 TB/s for the layer products and
// 2.1 TB/s for the Q8_0 head, latency-bound (bench/results/cuda.md, "Rows pass").
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

#include "backend/cuda/block_terms.cuh"
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/matmul_n_parts.cuh"

namespace gem::cuda::mmn {
namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kStages = 3;
constexpr int kChunk = 32;  // blocks per chunk: one of every class

template <bool kQ8>
struct Layout {
  static constexpr int kQB = kQ8 ? 32 : 16;               // quant bytes per block
  static constexpr int kWqStride = kChunk * kQB + 16;     // one row's chunk, padded
  static constexpr int kWdStride = 80;                    // one row's 32 scales (64 B), padded
  static constexpr int kXqStride = kChunk * 32 + 16;      // one token's chunk of q8
  static constexpr int kXdStride = kChunk * 8 + 16;       // one token's 32 (d, d·Σq)
  template <int kMats, int kNT>
  static constexpr int stage_bytes() {
    return kMats * 16 * (kWqStride + kWdStride) + kNT * 8 * (kXqStride + kXdStride);
  }
  // The pipeline's stages; after the loop the same memory holds the reduction's sums.
  template <int kMats, int kNT>
  static constexpr int smem_bytes() {
    constexpr int pipe = kStages * stage_bytes<kMats, kNT>();
    constexpr int red = kWarps * kMats * 16 * kNT * 8 * 4;
    return pipe > red ? pipe : red;
  }
};

// The block's integer sums for 16 rows × 8 tokens: a = the rows' quants (Q4_0: raw nibbles,
// unsigned), b = the tokens' q8 values.
template <bool kQ8>
__device__ __forceinline__ void mma_block(const uint32_t (&a)[4], uint32_t b0, uint32_t b1,
                                          int (&c)[4]) {
  if constexpr (kQ8) {
    asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%10, %10, %10, %10};"
        : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(0));
  } else {
    asm("mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%10, %10, %10, %10};"
        : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(0));
  }
}

// y[t, r] (kMats = 1, soft-capped when cap > 0) or gelu_tanh(gate·x)·(up·x) (kMats = 2) for the 16
// rows of this CTA and the a.n ≤ 8·kNT tokens.
template <bool kQ8, int kMats, int kNT>
__global__ void __launch_bounds__(kThreads, kNT == 1 && kMats == 1 ? 2 : 1) rows_mma_kernel(NArgs a) {
  using L = Layout<kQ8>;
  constexpr int kStage = L::template stage_bytes<kMats, kNT>();
  constexpr int kT = kNT * 8;
  extern __shared__ __align__(16) unsigned char smem[];
  pdl_trigger();
  const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, g = lane >> 2, q = lane & 3;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * 16;
  const int cols = a.cols, nb = cols / 32, n = a.n;
  const int n_chunks = (nb + kChunk - 1) / kChunk;
  const int64_t row_bytes = static_cast<int64_t>(nb) * L::kQB;

  auto wq_of = [&](int st, int m) { return smem + st * kStage + m * 16 * L::kWqStride; };
  auto wd_of = [&](int st, int m) {
    return smem + st * kStage + kMats * 16 * L::kWqStride + m * 16 * L::kWdStride;
  };
  auto xq_of = [&](int st) { return smem + st * kStage + kMats * 16 * (L::kWqStride + L::kWdStride); };
  auto xd_of = [&](int st) { return xq_of(st) + kT * L::kXqStride; };

  // Chunk ch's weights (rows past the end load the last row, never stored) and activations.
  auto load_w = [&](int ch) {
    if (ch >= n_chunks) return;
    const int st = ch % kStages, nblk = min(kChunk, nb - ch * kChunk);
    constexpr int kPieces = kChunk * L::kQB / 16;  // 16-byte pieces of one row's chunk
    const int pieces = nblk * L::kQB / 16;
    for (int i = tid; i < kMats * 16 * kPieces; i += kThreads) {
      const int m = i / (16 * kPieces), r = (i / kPieces) % 16, p = i % kPieces;
      if (p >= pieces) continue;
      const int64_t row = min(row0 + r, a.rows - 1);
      cp_async16(wq_of(st, m) + r * L::kWqStride + p * 16,
           (m == 0 ? a.q[0] : a.q[1]) + row * row_bytes +
               static_cast<int64_t>(ch) * kChunk * L::kQB + p * 16);
    }
    const int dpieces = nblk / 8;  // 8 scales a piece (nb is a multiple of 8)
    for (int i = tid; i < kMats * 16 * 4; i += kThreads) {
      const int m = i / 64, r = (i / 4) % 16, p = i % 4;
      if (p >= dpieces) continue;
      const int64_t row = min(row0 + r, a.rows - 1);
      cp_async16(wd_of(st, m) + r * L::kWdStride + p * 16,
           (m == 0 ? a.d[0] : a.d[1]) + row * nb + ch * kChunk + p * 8);
    }
  };
  auto load_x = [&](int ch) {
    if (ch >= n_chunks) return;
    const int st = ch % kStages, nblk = min(kChunk, nb - ch * kChunk);
    const int pieces = nblk * 2;  // 32 q8 bytes a block
    for (int i = tid; i < n * 64; i += kThreads) {
      const int t = i / 64, p = i % 64;
      if (p >= pieces) continue;
      cp_async16(xq_of(st) + t * L::kXqStride + p * 16,
           a.xq.q + static_cast<int64_t>(t) * cols + static_cast<int64_t>(ch) * kChunk * 32 + p * 16);
    }
    const int dpieces = nblk / 2;  // two float2 a piece
    for (int i = tid; i < n * 16; i += kThreads) {
      const int t = i / 16, p = i % 16;
      if (p >= dpieces) continue;
      cp_async16(xd_of(st) + t * L::kXdStride + p * 16,
           a.xq.ds + static_cast<int64_t>(t) * nb + ch * kChunk + p * 2);
    }
  };

  // Prologue: the first chunks' weights before pdl_wait (the previous kernel wrote only x), then
  // their activations; group k completes stage k's data.
  for (int s = 0; s < kStages - 1; ++s) load_w(s);
  pdl_wait();
  for (int s = 0; s < kStages - 1; ++s) {
    load_x(s);
    cp_async_commit();
  }

  float acc[kMats][4][kNT][4] = {};
  for (int ch = 0; ch < n_chunks; ++ch) {
    cp_async_wait<kStages - 2>();
    __syncthreads();  // chunk ch visible to all; stage (ch − 1) % kStages free to refill
    load_w(ch + kStages - 1);
    load_x(ch + kStages - 1);
    cp_async_commit();
    // The loads above diverge (loops of uneven trip counts); mma.sync is .aligned, and the
    // compiler cannot see it inside asm: the warp reconverges here (else: illegal instruction).
    __syncwarp();
    const int st = ch % kStages;
#pragma unroll
    for (int ci = 0; ci < 4; ++ci) {
      const int c = w + 8 * ci;
      if (ch * kChunk + c >= nb) break;  // the last chunk's missing blocks (uniform per warp)
      uint32_t af[kMats][4];
      float dw[kMats][2];
#pragma unroll
      for (int m = 0; m < kMats; ++m) {
        const unsigned char* wq = wq_of(st, m) + c * L::kQB + 4 * q;
        if constexpr (kQ8) {
          af[m][0] = *reinterpret_cast<const uint32_t*>(wq + g * L::kWqStride);
          af[m][1] = *reinterpret_cast<const uint32_t*>(wq + (g + 8) * L::kWqStride);
          af[m][2] = *reinterpret_cast<const uint32_t*>(wq + g * L::kWqStride + 16);
          af[m][3] = *reinterpret_cast<const uint32_t*>(wq + (g + 8) * L::kWqStride + 16);
        } else {
          // Byte j of a block holds weight j (low nibble) and j + 16 (high nibble).
          const uint32_t lo = *reinterpret_cast<const uint32_t*>(wq + g * L::kWqStride);
          const uint32_t hi = *reinterpret_cast<const uint32_t*>(wq + (g + 8) * L::kWqStride);
          af[m][0] = lo & 0x0F0F0F0Fu;
          af[m][1] = hi & 0x0F0F0F0Fu;
          af[m][2] = (lo >> 4) & 0x0F0F0F0Fu;
          af[m][3] = (hi >> 4) & 0x0F0F0F0Fu;
        }
        const __half* wd = reinterpret_cast<const __half*>(wd_of(st, m));
        dw[m][0] = __half2float(wd[g * (L::kWdStride / 2) + c]);
        dw[m][1] = __half2float(wd[(g + 8) * (L::kWdStride / 2) + c]);
      }
#pragma unroll
      for (int j = 0; j < kNT; ++j) {
        if (8 * j >= n) break;
        // Tokens past n read token n − 1 (their sums are never stored).
        const int tb = min(8 * j + g, n - 1);
        const unsigned char* xq = xq_of(st) + tb * L::kXqStride + c * 32 + 4 * q;
        const uint32_t b0 = *reinterpret_cast<const uint32_t*>(xq);
        const uint32_t b1 = *reinterpret_cast<const uint32_t*>(xq + 16);
        const float2* xd = reinterpret_cast<const float2*>(xd_of(st));
        const float2 ds0 = xd[min(8 * j + 2 * q, n - 1) * (L::kXdStride / 8) + c];
        const float2 ds1 = xd[min(8 * j + 2 * q + 1, n - 1) * (L::kXdStride / 8) + c];
#pragma unroll
        for (int m = 0; m < kMats; ++m) {
          int cs[4];
          mma_block<kQ8>(af[m], b0, b1, cs);
          // cs: (row g, token 2q), (g, 2q + 1), (g + 8, 2q), (g + 8, 2q + 1) of the tile.
          acc[m][ci][j][0] = q_block_acc<kQ8>(acc[m][ci][j][0], cs[0], dw[m][0], ds0);
          acc[m][ci][j][1] = q_block_acc<kQ8>(acc[m][ci][j][1], cs[1], dw[m][0], ds1);
          acc[m][ci][j][2] = q_block_acc<kQ8>(acc[m][ci][j][2], cs[2], dw[m][1], ds0);
          acc[m][ci][j][3] = q_block_acc<kQ8>(acc[m][ci][j][3], cs[3], dw[m][1], ds1);
        }
      }
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // the pipeline's shared memory becomes the reduction's

  // warp_sum's butterfly: levels 16 and 8 pair this warp's classes (w with w + 16, w + 8 with
  // w + 24, then the two), levels 4, 2, 1 pair the warps' sums (w with w + 4, then w + 2, w + 1).
  float* red = reinterpret_cast<float*>(smem);  // [warp][mat][row 16][token kT]
#pragma unroll
  for (int m = 0; m < kMats; ++m) {
#pragma unroll
    for (int j = 0; j < kNT; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const float s2 = pair_sum(pair_sum(acc[m][0][j][e], acc[m][2][j][e]),
                                  pair_sum(acc[m][1][j][e], acc[m][3][j][e]));
        const int r = g + 8 * (e >> 1), t = 8 * j + 2 * q + (e & 1);
        red[((w * kMats + m) * 16 + r) * kT + t] = s2;
      }
    }
  }
  __syncthreads();
  for (int o = tid; o < 16 * n; o += kThreads) {
    const int r = o / n, t = o % n;
    float v[kMats];
#pragma unroll
    for (int m = 0; m < kMats; ++m) {
      float s[8];
#pragma unroll
      for (int k = 0; k < 8; ++k) s[k] = red[((k * kMats + m) * 16 + r) * kT + t];
      const float s3_0 = pair_sum(s[0], s[4]), s3_1 = pair_sum(s[1], s[5]);
      const float s3_2 = pair_sum(s[2], s[6]), s3_3 = pair_sum(s[3], s[7]);
      v[m] = pair_sum(pair_sum(s3_0, s3_2), pair_sum(s3_1, s3_3));
    }
    if (row0 + r >= a.rows) continue;
    float out;
    if constexpr (kMats == 2) {
      out = gelu_tanh(v[0]) * v[1];
    } else {
      out = a.cap > 0.0f ? a.cap * tanhf(v[0] / a.cap) : v[0];
    }
    a.y[static_cast<int64_t>(t) * a.rows + row0 + r] = out;
  }
}

template <bool kQ8, int kMats, int kNT>
void launch_instance(const NArgs& a, cudaStream_t s) {
  constexpr int kSmem = Layout<kQ8>::template smem_bytes<kMats, kNT>();
  auto kernel = rows_mma_kernel<kQ8, kMats, kNT>;
  static const bool configured = [&] {
    GEM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
    return true;
  }();
  (void)configured;
  const unsigned grid = static_cast<unsigned>((a.rows + 15) / 16);
  launch(kernel, grid, kThreads, kSmem, s, a);
}

template <bool kQ8, int kMats>
void launch_nt(const NArgs& a, cudaStream_t s) {
  if (a.n <= 8) {
    launch_instance<kQ8, kMats, 1>(a, s);
  } else if (a.n <= 16) {
    launch_instance<kQ8, kMats, 2>(a, s);
  } else {
    launch_instance<kQ8, kMats, 4>(a, s);
  }
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

}  // namespace

bool rows_mma_supports(const NArgs& a) {
  return (a.type == WType::kQ4_0 || a.type == WType::kQ8_0) && a.cols % 256 == 0 &&
         (a.n_mats == 1 || a.type == WType::kQ4_0) && aligned16(a.q[0]) && aligned16(a.d[0]) &&
         (a.n_mats == 1 || (aligned16(a.q[1]) && aligned16(a.d[1]))) && aligned16(a.xq.q) &&
         aligned16(a.xq.ds);
}

void launch_rows_mma(const NArgs& a, cudaStream_t s) {
  if (a.type == WType::kQ8_0) {
    launch_nt<true, 1>(a, s);
  } else if (a.n_mats == 2) {
    launch_nt<false, 2>(a, s);
  } else {
    launch_nt<false, 1>(a, s);
  }
  GEM_CUDA_LAUNCHED();
}

}  // namespace gem::cuda::mmn
