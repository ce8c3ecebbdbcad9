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
// q8 rows (n tokens × 32 blocks, and their ds) go global → shared by the bulk tensor copy engine
// (TMA: 5 to 7 boxes a step, each issued by one lane of its own warp, completing on the stage's
// mbarrier), kStages − 1 chunks in flight; the boxes land swizzled, so that the fragments' reads
// from shared memory have no bank conflicts. (Per-thread 16-byte cp.async copies cost ~30
// instructions each in every warp; one warp issuing all the boxes held the others at the step's
// barrier: bench/results/cuda.md.) CTAs are persistent (as many as fit): each takes
// tiles blockIdx.x, + gridDim.x, ... and its pipeline runs on across them. The integer sums come
// from the mma biased (block_terms.cuh: no I2F).
//
// Shapes (measured on the H200, bench/results/cuda.md "Rows pass"): up to 16 rows, 32-row tiles
// (each warp's mma covers two 16-row halves: half the activation copies per weight byte) over
// 16 warps (two classes a warp: level 16 of the butterfly in the warp, levels 8 to 1 over the
// warps), and 64-row tiles where the matrix has rows enough to fill the SMs with them (up to 8
// rows; 9–16 rows for Q4_0 alone, where halving the activation copies per weight byte pays); 17–32
// rows, 16 warps as well, 32-row tiles for one matrix and 16-row tiles for the gated pair (its
// accumulators for 32 rows would not fit the registers), the tokens in one tile.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <tuple>

#include "backend/cuda/block_terms.cuh"
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/matmul_n_parts.cuh"

namespace gem::cuda::mmn {
namespace {

constexpr int kChunk = 32;  // blocks per chunk: one of every class
constexpr int kW = 16;      // warps a CTA (8 lost to 16 at every row count: bench/results/cuda.md)
constexpr int kCI = 32 / kW;  // classes per warp: w, w + kW
constexpr int kLine = 128;    // bytes a line of a swizzled box (one strip of a chunk)
constexpr int kAlign = 1024;  // a box's alignment in shared memory (the 128-byte swizzle's period)

// The bulk tensor copies (TMA) of one step: for each matrix its chunk's quants (one 3-D box: the
// chunk's 128-byte strips of the tile's rows, strip after strip) and its 32 scales a row (2-D),
// the activations' q8 chunk (3-D: 8 strips of the tokens) and their (s, Σq) pairs (two 2-D boxes
// of 128-byte strips). The maps are built on the host (tensor_map below).
struct TmaMaps {
  CUtensorMap wq[2], wd[2], xq, xd;
};

// A stage in shared memory, every box 1024-byte aligned:
//   wq[m]  strips of [kR rows][128 B] (128-byte swizzle: 16-byte piece p of row r at p ^ (r % 8)),
//   wd[m]  [kR rows][64 B] scales (64-byte swizzle: piece p of row r at p ^ ((r / 2) % 4)),
//   xq     8 strips of [kT tokens][128 B] (128-byte swizzle),
//   xd     2 strips of [kT tokens][128 B] (128-byte swizzle).
// The swizzles put the fragments' rows (or tokens) g = 0..7 of one class on different banks.
template <bool kQ8>
struct Layout {
  static constexpr int kQB = kQ8 ? 32 : 16;               // quant bytes per block
  static constexpr int kWStrips = kChunk * kQB / kLine;   // strips of a row's chunk
  template <int kR>
  static constexpr int wq_bytes() { return kR * kChunk * kQB; }
  template <int kR>
  static constexpr int wd_bytes() { return kR * kChunk * 2; }
  template <int kT>
  static constexpr int xq_bytes() { return kT * kChunk * 32; }
  template <int kT>
  static constexpr int xd_bytes() { return kT * kChunk * 8; }
  template <int kMats, int kNT, int kMT>
  static constexpr int stage_bytes() {
    return kMats * (wq_bytes<16 * kMT>() + wd_bytes<16 * kMT>()) + xq_bytes<8 * kNT>() +
           xd_bytes<8 * kNT>();
  }
  // The reduction's [warp][mat][row 16·kMT][token] sums, apart from the pipeline.
  template <int kMats, int kNT, int kMT>
  static constexpr int red_bytes() {
    return kW * kMats * 16 * kMT * kNT * 8 * 4;
  }
  // Four stages where they fit beside the reduction in 220 KB, else three, else two (the
  // device's limit is 227 KB a CTA, the stages' mbarriers included); kAlign for aligning the
  // dynamic shared memory's start.
  template <int kMats, int kNT, int kMT>
  static constexpr int stages() {
    constexpr int st = stage_bytes<kMats, kNT, kMT>(), red = red_bytes<kMats, kNT, kMT>() + kAlign;
    return 4 * st + red <= 220 * 1024 ? 4 : 3 * st + red + 64 <= 227 * 1024 ? 3 : 2;
  }
  template <int kMats, int kNT, int kMT>
  static constexpr int smem_bytes() {
    return stages<kMats, kNT, kMT>() * stage_bytes<kMats, kNT, kMT>() +
           red_bytes<kMats, kNT, kMT>() + kAlign;
  }
};

// The block's integer sums for 16 rows × 8 tokens, each from its token's start (c0 for the lane's
// token 2q, c1 for 2q + 1: the C fragment's layout): a = the rows' quants (Q4_0: raw nibbles,
// unsigned), b = the tokens' q8 values.
template <bool kQ8>
__device__ __forceinline__ void mma_block(const uint32_t (&a)[4], uint32_t b0, uint32_t b1,
                                          int c0, int c1, int (&c)[4]) {
  if constexpr (kQ8) {
    asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%10, %11, %10, %11};"
        : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(c0), "r"(c1));
  } else {
    asm("mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%10, %11, %10, %11};"
        : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(c0), "r"(c1));
  }
}

// ---- mbarriers and the bulk tensor copy ----
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbar_init(uint32_t bar) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(bar) : "memory");
}
// The one arrival of a stage's phase, with the bytes its copies will bring.
__device__ __forceinline__ void mbar_expect(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        " selp.u32 %0, 1, 0, p;\n}"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}
// Box (x, y) of `map` (x in elements, innermost) into shared memory at dst, completing on bar.
__device__ __forceinline__ void tma_load(uint32_t dst, const CUtensorMap* map, int x, int y,
                                         uint32_t bar, uint64_t pol) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1, {%2, %3}], [%4], %5;" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(y), "r"(bar), "l"(pol)
      : "memory");
}

// The 3-D box (0, y, z) of `map` (a row's strips as its third dimension) into shared memory at dst.
__device__ __forceinline__ void tma_load3(uint32_t dst, const CUtensorMap* map, int y, int z,
                                          uint32_t bar, uint64_t pol) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1, {%2, %3, %4}], [%5], %6;" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(0), "r"(y), "r"(z), "r"(bar), "l"(pol)
      : "memory");
}
// ldmatrix: four (two) 8×8 matrices of 16-bit elements, row r of matrix i at the address given
// by lane 8i + r; lane (g = lane / 4, q = lane % 4) gets row g's bytes 4q..4q + 3 of each.
__device__ __forceinline__ void ldsm4(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}
__device__ __forceinline__ void ldsm2(uint32_t addr, uint32_t& r0, uint32_t& r1) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];"
               : "=r"(r0), "=r"(r1)
               : "r"(addr)
               : "memory");
}
// One lane of the converged warp (elect.sync).
__device__ __forceinline__ bool elect_one() {
  uint32_t one = 0;
  asm volatile(
      "{\n .reg .pred p;\n elect.sync _|p, 0xffffffff;\n selp.u32 %0, 1, 0, p;\n}"
      : "=r"(one));
  return one != 0;
}

// v, opaque to the compiler's code motion (an empty asm that "changes" it), so that a value
// computed once stays computed once.
__device__ __forceinline__ void keep(int& v) { asm volatile("" : "+r"(v)); }

// A step of a CTA: its tile (index, first row) and the chunk of 32 blocks. advance() moves to
// the next step without a division (the generic step → tile arithmetic cost issue slots).
struct Cursor {
  int tile, ch;
  int row0;  // tile · kR
  __device__ void set(int tile_, int kR) {
    tile = tile_;
    row0 = tile * kR;
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
__global__ void __launch_bounds__(kW * 32, 1) rows_mma_kernel(NArgs a, const __grid_constant__ TmaMaps maps) {
  using L = Layout<kQ8>;
  constexpr int kStage = L::template stage_bytes<kMats, kNT, kMT>();
  constexpr int kStages = L::template stages<kMats, kNT, kMT>();
  constexpr int kT = kNT * 8;
  constexpr int kR = 16 * kMT;
  constexpr int kWq = L::template wq_bytes<kR>(), kWd = L::template wd_bytes<kR>();
  constexpr int kXq = L::template xq_bytes<kT>();
  static_assert(kStage % kAlign == 0 && kWq % kAlign == 0 && kWd % kAlign == 0 &&
                (kR * kLine) % kAlign == 0 && (kT * kLine) % kAlign == 0);
  extern __shared__ unsigned char smem_raw[];
  __shared__ __align__(8) uint64_t bars[kStages];
  pdl_trigger();
  const int tid = threadIdx.x, lane = tid & 31, w = tid >> 5, g = lane >> 2, q = lane & 3;
  const int nb = a.cols / 32;
  const int n_chunks = (nb + kChunk - 1) / kChunk;
  const int n_tiles = static_cast<int>((a.rows + kR - 1) / kR);
  const int my_tiles = (n_tiles - static_cast<int>(blockIdx.x) + gridDim.x - 1) / gridDim.x;
  const int total = my_tiles * n_chunks;  // this CTA's (tile, chunk) steps, in order
  const int stride = static_cast<int>(gridDim.x);
  const int nt = a.n;
  Cursor first;
  first.ch = 0;
  first.set(static_cast<int>(blockIdx.x), kR);

  // The stages start at the first kAlign boundary of the dynamic shared memory (the swizzles
  // follow the shared addresses' bits).
  const uint32_t raw = smem_addr(smem_raw);
  const uint32_t base = (raw + kAlign - 1) & ~static_cast<uint32_t>(kAlign - 1);
  unsigned char* smem = smem_raw + (base - raw);
  float* red = reinterpret_cast<float*>(smem + kStages * kStage);  // [warp][mat][row kR][token]
  auto bar_at = [&](int st) { return smem_addr(&bars[st]); };

  // A step's copies: for each matrix its quants (one 3-D box) and its scales, then the
  // activations' q8 (one 3-D box) and their 2 (s, Σq) strips. Copy k is issued by one lane of
  // warp k, its parameters fixed for the kernel (a copy's operands must be warp-uniform: the warp
  // index comes through a shuffle from lane 0, so that the compiler knows it is, and the copies
  // take uniform registers without a loop over lanes). Rows past the matrix's end, tokens past n
  // and blocks past the last read as zeros (never stored; the last chunk's missing classes are
  // skipped). Thread 0 arms a stage's phase (its bytes) before the barrier after which the copies
  // are issued.
  constexpr int kWCopies = 2 * kMats, kCopies = kWCopies + 3;
  static_assert(kCopies <= kW);
  constexpr uint32_t kTx = kStage;
  // Weights with the decode products' L2 policy; the activations, which every CTA reads, evict-normal.
  const int wu = __shfl_sync(0xffffffffu, tid >> 5, 0);
  const bool copier = wu < kCopies, copies_w = wu < kWCopies;
  const uint64_t pol = weight_policy(copies_w && a.evict_first);
  const CUtensorMap* cmap = &maps.xd;
  uint32_t cdst = 0;  // the box's offset in a stage
  int cmul = 0, cadd = 0;  // its chunk coordinate: ch · cmul + cadd
  bool c3 = false, crow = false;  // a 3-D box; at the tile's rows
  if (copies_w) {
    const int m = wu >> 1;
    crow = true;
    if ((wu & 1) == 0) {
      cmap = &maps.wq[m], cdst = m * kWq, cmul = L::kWStrips, c3 = true;
    } else {
      cmap = &maps.wd[m], cdst = kMats * kWq + m * kWd, cmul = kChunk;
    }
  } else if (wu == kWCopies) {
    cmap = &maps.xq, cdst = kMats * (kWq + kWd), cmul = 8, c3 = true;
  } else {
    const int j = wu - kWCopies - 1;
    cdst = kMats * (kWq + kWd) + kXq + j * kT * kLine, cmul = 64, cadd = 32 * j;
  }
  // This warp's copy of step it, if it is of the kind asked for (weights or activations).
  auto issue = [&](int it, const Cursor& cur, bool weights, bool acts) {
    if (!copier || !(copies_w ? weights : acts) || !elect_one()) return;
    const uint32_t dst = base + (it % kStages) * kStage + cdst, bar = bar_at(it % kStages);
    const int y = crow ? cur.row0 : 0, z = cur.ch * cmul + cadd;
    if (c3) {
      tma_load3(dst, cmap, y, z, bar, pol);
    } else {
      tma_load(dst, cmap, z, y, bar, pol);
    }
  };

  if (tid == 0) {
#pragma unroll
    for (int s = 0; s < kStages; ++s) mbar_init(bar_at(s));
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    for (int s = 0; s < kStages && s < total; ++s) mbar_expect(bar_at(s), kTx);
  }
  __syncthreads();
  // Prologue: the first steps' weights before pdl_wait (the previous kernel wrote only x), then
  // their activations.
  Cursor ld = first;
  for (int s = 0; s < kStages - 1 && s < total; ++s) {
    issue(s, ld, true, false);
    ld.advance(n_chunks, stride, kR);
  }
  pdl_wait();
  ld = first;
  for (int s = 0; s < kStages - 1 && s < total; ++s) {
    issue(s, ld, false, true);
    ld.advance(n_chunks, stride, kR);
  }
  Cursor tile = first;  // the compute step's

  // Each lane's fragment addresses in a stage, computed once (the swizzles above). The quants and
  // the q8 come by ldmatrix: lane L gives the address of row L % 8 of matrix L / 8, and gets back
  // 4 bytes (row g, bytes 4q..4q + 3) of each matrix: a fragment's registers. Class c = w + kW·ci:
  // c % 8 = w % 8 and c % 4 = w % 4 for both, so the second class's quants and q8 are the
  // first's plus a constant (c / 8 + 2 and c / 4 + 4 strips), its (s, Σq) one strip on
  // (c / 16 = ci, c % 16 = w); its scales' piece (c / 8) ^ (g / 2) differs by more than a
  // constant.
  //   Q4_0: a block is one 16-byte piece (c % 8) of strip c / 8; x4 gives the 32 rows
  //     16mt + {0..7, 8..15} for mt = 2p, 2p + 1 (the rows g and g + 8 of two halves): row L.
  //   Q8_0: a block is pieces 2(c % 4) and + 1 of strip c / 4; x4 gives one half's rows
  //     {0..7, 8..15} × {low piece, high piece}: row L % 8 + 8·(L / 8 % 2), piece + L / 16.
  //   q8: x2 gives tokens 0..7 × {low piece, high piece}: token L % 8, piece + L / 8 % 2.
  const int x0 = kMats * (kWq + kWd);  // the stage's q8, then (s, Σq), after the weights
  const int lr = lane & 7, li = lane >> 3;
  int off_a;
  if constexpr (kQ8) {
    const int row = lr + 8 * (li & 1), piece = 2 * (w & 3) + (li >> 1);
    off_a = (w >> 2) * kR * kLine + row * kLine + ((piece ^ lr) << 4);
  } else {
    off_a = (w >> 3) * kR * kLine + lane * kLine + (((w & 7) ^ lr) << 4);
  }
  constexpr int kASecond = (kQ8 ? 4 : 2) * kR * kLine;  // the second class's quants
  int off_d[kCI];
#pragma unroll
  for (int ci = 0; ci < kCI; ++ci) {
    off_d[ci] = kMats * kWq + g * 64 + (((((w >> 3) + 2 * ci) ^ (g >> 1)) & 3) << 4) + (w & 7) * 2;
  }
  int off_b = x0 + (w >> 2) * kT * kLine + lr * kLine + (((2 * (w & 3) + (li & 1)) ^ lr) << 4);
  constexpr int kBSecond = 4 * kT * kLine;
  const int xd_tok = 2 * q;  // its (s, Σq) tokens 8j + 2q and 8j + 2q + 1
  int off_s0 = x0 + kXq + xd_tok * kLine + (w & 1) * 8 + ((((w & 15) >> 1) ^ xd_tok) << 4);
  int off_s1 = x0 + kXq + (xd_tok + 1) * kLine + (w & 1) * 8 + ((((w & 15) >> 1) ^ (xd_tok + 1)) << 4);
  constexpr int kSSecond = kT * kLine;
  // The compiler sinks these offsets into the step loop and recomputes them every step (~50
  // instructions a step at 8 rows): an opaque copy keeps them in registers.
  keep(off_a);
  keep(off_b);
  keep(off_s0);
  keep(off_s1);
#pragma unroll
  for (int ci = 0; ci < kCI; ++ci) keep(off_d[ci]);
  float acc[kMats][kMT][kCI][kNT][4] = {};
  for (int it = 0; it < total; ++it) {
    // Step it − 1 read by all: its stage takes step it + kStages − 1 (armed by thread 0 at the
    // end of step it − 1, or in the prologue).
    __syncthreads();
    if (it + kStages - 1 < total) issue(it + kStages - 1, ld, true, true);
    ld.advance(n_chunks, stride, kR);
    const int st = it % kStages, ch = tile.ch;
    mbar_wait(bar_at(st), (it / kStages) & 1);
    // This stage's next phase (step it + kStages), armed once this thread has seen the phase of
    // step it complete; its copies are issued after the next barrier.
    if (tid == 0 && it + kStages < total) mbar_expect(bar_at(st), kTx);
    // The copies above diverge; mma.sync is .aligned, and the compiler cannot see it inside asm:
    // the warp reconverges here (else: illegal instruction).
    __syncwarp();
    const unsigned char* sw = smem + st * kStage;
    const uint32_t sa = base + st * kStage;  // the same, as a shared-memory address
#pragma unroll
    for (int ci = 0; ci < kCI; ++ci) {
      if (ch * kChunk + w + kW * ci >= nb) break;  // the last chunk's missing blocks (uniform per warp)
      uint32_t af[kMats][kMT][4];
      float dw[kMats][kMT][2];
#pragma unroll
      for (int m = 0; m < kMats; ++m) {
        const uint32_t qa = sa + off_a + m * kWq + ci * kASecond;
        if constexpr (kQ8) {
#pragma unroll
          for (int mt = 0; mt < kMT; ++mt) ldsm4(qa + 16 * mt * kLine, af[m][mt]);
        } else {
          // Byte j of a block holds weight j (low nibble) and j + 16 (high nibble).
#pragma unroll
          for (int mp = 0; mp < kMT; mp += 2) {
            uint32_t r[4];
            if (mp + 1 < kMT) {
              ldsm4(qa + 16 * mp * kLine, r);
            } else {
              ldsm2(qa + 16 * mp * kLine, r[0], r[1]);
            }
#pragma unroll
            for (int h = 0; h < 2 && mp + h < kMT; ++h) {
              const uint32_t lo = r[2 * h], hi = r[2 * h + 1];
              af[m][mp + h][0] = lo & 0x0F0F0F0Fu;
              af[m][mp + h][1] = hi & 0x0F0F0F0Fu;
              af[m][mp + h][2] = (lo >> 4) & 0x0F0F0F0Fu;
              af[m][mp + h][3] = (hi >> 4) & 0x0F0F0F0Fu;
            }
          }
        }
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          // Scales of rows 16mt + g and + 8.
          const __half* wd = reinterpret_cast<const __half*>(sw + off_d[ci] + m * kWd + 16 * mt * 64);
          dw[m][mt][0] = __half2float(wd[0]);
          dw[m][mt][1] = __half2float(wd[8 * 32]);
        }
      }
#pragma unroll
      for (int j = 0; j < kNT; ++j) {
        if (8 * j >= nt) break;
        uint32_t b0, b1;
        ldsm2(sa + off_b + ci * kBSecond + 8 * j * kLine, b0, b1);
        const int dtok = ci * kSSecond + 8 * j * kLine;
        const Q8Ds ds0 = *reinterpret_cast<const Q8Ds*>(sw + off_s0 + dtok);
        const Q8Ds ds1 = *reinterpret_cast<const Q8Ds*>(sw + off_s1 + dtok);
        const int c0 = isum_start<kQ8>(ds0.qsum), c1 = isum_start<kQ8>(ds1.qsum);
        const float sb0 = isum_unbias(ds0.s), sb1 = isum_unbias(ds1.s);
#pragma unroll
        for (int m = 0; m < kMats; ++m) {
#pragma unroll
          for (int mt = 0; mt < kMT; ++mt) {
            int cs[4];
            mma_block<kQ8>(af[m][mt], b0, b1, c0, c1, cs);
            // cs: (row g, token 2q), (g, 2q + 1), (g + 8, 2q), (g + 8, 2q + 1) of the half.
            float(&ac)[4] = acc[m][mt][ci][j];
            ac[0] = q_block_acc(ac[0], cs[0], dw[m][mt][0], ds0.s, sb0);
            ac[1] = q_block_acc(ac[1], cs[1], dw[m][mt][0], ds1.s, sb1);
            ac[2] = q_block_acc(ac[2], cs[2], dw[m][mt][1], ds0.s, sb0);
            ac[3] = q_block_acc(ac[3], cs[3], dw[m][mt][1], ds1.s, sb1);
          }
        }
      }
    }
    if (ch != n_chunks - 1) {
      tile.advance(n_chunks, stride, kR);
      continue;
    }

    // The tile is done. warp_sum's butterfly pairs class c with c + 16, then + 8, 4, 2, 1: level 16
    // pairs this warp's classes (w, w + 16), levels 8 to 1 the warps' sums, a row a lane (`red`
    // is [warp][mat][token][row], row r of token t at r ^ (8·(t / 2) mod kR): a fragment's
    // tokens 2q and 2q + 1 then put the lanes' rows on different banks). (The previous tile's
    // reads of `red` ended before this step's __syncthreads.)
    auto red_at = [&](int k, int m, int t, int r) {
      return ((k * kMats + m) * kT + t) * kR + (r ^ ((8 * (t >> 1)) & (kR - 8)));
    };
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
            red[red_at(w, m, t, r)] = s2;
#pragma unroll
            for (int ci = 0; ci < kCI; ++ci) v[ci][j][e] = 0.0f;
          }
        }
      }
    }
    __syncthreads();
    // The gated pair's q8 copy where a warp holds a whole 32-row block of one token (32-row
    // tiles; the host asks only when the rows are a multiple of 32, so no row of a tile is past
    // the matrix).
    const bool q8_out = kMats == 2 && kR % 32 == 0 && a.yq.q != nullptr;
    for (int o = tid; o < kR * nt; o += kW * 32) {
      const int t = o / kR, r = o % kR;
      float v[kMats];
#pragma unroll
      for (int m = 0; m < kMats; ++m) {
        float sw8[8];
#pragma unroll
        for (int k = 0; k < 8; ++k) {
          sw8[k] = pair_sum(red[red_at(k, m, t, r)], red[red_at(k + 8, m, t, r)]);
        }
        const float s3_0 = pair_sum(sw8[0], sw8[4]), s3_1 = pair_sum(sw8[1], sw8[5]);
        const float s3_2 = pair_sum(sw8[2], sw8[6]), s3_3 = pair_sum(sw8[3], sw8[7]);
        v[m] = pair_sum(pair_sum(s3_0, s3_2), pair_sum(s3_1, s3_3));
      }
      float out;
      if constexpr (kMats == 2) {
        out = gelu_tanh(v[0]) * v[1];
      } else {
        out = a.cap > 0.0f ? a.cap * tanhf(v[0] / a.cap) : v[0];
      }
      const int64_t at = static_cast<int64_t>(t) * a.rows + tile.row0 + r;
      if (q8_out) q8_block_out(out, a.yq.q + (at & ~int64_t{31}), a.yq.ds + at / 32, r & 31);
      if (tile.row0 + r >= a.rows) continue;
      a.y[at] = out;
    }
    tile.advance(n_chunks, stride, kR);
  }
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

// cuTensorMapEncodeTiled from the driver (through the runtime: no link to libcuda).
PFN_cuTensorMapEncodeTiled_v12000 encode_tiled() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult found{};
    GEM_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000,
                                                    cudaEnableDefault, &found));
    if (found != cudaDriverEntryPointSuccess || p == nullptr) {
      std::fprintf(stderr, "matmul_rows_mma: the driver has no cuTensorMapEncodeTiled\n");
      std::abort();
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
  }();
  return fn;
}

// The L2 promotion of the boxes' rows (none and 128 B measured within a few per cent of it, either
// way by shape: bench/results/cuda.md).
constexpr CUtensorMapL2promotion kPromotion = CU_TENSOR_MAP_L2_PROMOTION_L2_256B;

// The map of a dense array at p of `type`, `rank` (2 or 3) dimensions dims[] (the first
// innermost, contiguous), the outer ones strides[] bytes apart, read in boxes box[]. A
// 3-D map here reads a row's consecutive 128-byte strips as its third dimension (stride 128
// bytes), so that one box brings a chunk's strips of many rows, strip after strip. Maps are built
// once per array and shape (weights are fixed; the activations live in a few fixed buffers) and
// kept: a launch copies them into its parameters.
CUtensorMap tensor_map(const void* p, CUtensorMapDataType type, int rank,
                       const uint64_t (&dims)[3], const uint64_t (&strides)[2],
                       const uint32_t (&box)[3], CUtensorMapSwizzle swizzle) {
  using Key = std::tuple<const void*, int, int, uint64_t, uint64_t, uint64_t, uint64_t, uint64_t,
                         uint32_t, uint32_t, uint32_t, int>;
  static std::mutex mu;
  static std::map<Key, CUtensorMap> maps;
  const Key key{p, static_cast<int>(type), rank, dims[0], dims[1], dims[2], strides[0],
                strides[1], box[0], box[1], box[2], static_cast<int>(swizzle)};
  std::lock_guard<std::mutex> lock(mu);
  const auto it = maps.find(key);
  if (it != maps.end()) return it->second;
  CUtensorMap m;
  const cuuint64_t gdims[3] = {dims[0], dims[1], dims[2]};
  const cuuint64_t gstrides[2] = {strides[0], strides[1]};
  const cuuint32_t gbox[3] = {box[0], box[1], box[2]};
  const cuuint32_t unit[3] = {1, 1, 1};
  const CUresult r = encode_tiled()(&m, type, rank, const_cast<void*>(p), gdims, gstrides, gbox,
                                    unit, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, kPromotion,
                                    CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    std::fprintf(stderr, "matmul_rows_mma: cuTensorMapEncodeTiled failed (%d) for a rank-%d map of "
                 "[%llu][%llu][%llu] in boxes [%u][%u][%u]\n", static_cast<int>(r), rank,
                 static_cast<unsigned long long>(dims[2]), static_cast<unsigned long long>(dims[1]),
                 static_cast<unsigned long long>(dims[0]), box[2], box[1], box[0]);
    std::abort();
  }
  // Kept per array and shape: a model's matrices and a few activation buffers. Arrays freed
  // since (other backends, other models) leave entries no launch meets again: bounded here.
  if (maps.size() >= 16384) maps.clear();
  maps.emplace(key, m);
  return m;
}

// The persistent grid: as many CTAs as fit on the device at once, at most one per tile.
template <bool kQ8, int kMats, int kNT, int kMT>
bool launch_instance(NArgs a, cudaStream_t s) {
  using L = Layout<kQ8>;
  constexpr int kSmem = L::template smem_bytes<kMats, kNT, kMT>();
  static_assert(kSmem + 64 <= 227 * 1024);
  constexpr int kThreads = kW * 32;
  constexpr uint32_t kR = 16 * kMT, kT = 8 * kNT;
  auto kernel = rows_mma_kernel<kQ8, kMats, kNT, kMT>;
  static const int resident = [&] {
    int per_sm = 0;
    GEM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
    GEM_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, kSmem));
    return std::max(1, per_sm) * sm_count();
  }();
  const uint64_t nb = a.cols / 32, rows = static_cast<uint64_t>(a.rows);
  TmaMaps maps{};
  const uint64_t row_bytes = nb * L::kQB;  // a row's quants (a multiple of 128: cols % 256 == 0)
  for (int m = 0; m < kMats; ++m) {
    maps.wq[m] = tensor_map(a.q[m], CU_TENSOR_MAP_DATA_TYPE_UINT8, 3,
                            {kLine, rows, row_bytes / kLine}, {row_bytes, kLine},
                            {kLine, kR, L::kWStrips}, CU_TENSOR_MAP_SWIZZLE_128B);
    maps.wd[m] = tensor_map(a.d[m], CU_TENSOR_MAP_DATA_TYPE_UINT16, 2, {nb, rows, 1},
                            {nb * 2, 0}, {kChunk, kR, 1}, CU_TENSOR_MAP_SWIZZLE_64B);
  }
  const uint64_t cols = static_cast<uint64_t>(a.cols), n = static_cast<uint64_t>(a.n);
  maps.xq = tensor_map(a.xq.q, CU_TENSOR_MAP_DATA_TYPE_UINT8, 3, {kLine, n, cols / kLine},
                       {cols, kLine}, {kLine, kT, 8}, CU_TENSOR_MAP_SWIZZLE_128B);
  maps.xd = tensor_map(a.xq.ds, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, {2 * nb, n, 1},
                       {2 * nb * 4, 0}, {kLine / 4, kT, 1}, CU_TENSOR_MAP_SWIZZLE_128B);
  const int64_t tiles = (a.rows + kR - 1) / kR;
  const bool q8_out = kMats == 2 && kR % 32 == 0 && a.yq.q != nullptr && a.rows % 32 == 0;
  if (!q8_out) a.yq = Q8Act{};
  launch(kernel, static_cast<unsigned>(std::min<int64_t>(tiles, resident)), kThreads, kSmem, s, a,
         maps);
  return q8_out;
}

// 64-row tiles where they take no more waves of rows than 32-row tiles: each weight byte then
// costs half the activation copies.
bool wide_tiles_fill(int64_t rows) {
  const int64_t n_sm = sm_count();
  const int64_t rows64 = ((rows + 63) / 64 + n_sm - 1) / n_sm * 64;
  const int64_t rows32 = ((rows + 31) / 32 + n_sm - 1) / n_sm * 32;
  return rows64 <= rows32;
}

// The shapes by rows (the file's opening comment).
template <bool kQ8, int kMats>
bool launch_n(const NArgs& a, cudaStream_t s) {
  if (a.n <= 8) {
    if constexpr (kMats == 1) {
      if (wide_tiles_fill(a.rows)) return launch_instance<kQ8, kMats, 1, 4>(a, s);
    }
    return launch_instance<kQ8, kMats, 1, 2>(a, s);
  } else if (a.n <= 16) {
    // Q4_0 alone takes 64-row tiles by the same rule (Q8_0's would not fit shared memory; the
    // gated pair's accumulators would not fit the registers, and its 16-row tiles lose).
    if constexpr (kMats == 1 && !kQ8) {
      if (wide_tiles_fill(a.rows)) return launch_instance<kQ8, kMats, 2, 4>(a, s);
    }
    return launch_instance<kQ8, kMats, 2, 2>(a, s);
  } else if constexpr (kMats == 1) {
    return launch_instance<kQ8, kMats, 4, 2>(a, s);
  } else {
    return launch_instance<kQ8, kMats, 4, 1>(a, s);
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

bool launch_rows_mma(const NArgs& a, cudaStream_t s) {
  bool q8 = false;
  if (a.type == WType::kQ8_0) {
    q8 = launch_n<true, 1>(a, s);
  } else if (a.n_mats == 2) {
    q8 = launch_n<false, 2>(a, s);
  } else {
    q8 = launch_n<false, 1>(a, s);
  }
  GEM_CUDA_LAUNCHED();
  return q8;
}

}  // namespace gem::cuda::mmn
