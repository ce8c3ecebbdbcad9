// The rows pass's Q4_0/Q8_0 products on the tensor cores, each row equal bit for bit to its decode
// step (matvec): the weights are read once for up to 32 rows, and each row's arithmetic is
// matvec's.
//
// Why that is possible: matvec's lane l adds the terms of blocks l, l + 32, l + 64, ... in that
// order (q_block_acc, from each block's exact integer sum), then warp_sum adds the 32 lane
// partials in a fixed butterfly. The integer sum of one 32-weight block is exact however it is
// computed, so one mma.sync m16n8k32 (int8, k = one block) gives it for 16 rows × 8 tokens at
// once. This kernel keeps matvec's 32 lane partials as 32 "classes" (block b belongs to class
// b mod 32): a CTA works on a tile of rows, its 16 warps own two classes each (w and w + 16),
// and it runs through the chunks of 32 blocks in order, so each class partial sees its blocks in
// matvec's order. At the end each warp adds its two partials as the butterfly's first level does
// (level 16), and levels 8 to 1 run over the warps' sums in shared memory.
//
// Data: the weights of a chunk (16·kMT rows × 32 blocks, and their scales) and the activations'
// q8 rows (n tokens × 32 blocks, and their ds) go global → shared by cp.async, kStages − 1 chunks
// in flight; fragments are read from shared memory without bank conflicts (padded rows). Each
// thread's copies are fixed slots (their matrix, row and piece follow from the thread index), so
// a step adds only the chunk's and the tile's offsets. CTAs are persistent (as many as fit):
// each takes tiles blockIdx.x, + gridDim.x, ... and its pipeline runs on across them. The
// integer sums come from the mma biased (block_terms.cuh: no I2F).
//
// Shapes (measured on the H200, bench/results/cuda.md "Rows pass"): up to 16 rows, 32-row tiles
// (each warp's mma covers two 16-row halves: half the activation copies per weight byte) over
// 16 warps (two classes a warp: level 16 of the butterfly in the warp, levels 8 to 1 over the
// warps), and up to 8 rows 64-row tiles where the matrix has rows enough to fill the SMs with
// them; 17–32 rows, 16 warps as well, 32-row tiles for one matrix and 16-row tiles for the gated
// pair (its accumulators for 32 rows would not fit the registers), the tokens in one tile.
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

#include "backend/cuda/block_terms.cuh"
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/matmul_n_parts.cuh"

namespace gem::cuda::mmn {
namespace {

constexpr int kChunk = 32;  // blocks per chunk: one of every class
constexpr int kW = 16;      // warps a CTA (8 lost to 16 at every row count: bench/results/cuda.md)
constexpr int kCI = 32 / kW;  // classes per warp: w, w + kW

template <bool kQ8>
struct Layout {
  static constexpr int kQB = kQ8 ? 32 : 16;               // quant bytes per block
  static constexpr int kWqStride = kChunk * kQB + 16;     // one row's chunk, padded
  static constexpr int kWdStride = 80;                    // one row's 32 scales (64 B), padded
  static constexpr int kXqStride = kChunk * 32 + 16;      // one token's chunk of q8
  static constexpr int kXdStride = kChunk * 8 + 16;       // one token's 32 (d, d·Σq)
  template <int kMats, int kNT, int kMT>
  static constexpr int stage_bytes() {
    return kMats * 16 * kMT * (kWqStride + kWdStride) + kNT * 8 * (kXqStride + kXdStride);
  }
  // The reduction's [warp][mat][row 16·kMT][token] sums, apart from the pipeline.
  template <int kMats, int kNT, int kMT>
  static constexpr int red_bytes() {
    return kW * kMats * 16 * kMT * kNT * 8 * 4;
  }
  // Four stages where they fit beside the reduction in 220 KB, else three, else two (the
  // device's limit is 227 KB a CTA).
  template <int kMats, int kNT, int kMT>
  static constexpr int stages() {
    constexpr int st = stage_bytes<kMats, kNT, kMT>(), red = red_bytes<kMats, kNT, kMT>();
    return 4 * st + red <= 220 * 1024 ? 4 : 3 * st + red <= 227 * 1024 ? 3 : 2;
  }
  template <int kMats, int kNT, int kMT>
  static constexpr int smem_bytes() {
    return stages<kMats, kNT, kMT>() * stage_bytes<kMats, kNT, kMT>() + red_bytes<kMats, kNT, kMT>();
  }
};

// The block's integer sums for 16 rows × 8 tokens, each plus c0: a = the rows' quants (Q4_0: raw
// nibbles, unsigned), b = the tokens' q8 values.
template <bool kQ8>
__device__ __forceinline__ void mma_block(const uint32_t (&a)[4], uint32_t b0, uint32_t b1,
                                          int c0, int (&c)[4]) {
  if constexpr (kQ8) {
    asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%10, %10, %10, %10};"
        : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(c0));
  } else {
    asm("mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%10, %10, %10, %10};"
        : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(c0));
  }
}

// A step of a CTA: its tile (index, first row) and the chunk of 32 blocks. advance() moves to
// the next step without a division (the generic step → tile arithmetic cost issue slots).
struct Cursor {
  int tile, ch;
  int64_t row0;  // tile · kR, kept: the copies and the epilogue use it every step
  __device__ void set(int tile_, int kR) {
    tile = tile_;
    row0 = static_cast<int64_t>(tile) * kR;
  }
  __device__ void advance(int n_chunks, int stride, int kR) {
    if (++ch == n_chunks) {
      ch = 0;
      set(tile + stride, kR);
    }
  }
};

// y[t, r] (kMats = 1, soft-capped when cap > 0) or gelu_tanh(gate·x)·(up·x) (kMats = 2) for the
// a.n ≤ 8·kNT tokens, over the tiles blockIdx.x, blockIdx.x + gridDim.x, ... of kR = 16·kMT rows.
// Each warp's mma covers kMT 16-row halves of the tile.
template <bool kQ8, int kMats, int kNT, int kMT>
__global__ void __launch_bounds__(kW * 32, 1) rows_mma_kernel(NArgs a) {
  using L = Layout<kQ8>;
  constexpr int kThreads = kW * 32;
  constexpr int kStage = L::template stage_bytes<kMats, kNT, kMT>();
  constexpr int kStages = L::template stages<kMats, kNT, kMT>();
  constexpr int kT = kNT * 8;
  constexpr int kR = 16 * kMT;
  extern __shared__ __align__(16) unsigned char smem[];
  pdl_trigger();
  const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, g = lane >> 2, q = lane & 3;
  const int cols = a.cols, nb = cols / 32;
  const int n_chunks = (nb + kChunk - 1) / kChunk;
  const int64_t row_bytes = static_cast<int64_t>(nb) * L::kQB;
  const int n_tiles = static_cast<int>((a.rows + kR - 1) / kR);
  const int my_tiles = (n_tiles - static_cast<int>(blockIdx.x) + gridDim.x - 1) / gridDim.x;
  const int total = my_tiles * n_chunks;  // this CTA's (tile, chunk) steps, in order
  const int stride = static_cast<int>(gridDim.x);
  const int nt = a.n;
  Cursor first;
  first.ch = 0;
  first.set(static_cast<int>(blockIdx.x), kR);

  auto wq_of = [&](int st, int m) { return smem + st * kStage + m * kR * L::kWqStride; };
  auto wd_of = [&](int st, int m) {
    return smem + st * kStage + kMats * kR * L::kWqStride + m * kR * L::kWdStride;
  };
  auto xq_of = [&](int st) { return smem + st * kStage + kMats * kR * (L::kWqStride + L::kWdStride); };
  auto xd_of = [&](int st) { return xq_of(st) + kT * L::kXqStride; };
  float* red = reinterpret_cast<float*>(smem + kStages * kStage);  // [warp][mat][row kR][token]

  // Each thread's share of a step's copies is fixed (the slots' matrix, row and piece follow from
  // tid: the slot counts are multiples of the block size), so a step adds only the chunk's and
  // the tile's offsets (the generic index arithmetic cost ~38 instructions a 16-byte copy).
  constexpr int kPieces = kChunk * L::kQB / 16;  // 16-byte pieces of one row's chunk
  static_assert(kThreads % kPieces == 0 && (kR * kPieces) % kThreads == 0);
  constexpr int kWSlotsM = kR * kPieces / kThreads;  // a thread's weight pieces per matrix
  constexpr int kRStep = kThreads / kPieces;         // rows between them
  const int wp = tid % kPieces, wr = tid / kPieces;
  constexpr int kDSlots = kMats * kR * 4;  // scale pieces (8 scales each) of a step: one a thread
  static_assert(kDSlots <= kThreads && kThreads % 64 == 0);
  const int dm = tid / (kR * 4), dr = (tid / 4) % kR, dp = tid % 4;
  constexpr int kXStep = kThreads / 64;   // tokens between a thread's q8 pieces (64 a token)
  constexpr int kSStep = kThreads / 16;   // ... and its ds pieces (16 a token)
  const int xp = tid % 64, xt = tid / 64, sp = tid % 16, stk = tid / 16;

  // Step it's weights (rows past the end load the last row, never stored) and activations.
  auto load_w = [&](int it, const Cursor& cur) {
    if (it >= total) return;
    const int st = it % kStages, ch = cur.ch, nblk = min(kChunk, nb - ch * kChunk);
    if (wp < nblk * L::kQB / 16) {
      const int64_t coff = static_cast<int64_t>(ch) * kChunk * L::kQB + wp * 16;
#pragma unroll
      for (int m = 0; m < kMats; ++m) {
        const uint8_t* q = m == 0 ? a.q[0] : a.q[1];
#pragma unroll
        for (int k = 0; k < kWSlotsM; ++k) {
          const int r = wr + kRStep * k;
          const int64_t row = min(cur.row0 + r, a.rows - 1);
          cp_async16(wq_of(st, m) + r * L::kWqStride + wp * 16, q + row * row_bytes + coff);
        }
      }
    }
    if (tid < kDSlots && dp < nblk / 8) {  // nb is a multiple of 8
      const int64_t row = min(cur.row0 + dr, a.rows - 1);
      cp_async16(wd_of(st, dm) + dr * L::kWdStride + dp * 16,
                 (dm == 0 ? a.d[0] : a.d[1]) + row * nb + ch * kChunk + dp * 8);
    }
  };
  auto load_x = [&](int it, const Cursor& cur) {
    if (it >= total) return;
    const int st = it % kStages, ch = cur.ch, nblk = min(kChunk, nb - ch * kChunk);
    if (xp < nblk * 2) {  // 32 q8 bytes a block
      const int8_t* src = a.xq.q + static_cast<int64_t>(xt) * cols + ch * kChunk * 32 + xp * 16;
#pragma unroll
      for (int k = 0; k < (kT + kXStep - 1) / kXStep; ++k) {
        const int t = xt + kXStep * k;
        if (t < nt) {
          cp_async16(xq_of(st) + t * L::kXqStride + xp * 16, src + static_cast<int64_t>(kXStep * k) * cols);
        }
      }
    }
    if (sp < nblk / 2) {  // two float2 a piece
      const float2* src = a.xq.ds + static_cast<int64_t>(stk) * nb + ch * kChunk + sp * 2;
#pragma unroll
      for (int k = 0; k < (kT + kSStep - 1) / kSStep; ++k) {
        const int t = stk + kSStep * k;
        if (t < nt) {
          cp_async16(xd_of(st) + t * L::kXdStride + sp * 16, src + static_cast<int64_t>(kSStep * k) * nb);
        }
      }
    }
  };

  // Prologue: the first steps' weights before pdl_wait (the previous kernel wrote only x), then
  // their activations; group k completes step k's data.
  Cursor ld = first;
  for (int s = 0; s < kStages - 1; ++s) {
    load_w(s, ld);
    ld.advance(n_chunks, stride, kR);
  }
  pdl_wait();
  ld = first;
  for (int s = 0; s < kStages - 1; ++s) {
    load_x(s, ld);
    cp_async_commit();
    ld.advance(n_chunks, stride, kR);
  }
  Cursor tile = first;  // the compute step's

  float acc[kMats][kMT][kCI][kNT][4] = {};
  for (int it = 0; it < total; ++it) {
    cp_async_wait<kStages - 2>();
    __syncthreads();  // step it visible to all; stage (it − 1) % kStages free to refill
    load_w(it + kStages - 1, ld);
    load_x(it + kStages - 1, ld);
    cp_async_commit();
    ld.advance(n_chunks, stride, kR);
    // The loads above diverge (loops of uneven trip counts); mma.sync is .aligned, and the
    // compiler cannot see it inside asm: the warp reconverges here (else: illegal instruction).
    __syncwarp();
    const int st = it % kStages, ch = tile.ch;
#pragma unroll
    for (int ci = 0; ci < kCI; ++ci) {
      const int c = w + kW * ci;
      if (ch * kChunk + c >= nb) break;  // the last chunk's missing blocks (uniform per warp)
      uint32_t af[kMats][kMT][4];
      float dw[kMats][kMT][2];
#pragma unroll
      for (int m = 0; m < kMats; ++m) {
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          const unsigned char* wq = wq_of(st, m) + 16 * mt * L::kWqStride + c * L::kQB + 4 * q;
          if constexpr (kQ8) {
            af[m][mt][0] = *reinterpret_cast<const uint32_t*>(wq + g * L::kWqStride);
            af[m][mt][1] = *reinterpret_cast<const uint32_t*>(wq + (g + 8) * L::kWqStride);
            af[m][mt][2] = *reinterpret_cast<const uint32_t*>(wq + g * L::kWqStride + 16);
            af[m][mt][3] = *reinterpret_cast<const uint32_t*>(wq + (g + 8) * L::kWqStride + 16);
          } else {
            // Byte j of a block holds weight j (low nibble) and j + 16 (high nibble).
            const uint32_t lo = *reinterpret_cast<const uint32_t*>(wq + g * L::kWqStride);
            const uint32_t hi = *reinterpret_cast<const uint32_t*>(wq + (g + 8) * L::kWqStride);
            af[m][mt][0] = lo & 0x0F0F0F0Fu;
            af[m][mt][1] = hi & 0x0F0F0F0Fu;
            af[m][mt][2] = (lo >> 4) & 0x0F0F0F0Fu;
            af[m][mt][3] = (hi >> 4) & 0x0F0F0F0Fu;
          }
          const __half* wd = reinterpret_cast<const __half*>(wd_of(st, m)) + 16 * mt * (L::kWdStride / 2);
          dw[m][mt][0] = __half2float(wd[g * (L::kWdStride / 2) + c]);
          dw[m][mt][1] = __half2float(wd[(g + 8) * (L::kWdStride / 2) + c]);
        }
      }
#pragma unroll
      for (int j = 0; j < kNT; ++j) {
        if (8 * j >= nt) break;
        // Tokens past nt read shared memory no copy wrote (their sums are never stored), so
        // every address here is the stage's base plus a constant.
        const unsigned char* xq = xq_of(st) + (8 * j + g) * L::kXqStride + c * 32 + 4 * q;
        const uint32_t b0 = *reinterpret_cast<const uint32_t*>(xq);
        const uint32_t b1 = *reinterpret_cast<const uint32_t*>(xq + 16);
        const float2* xd = reinterpret_cast<const float2*>(xd_of(st));
        const float2 ds0 = xd[(8 * j + 2 * q) * (L::kXdStride / 8) + c];
        const float2 ds1 = xd[(8 * j + 2 * q + 1) * (L::kXdStride / 8) + c];
#pragma unroll
        for (int m = 0; m < kMats; ++m) {
#pragma unroll
          for (int mt = 0; mt < kMT; ++mt) {
            int cs[4];
            mma_block<kQ8>(af[m][mt], b0, b1, kIsumBias, cs);
            float s[4];
#pragma unroll
            for (int e = 0; e < 4; ++e) s[e] = unbias_isum(cs[e]);
            // cs: (row g, token 2q), (g, 2q + 1), (g + 8, 2q), (g + 8, 2q + 1) of the half.
            float(&ac)[4] = acc[m][mt][ci][j];
            ac[0] = q_block_acc_f<kQ8>(ac[0], s[0], dw[m][mt][0], ds0);
            ac[1] = q_block_acc_f<kQ8>(ac[1], s[1], dw[m][mt][0], ds1);
            ac[2] = q_block_acc_f<kQ8>(ac[2], s[2], dw[m][mt][1], ds0);
            ac[3] = q_block_acc_f<kQ8>(ac[3], s[3], dw[m][mt][1], ds1);
          }
        }
      }
    }
    if (ch != n_chunks - 1) {
      tile.advance(n_chunks, stride, kR);
      continue;
    }

    // The tile is done. warp_sum's butterfly pairs class c with c + 16, then + 8, 4, 2, 1: level 16
    // pairs this warp's classes (w, w + 16), levels 8 to 1 the warps' sums. (The previous tile's
    // reads of `red` ended before this step's __syncthreads.)
#pragma unroll
    for (int m = 0; m < kMats; ++m) {
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
        for (int j = 0; j < kNT; ++j) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            float(&v)[kCI][kNT][4] = acc[m][mt];
            const float s2 = pair_sum(v[0][j][e], v[1][j][e]);
            const int r = 16 * mt + g + 8 * (e >> 1), t = 8 * j + 2 * q + (e & 1);
            red[((w * kMats + m) * kR + r) * kT + t] = s2;
#pragma unroll
            for (int ci = 0; ci < kCI; ++ci) v[ci][j][e] = 0.0f;
          }
        }
      }
    }
    __syncthreads();
    for (int o = tid; o < kR * nt; o += kThreads) {
      const int r = o / nt, t = o % nt;
      float v[kMats];
#pragma unroll
      for (int m = 0; m < kMats; ++m) {
        float sw[8];
#pragma unroll
        for (int k = 0; k < 8; ++k) {
          sw[k] = pair_sum(red[((k * kMats + m) * kR + r) * kT + t],
                           red[(((k + 8) * kMats + m) * kR + r) * kT + t]);
        }
        const float s3_0 = pair_sum(sw[0], sw[4]), s3_1 = pair_sum(sw[1], sw[5]);
        const float s3_2 = pair_sum(sw[2], sw[6]), s3_3 = pair_sum(sw[3], sw[7]);
        v[m] = pair_sum(pair_sum(s3_0, s3_2), pair_sum(s3_1, s3_3));
      }
      if (tile.row0 + r >= a.rows) continue;
      float out;
      if constexpr (kMats == 2) {
        out = gelu_tanh(v[0]) * v[1];
      } else {
        out = a.cap > 0.0f ? a.cap * tanhf(v[0] / a.cap) : v[0];
      }
      a.y[static_cast<int64_t>(t) * a.rows + tile.row0 + r] = out;
    }
    tile.advance(n_chunks, stride, kR);
  }
  cp_async_wait<0>();
}

// The device's SM count (a wave of tiles: one on every SM).
int sm_count() {
  static const int n = [] {
    int dev = 0, v = 0;
    GEM_CUDA_CHECK(cudaGetDevice(&dev));
    GEM_CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev));
    return v;
  }();
  return n;
}

// The persistent grid: as many CTAs as fit on the device at once, at most one per tile.
template <bool kQ8, int kMats, int kNT, int kMT>
void launch_instance(const NArgs& a, cudaStream_t s) {
  constexpr int kSmem = Layout<kQ8>::template smem_bytes<kMats, kNT, kMT>();
  static_assert(kSmem <= 227 * 1024);
  constexpr int kThreads = kW * 32;
  auto kernel = rows_mma_kernel<kQ8, kMats, kNT, kMT>;
  static const int resident = [&] {
    int per_sm = 0;
    GEM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
    GEM_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, kSmem));
    return std::max(1, per_sm) * sm_count();
  }();
  const int64_t tiles = (a.rows + 16 * kMT - 1) / (16 * kMT);
  launch(kernel, static_cast<unsigned>(std::min<int64_t>(tiles, resident)), kThreads, kSmem, s, a);
}

// The shapes by rows (the file's opening comment).
template <bool kQ8, int kMats>
void launch_n(const NArgs& a, cudaStream_t s) {
  if (a.n <= 8) {
    if constexpr (kMats == 1) {
      // 64-row tiles where they take no more waves of rows than 32-row tiles: each weight byte
      // then costs half the activation copies.
      const int64_t n_sm = sm_count();
      const int64_t rows64 = ((a.rows + 63) / 64 + n_sm - 1) / n_sm * 64;
      const int64_t rows32 = ((a.rows + 31) / 32 + n_sm - 1) / n_sm * 32;
      if (rows64 <= rows32) return launch_instance<kQ8, kMats, 1, 4>(a, s);
    }
    launch_instance<kQ8, kMats, 1, 2>(a, s);
  } else if (a.n <= 16) {
    launch_instance<kQ8, kMats, 2, 2>(a, s);
  } else if constexpr (kMats == 1) {
    launch_instance<kQ8, kMats, 4, 2>(a, s);
  } else {
    launch_instance<kQ8, kMats, 4, 1>(a, s);
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
    launch_n<true, 1>(a, s);
  } else if (a.n_mats == 2) {
    launch_n<false, 2>(a, s);
  } else {
    launch_n<false, 1>(a, s);
  }
  GEM_CUDA_LAUNCHED();
}

}  // namespace gem::cuda::mmn
