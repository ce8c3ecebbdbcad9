// Matrix-vector products of decode (Q4_0/Q8_0/Q6_K weights against q8 activations with dp4a;
// F32 against f32), the fused gate|up GELU product, and the Q4_0/Q8_0/Q6_K/F32 → f16
// dequantisation that feeds cuBLAS in prefill.
#include <cuda_fp16.h>

#include <algorithm>
#include <vector>

#include "backend/cuda/block_terms.cuh"
#include "base/check.h"
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/matvec.cuh"
#include "backend/cuda/weight_loads.cuh"

namespace gem::cuda {
namespace {

constexpr int kWarps = 8;  // warps per block of the F32 matvec kernel

__device__ __forceinline__ float q6k_value_mv(const uint8_t* sb, int j) {
  const uint8_t* ql = sb + 64 * (j >> 7);
  const uint8_t* qh = sb + 128 + 32 * (j >> 7);
  const int8_t* sc = reinterpret_cast<const int8_t*>(sb + 192) + 8 * (j >> 7);
  const int jj = j & 127, quarter = jj >> 5, l = jj & 31;
  const int lo = (quarter & 1) ? ql[l + 32] : ql[l];
  const int q = ((quarter & 2) ? (lo >> 4) : (lo & 15)) | (((qh[l] >> (2 * quarter)) & 3) << 4);
  return static_cast<float>(sc[(l >> 4) + 2 * quarter]) * static_cast<float>(q - 32);
}

// The quantised matrix-vector products are bound by how many weight bytes are in flight, so
// each warp owns few rows (kQRows), blocks are small (kQWarps warps: many blocks per SM even for
// 4096-row matrices), and each lane issues the loads of kUnroll blocks (32 blocks apart) before
// using any of them. Rows past the end are clamped for loading and never stored.
constexpr int kQWarps = 4;
// Matrices of at most this many rows take one row a warp in matvec (see there).
constexpr int64_t kShortRows = 2048;

template <bool kQ8>
struct WBlock {
  int4 lo, hi;  // Q4_0: lo = the 16 nibble bytes; Q8_0: lo, hi = the 32 int8
};


template <bool kQ8>
__device__ __forceinline__ WBlock<kQ8> load_wblock(const uint8_t* wrow, int b, uint64_t pol) {
  WBlock<kQ8> w;
  if constexpr (kQ8) {
    w.lo = ld_weight(reinterpret_cast<const int4*>(wrow) + 2 * b, pol);
    w.hi = ld_weight(reinterpret_cast<const int4*>(wrow) + 2 * b + 1, pol);
  } else {
    w.lo = ld_weight(reinterpret_cast<const int4*>(wrow) + b, pol);
    w.hi = make_int4(0, 0, 0, 0);
  }
  return w;
}

// Σ over one 32-weight block of (quant value)·xq, exact, from `start` (block_terms.cuh's
// isum_start: the bias, and for Q4_0, whose raw nibbles are multiplied here, the −8 offset).
template <bool kQ8>
__device__ __forceinline__ int wblock_isum(const WBlock<kQ8>& w, int4 x0, int4 x1, int start) {
  // Two independent chains of four (halves the dependent latency; integer sums are exact).
  int lo, hi;
  if constexpr (kQ8) {
    lo = __dp4a(w.lo.x, x0.x, start);
    hi = __dp4a(w.hi.x, x1.x, 0);
    lo = __dp4a(w.lo.y, x0.y, lo);
    hi = __dp4a(w.hi.y, x1.y, hi);
    lo = __dp4a(w.lo.z, x0.z, lo);
    hi = __dp4a(w.hi.z, x1.z, hi);
    lo = __dp4a(w.lo.w, x0.w, lo);
    hi = __dp4a(w.hi.w, x1.w, hi);
  } else {
    const int m = 0x0F0F0F0F;
    lo = __dp4a(w.lo.x & m, x0.x, start);
    hi = __dp4a((w.lo.x >> 4) & m, x1.x, 0);
    lo = __dp4a(w.lo.y & m, x0.y, lo);
    hi = __dp4a((w.lo.y >> 4) & m, x1.y, hi);
    lo = __dp4a(w.lo.z & m, x0.z, lo);
    hi = __dp4a((w.lo.z >> 4) & m, x1.z, hi);
    lo = __dp4a(w.lo.w & m, x0.w, lo);
    hi = __dp4a((w.lo.w >> 4) & m, x1.w, hi);
  }
  return lo + hi;
}

// acc[m][r] += Σ_blocks term for kMats matrices (1: one matrix; 2: gate and up) and kRows rows
// each, starting at row0 (clamped to rows − 1 for loading), q8 activations x4 (two int4 per
// 32-block) with their scales and sums xds.
// A round loads its weights before its activations; with wait_first, pdl_wait() comes between
// the two in the first round (and after the loop for a lane with no block), so under PDL a
// product's first weights are in flight, into registers, while the previous kernel finishes.
template <bool kQ8, int kMats, int kRows, int kUnroll>
__device__ __forceinline__ void accumulate_rows(const uint8_t* const* qs, const __half* const* d,
                                                int64_t rows, int nb, int64_t row0,
                                                const int4* x4, const Q8Ds* xds, int lane,
                                                uint64_t pol, bool wait_first,
                                                float (&acc)[kMats][kRows]) {
  const int64_t row_bytes = kQ8 ? 32LL * nb : 16LL * nb;
  const uint8_t* wrow[kMats][kRows];
  const __half* drow[kMats][kRows];
#pragma unroll
  for (int m = 0; m < kMats; ++m) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int64_t row = row0 + r < rows ? row0 + r : rows - 1;
      wrow[m][r] = qs[m] + row * row_bytes;
      drow[m][r] = d[m] + row * nb;
    }
  }
  for (int b0 = lane; b0 < nb; b0 += 32 * kUnroll) {
    WBlock<kQ8> w[kUnroll][kMats][kRows];
    __half dw[kUnroll][kMats][kRows];
    int4 x0[kUnroll], x1[kUnroll];
    Q8Ds s[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int b = b0 + 32 * u;
      if (b < nb) {
#pragma unroll
        for (int m = 0; m < kMats; ++m) {
#pragma unroll
          for (int r = 0; r < kRows; ++r) {
            w[u][m][r] = load_wblock<kQ8>(wrow[m][r], b, pol);
            dw[u][m][r] = ld_scale(drow[m][r] + b, pol);
          }
        }
      }
    }
    if (wait_first) {
      pdl_wait();
      wait_first = false;
    }
    // Plain loads, not __ldg: the previous kernel writes x, and a non-coherent load counts as
    // read-only memory, which the compiler may hoist above pdl_wait.
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int b = b0 + 32 * u;
      if (b < nb) {
        x0[u] = x4[2 * b];
        x1[u] = x4[2 * b + 1];
        s[u] = xds[b];
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (b0 + 32 * u < nb) {
        const int start = isum_start<kQ8>(s[u].qsum);
        const float sb = isum_unbias(s[u].s);
#pragma unroll
        for (int m = 0; m < kMats; ++m) {
#pragma unroll
          for (int r = 0; r < kRows; ++r) {
            acc[m][r] = q_block_acc(acc[m][r], wblock_isum<kQ8>(w[u][m][r], x0[u], x1[u], start),
                                    __half2float(dw[u][m][r]), s[u].s, sb);
          }
        }
      }
    }
  }
  if (wait_first) pdl_wait();
}

// How a product loads its weights (CudaTuning::mv_evict_first, mv_preload).
struct MvFlags {
  bool evict_first;
  bool preload;
};

// y[t, r] for kRows consecutive rows per warp; blockIdx.y = token t.
template <bool kQ8, int kRows, int kUnroll>
__global__ void __launch_bounds__(kQWarps * 32)
    matvec_q_kernel(const uint8_t* qs, const __half* d, int64_t rows, int cols,
                    const int8_t* xq, const Q8Ds* xds, float* y, float cap, MvFlags mf) {
  pdl_trigger();
  const int lane = threadIdx.x & 31;
  const int64_t row0 =
      (static_cast<int64_t>(blockIdx.x) * kQWarps + (threadIdx.x >> 5)) * kRows;
  const int t = blockIdx.y, nb = cols / 32;
  const uint8_t* q[1] = {qs};
  const __half* dd[1] = {d};
  if (!mf.preload) pdl_wait();
  const int4* x4 = reinterpret_cast<const int4*>(xq + static_cast<int64_t>(t) * cols);
  const Q8Ds* xs = xds + static_cast<int64_t>(t) * nb;
  if (row0 >= rows) return;
  float acc[1][kRows] = {};
  accumulate_rows<kQ8, 1, kRows, kUnroll>(q, dd, rows, nb, row0, x4, xs, lane,
                                          weight_policy(mf.evict_first), mf.preload, acc);
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const float v = warp_sum(acc[0][r]);
    if (lane == 0 && row0 + r < rows) {
      y[static_cast<int64_t>(t) * rows + row0 + r] = cap > 0.0f ? cap * tanhf(v / cap) : v;
    }
  }
}

// kRows output rows per warp: gelu_tanh(gate·x)·(up·x).
template <int kRows, int kUnroll>
__global__ void __launch_bounds__(kQWarps * 32)
    matvec_gated_kernel(const uint8_t* gq, const __half* gd, const uint8_t* uq, const __half* ud,
                        int64_t rows, int cols, const int8_t* xq, const Q8Ds* xds, float* g,
                        MvFlags mf) {
  pdl_trigger();
  const int lane = threadIdx.x & 31;
  const int64_t row0 =
      (static_cast<int64_t>(blockIdx.x) * kQWarps + (threadIdx.x >> 5)) * kRows;
  const int t = blockIdx.y, nb = cols / 32;
  const uint8_t* q[2] = {gq, uq};
  const __half* dd[2] = {gd, ud};
  if (!mf.preload) pdl_wait();
  const int4* x4 = reinterpret_cast<const int4*>(xq + static_cast<int64_t>(t) * cols);
  const Q8Ds* xs = xds + static_cast<int64_t>(t) * nb;
  if (row0 >= rows) return;
  float acc[2][kRows] = {};
  accumulate_rows<false, 2, kRows, kUnroll>(q, dd, rows, nb, row0, x4, xs, lane,
                                            weight_policy(mf.evict_first), mf.preload, acc);
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const float vg = warp_sum(acc[0][r]), vu = warp_sum(acc[1][r]);
    if (lane == 0 && row0 + r < rows) {
      g[static_cast<int64_t>(t) * rows + row0 + r] = gelu_tanh(vg) * vu;
    }
  }
}

// One warp per kR rows and up to kN tokens of f32 activations (tokens from blockIdx.y·kN): F32
// weights (the test models'). Each weight is loaded once and applied to every token, and each
// activation is loaded once for the warp's kR rows; each (row, token) value is what kN = kR = 1
// (decode) gives: the same per-lane terms in the same order, the same warp sum.
template <int kN, int kR>
__global__ void matvec_f_kernel(DevMatrix w, const float* x, int n, float* y, float cap) {
  pdl_trigger();
  pdl_wait();
  const int lane = threadIdx.x & 31;
  const int64_t row0 = (static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5)) * kR;
  if (row0 >= w.rows) return;
  const int t0 = blockIdx.y * kN;
  const int64_t cols = w.cols;
  int64_t xoff[kN];  // token t0 + t's row (tokens past n read the last one and are not stored)
#pragma unroll
  for (int t = 0; t < kN; ++t) xoff[t] = static_cast<int64_t>(t0 + t < n ? t0 + t : n - 1) * cols;
  int64_t rows[kR];  // rows past the end compute on the last one and are not stored
#pragma unroll
  for (int r = 0; r < kR; ++r) rows[r] = row0 + r < w.rows ? row0 + r : w.rows - 1;
  float acc[kR][kN] = {};
  const float* wf = reinterpret_cast<const float*>(w.raw);
  for (int64_t c = lane; c < cols; c += 32) {
    float xv[kN];
#pragma unroll
    for (int t = 0; t < kN; ++t) xv[t] = x[xoff[t] + c];
#pragma unroll
    for (int r = 0; r < kR; ++r) {
      const float v = wf[rows[r] * cols + c];
#pragma unroll
      for (int t = 0; t < kN; ++t) acc[r][t] = f_acc(acc[r][t], v, xv[t]);
    }
  }
#pragma unroll
  for (int r = 0; r < kR; ++r) {
#pragma unroll
    for (int t = 0; t < kN; ++t) {
      const float v = warp_sum(acc[r][t]);
      if (lane == 0 && t0 + t < n && row0 + r < w.rows) {
        y[(t0 + t) * w.rows + row0 + r] = cap > 0.0f ? cap * tanhf(v / cap) : v;
      }
    }
  }
}

// The Q6_K product (the Q6_K head of Google's QAT files: 262144 rows): q8 activations and dp4a,
// as for Q4_0/Q8_0. Super-blocks are 210 bytes, so a row's fields are only 2-byte aligned and a
// lane's own loads could not be both wide and coalesced. Instead each block streams tiles of
// kQ6Warps rows (contiguous bytes) through a ring of kS shared-memory slots with 16-byte
// cp.async (every global load full and coalesced; the first tiles issued before pdl_wait, as
// weights are never written by an earlier kernel), and lanes read their fields from there. The
// grid is one wave of blocks, each taking every gridDim.x-th tile, so the kN tokens' activations
// are staged in shared memory once per block.
//
// A row's work unit (4 per super-block s; unit 4s + 2h + c) is 16 values l = 16c..16c+15 of each
// quarter u of half h: ql bytes 64h + 16c (quarters 0, 2: low, high nibble) and 64h + 32 + 16c
// (quarters 1, 3), qh bytes 128 + 32h + 16c (bits 2u), one scale per quarter sc[8h + 2u + c], and
// d. Quarter u multiplies the 16 q8 values 16c.. of x block 8s + 4h + u. Per (row, token) and unit:
//   part = Σ_u sc_u · round(s_x,u · Σ_16 (q − 32)·q_x)   (the integer sum exact, biased as in
//          block_terms.cuh: no conversion instruction),
//   acc  = fma(d, part, acc),
// lane j taking units j, j + 32, ...; then the warp sum. kN changes only how many tokens a warp
// computes, never the terms or their order: every n equals decode bit for bit.
constexpr int kQ6Warps = 8;  // warps per block = rows per tile (a warp per row)
constexpr int kQ6SbBytes = 210;

// 16 bytes from a 2-byte-aligned shared address: five aligned words, shifted.
__device__ __forceinline__ uint4 lds16_a2(const uint8_t* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  const uint32_t* w = reinterpret_cast<const uint32_t*>(a & ~uintptr_t{3});
  const uint32_t sh = static_cast<uint32_t>(a & 3) * 8;
  const uint32_t w0 = w[0], w1 = w[1], w2 = w[2], w3 = w[3], w4 = w[4];
  return make_uint4(__funnelshift_r(w0, w1, sh), __funnelshift_r(w1, w2, sh),
                    __funnelshift_r(w2, w3, sh), __funnelshift_r(w3, w4, sh));
}

// Six-bit codes q of four bytes (low bits `lo` at bits 0-3 of each byte, high bits at bits 4-5 of
// `hi`) as int8 q − 32: (q | 0x80) − 0x20 per byte never borrows across bytes, and flipping bit 7
// back gives q − 32 in two's complement.
__device__ __forceinline__ int q6_signed(uint32_t lo, uint32_t hi) {
  const uint32_t q = (lo & 0x0F0F0F0Fu) | (hi & 0x30303030u) | 0x80808080u;
  return static_cast<int>((q - 0x20202020u) ^ 0x80808080u);
}

// A unit's decoded weights for one row: v[u][k] = word k (4 values) of quarter u, sc[u], d.
struct Q6Unit {
  int v[4][4];
  float sc[4];
  float d;
};
__device__ __forceinline__ Q6Unit q6_unit(const uint8_t* sb, int h, int c) {
  Q6Unit r;
  const uint4 a = lds16_a2(sb + 64 * h + 16 * c), b = lds16_a2(sb + 64 * h + 32 + 16 * c);
  const uint4 q = lds16_a2(sb + 128 + 32 * h + 16 * c);
  const uint32_t aw[4] = {a.x, a.y, a.z, a.w}, bw[4] = {b.x, b.y, b.z, b.w};
  const uint32_t hw[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    r.v[0][k] = q6_signed(aw[k], hw[k] << 4);
    r.v[1][k] = q6_signed(bw[k], hw[k] << 2);
    r.v[2][k] = q6_signed(aw[k] >> 4, hw[k]);
    r.v[3][k] = q6_signed(bw[k] >> 4, hw[k] >> 2);
  }
  // sc[8h + 2u + c]: bytes c, c + 2 of the half's first four scale bytes, then of the next four.
  const unsigned short* scp = reinterpret_cast<const unsigned short*>(sb + 192 + 8 * h);
  const uint32_t s0 = scp[0] | (static_cast<uint32_t>(scp[1]) << 16);
  const uint32_t s1 = scp[2] | (static_cast<uint32_t>(scp[3]) << 16);
  r.sc[0] = static_cast<float>(static_cast<int8_t>(s0 >> (8 * c)));
  r.sc[1] = static_cast<float>(static_cast<int8_t>(s0 >> (8 * c + 16)));
  r.sc[2] = static_cast<float>(static_cast<int8_t>(s1 >> (8 * c)));
  r.sc[3] = static_cast<float>(static_cast<int8_t>(s1 >> (8 * c + 16)));
  r.d = __half2float(__ushort_as_half(*reinterpret_cast<const unsigned short*>(sb + 208)));
  return r;
}

// 16 bytes global → shared, the bytes past `valid` zero-filled (the matrix's last 16-byte chunk).
// No L2 cache hint: with one (`.L2::cache_hint`, the weights' evict-first policy) inside the tile
// loop, ptxas 13.0 placed the 64-bit policy descriptor in an odd uniform-register pair
// (`desc[UR1]`), and every such copy faulted with an illegal instruction (H100, session 43).
__device__ __forceinline__ void cp_async16_z(void* smem, const void* gmem, int valid) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(gmem), "r"(valid)
               : "memory");
}

// The shared-memory layout of a block: kN tokens' q8 values [kN][cols] (swizzled: q8_chunk), their
// block scales [kN][cols/32], then kS tile slots of `slot` bytes (a tile's rows, from its first byte
// rounded down to 16, plus the 16-byte chunk that ends past the last).
struct Q6Smem {
  int x_bytes, s_bytes, slot, stages;
  __host__ __device__ static Q6Smem of(int n_tok, int stages, int cols) {
    const int row_bytes = cols / 256 * kQ6SbBytes;
    return {n_tok * cols, (n_tok * (cols / 32) * 4 + 15) / 16 * 16,
            (kQ6Warps * row_bytes + 47) / 16 * 16, stages};
  }
  __host__ __device__ int total() const { return x_bytes + s_bytes + stages * slot; }
};

// Where 16-byte chunk j of a token's q8 values sits in shared memory. A 128-byte line holds the 8
// chunks of one half h of super-block s (quarters u = 0..3, chunks 2u + c); a 16-byte load is
// served 8 lanes at a time, and lanes 8q..8q+7 (units of lines 4q..4q+3, c = 0, 1) read chunk
// 2u + c of each. XORing the chunk index with 2·(line mod 4) puts those 8 reads in 8 different
// 16-byte bank groups.
__device__ __forceinline__ int q8_chunk(int j) { return j ^ (((j >> 3) & 3) << 1); }

template <int kN, int kS>
__global__ void __launch_bounds__(kQ6Warps * 32)
    matvec_q6k_kernel(const uint8_t* raw, int64_t rows, int cols, const int8_t* xq,
                      const Q8Ds* xds, int n, float* y, float cap, MvFlags mf) {
  extern __shared__ __align__(16) uint8_t smem[];
  pdl_trigger();
  const Q6Smem L = Q6Smem::of(kN, kS, cols);
  int8_t* xs = reinterpret_cast<int8_t*>(smem);
  float* ss = reinterpret_cast<float*>(smem + L.x_bytes);
  uint8_t* slots = smem + L.x_bytes + L.s_bytes;
  const int nsb = cols / 256, units = 4 * nsb;
  const int64_t row_bytes = static_cast<int64_t>(nsb) * kQ6SbBytes, total = rows * row_bytes;
  const int64_t n_tiles = (rows + kQ6Warps - 1) / kQ6Warps;
  const int tid = threadIdx.x;
  // Tile k of this block (the k-th it takes) into slot k % kS; one commit group per call,
  // empty past the last tile, so that group counts stay aligned.
  auto issue = [&](int64_t k) {
    const int64_t tile = blockIdx.x + k * gridDim.x;
    if (tile < n_tiles) {
      const int64_t r0 = tile * kQ6Warps;
      const int64_t end = (r0 + kQ6Warps < rows ? r0 + kQ6Warps : rows) * row_bytes;
      const int64_t first = (r0 * row_bytes) & ~int64_t{15};
      uint8_t* slot = slots + (k % kS) * L.slot;
      for (int64_t o = first + 16 * tid; o < end; o += 16 * kQ6Warps * 32) {
        const int64_t left = total - o;
        cp_async16_z(slot + (o - first), raw + o, left < 16 ? static_cast<int>(left) : 16);
      }
    }
    cp_async_commit();
  };
  if (!mf.preload) pdl_wait();
#pragma unroll
  for (int k = 0; k < kS - 1; ++k) issue(k);
  if (mf.preload) pdl_wait();
  // The tokens t0.. of this grid row (past n: the last token again, never stored), as one group.
  const int t0 = blockIdx.y * kN;
  for (int i = tid; i < kN * cols / 16; i += kQ6Warps * 32) {
    const int t = i / (cols / 16), tt = t0 + t < n ? t0 + t : n - 1;
    const int j = i % (cols / 16);
    cp_async16(xs + t * cols + 16 * q8_chunk(j), xq + static_cast<int64_t>(tt) * cols + 16 * j);
  }
  cp_async_commit();
  for (int i = tid; i < kN * (cols / 32); i += kQ6Warps * 32) {
    const int t = i / (cols / 32), tt = t0 + t < n ? t0 + t : n - 1;
    ss[i] = xds[static_cast<int64_t>(tt) * (cols / 32) + i % (cols / 32)].s;
  }
  const int lane = tid & 31, warp = tid >> 5;
  for (int64_t k = 0;; ++k) {
    const int64_t tile = blockIdx.x + k * gridDim.x;
    if (tile >= n_tiles) break;
    issue(k + kS - 1);
    // All but the newest kS − 1 groups done: tile k's (and, at k = 0, the tokens', committed
    // after tiles 0..kS−2 and before tile kS − 1).
    if (k == 0) {
      cp_async_wait<(kS > 1 ? 1 : 0)>();
    } else {
      cp_async_wait<kS - 1>();
    }
    __syncthreads();
    const int64_t r0 = tile * kQ6Warps, row = r0 + warp;
    if (row < rows) {
      const uint8_t* rb = slots + (k % kS) * L.slot + ((r0 * row_bytes) & 15) + warp * row_bytes;
      float acc[kN] = {};
      for (int unit = lane; unit < units; unit += 32) {
        const int s = unit >> 2, h = (unit >> 1) & 1, c = unit & 1;
        const Q6Unit wu = q6_unit(rb + s * kQ6SbBytes, h, c);
        const int xj = 16 * s + 8 * h + c, so = 8 * s + 4 * h;  // chunk of quarter 0; its scale
#pragma unroll
        for (int t = 0; t < kN; ++t) {
          float part = 0.0f;
#pragma unroll
          for (int u = 0; u < 4; ++u) {
            const int4 xv = *reinterpret_cast<const int4*>(xs + t * cols + 16 * q8_chunk(xj + 2 * u));
            const float dx = ss[t * (cols / 32) + so + u];
            int isum = __dp4a(wu.v[u][0], xv.x, kIsumBias);
            isum = __dp4a(wu.v[u][1], xv.y, isum);
            isum = __dp4a(wu.v[u][2], xv.z, isum);
            isum = __dp4a(wu.v[u][3], xv.w, isum);
            part = __fmaf_rn(wu.sc[u], __fmaf_rn(dx, __int_as_float(isum), isum_unbias(dx)), part);
          }
          acc[t] = __fmaf_rn(wu.d, part, acc[t]);
        }
      }
#pragma unroll
      for (int t = 0; t < kN; ++t) {
        const float v = warp_sum(acc[t]);
        if (lane == 0 && t0 + t < n) {
          y[static_cast<int64_t>(t0 + t) * rows + row] = cap > 0.0f ? cap * tanhf(v / cap) : v;
        }
      }
    }
    __syncthreads();  // the slot is refilled by the next iteration's issue
  }
  cp_async_wait<0>();
}

// One launch form: kN tokens a block, kS slots; whether it fits, and its blocks a wave.
struct Q6Form {
  void (*kernel)(const uint8_t*, int64_t, int, const int8_t*, const Q8Ds*, int, float*, float,
                 MvFlags);
  int kN, kS;
};
template <int kN, int kS>
constexpr Q6Form q6_form() {
  return {matvec_q6k_kernel<kN, kS>, kN, kS};
}

// The first form, in order of preference, whose shared memory fits the device: every token of a
// rows pass staged once, and three slots, for the head and the 12B/31B layers' widths; fewer
// slots, then one token at a time (each a grid row: the weights read once per token), for the
// widest rows (an all-Q6_K 31B's ffn_down: 17,640 bytes a row, 21,504 q8 values a token).
void launch_q6k(const DevMatrix& w, Q8Act xq, int n, float* y, float cap, cudaStream_t s,
                MvFlags mf) {
  static const Q6Form one[] = {q6_form<1, 3>(), q6_form<1, 2>(), q6_form<1, 1>()};
  static const Q6Form many[] = {q6_form<8, 3>(), q6_form<8, 2>(), q6_form<8, 1>(),
                                q6_form<1, 3>(), q6_form<1, 2>(), q6_form<1, 1>()};
  static int sms = 0, optin = 0;
  if (sms == 0) {
    int dev = 0;
    GEM_CUDA_CHECK(cudaGetDevice(&dev));
    GEM_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    GEM_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    // Every form may take all the shared memory a block can have (set once: a captured graph's
    // launches keep their own sizes).
    for (const Q6Form& f : many) {
      GEM_CUDA_CHECK(cudaFuncSetAttribute(f.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, optin));
    }
  }
  // Per (one token or several, width): the form chosen and its blocks a wave, found once.
  struct Choice {
    bool single;
    int64_t cols;
    int form, smem, blocks_per_wave;
  };
  static std::vector<Choice> chosen;
  const bool single = n == 1;
  const Q6Form* forms = single ? one : many;
  const int n_forms = single ? 3 : 6;
  auto it = std::find_if(chosen.begin(), chosen.end(),
                         [&](const Choice& c) { return c.single == single && c.cols == w.cols; });
  if (it == chosen.end()) {
    Choice c{single, w.cols, -1, 0, 0};
    for (int i = 0; i < n_forms && c.form < 0; ++i) {
      const int smem = Q6Smem::of(forms[i].kN, forms[i].kS, static_cast<int>(w.cols)).total();
      int per_sm = 0;
      if (smem <= optin) {
        GEM_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, forms[i].kernel,
                                                                     kQ6Warps * 32, smem));
      }
      if (per_sm > 0) c = Choice{single, w.cols, i, smem, per_sm * sms};
    }
    GEM_CHECK(c.form >= 0, "matvec: a Q6_K matrix of %lld columns does not fit shared memory",
              static_cast<long long>(w.cols));
    it = chosen.insert(chosen.end(), c);
  }
  const Q6Form& f = forms[it->form];
  const int64_t n_tiles = (w.rows + kQ6Warps - 1) / kQ6Warps;
  const int64_t blocks = std::min<int64_t>(n_tiles, it->blocks_per_wave);
  const dim3 grid(static_cast<unsigned>(blocks), (n + f.kN - 1) / f.kN);
  launch(f.kernel, grid, kQ6Warps * 32, static_cast<size_t>(it->smem), s, w.raw, w.rows,
         static_cast<int>(w.cols), xq.q, xq.ds, n, y, cap, mf);
}

// One thread per 32-weight block of rows [r0, r0+nr).
__global__ void dequant_f16_kernel(DevMatrix w, int64_t r0, int64_t nr, __half* out) {
  pdl_trigger();
  pdl_wait();
  const int64_t cols = w.cols, nb = cols / 32, total = nr * nb;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = r0 + i / nb, b = i % nb;
    __half* o = out + (i / nb) * cols + b * 32;
    __align__(16) __half v[32];
    if (w.type == WType::kQ4_0) {
      const float dw = __half2float(w.d[r * nb + b]);
      const uint4 q = reinterpret_cast<const uint4*>(w.qs + r * (cols / 2))[b];
      const uint32_t words[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
      for (int j = 0; j < 16; ++j) {
        const uint32_t byte = (words[j / 4] >> (8 * (j % 4))) & 0xFF;
        v[j] = __float2half_rn(static_cast<float>(static_cast<int>(byte & 15) - 8) * dw);
        v[j + 16] = __float2half_rn(static_cast<float>(static_cast<int>(byte >> 4) - 8) * dw);
      }
    } else if (w.type == WType::kQ8_0) {
      const float dw = __half2float(w.d[r * nb + b]);
      const int8_t* q = reinterpret_cast<const int8_t*>(w.qs) + r * cols + b * 32;
#pragma unroll
      for (int j = 0; j < 32; ++j) v[j] = __float2half_rn(static_cast<float>(q[j]) * dw);
    } else if (w.type == WType::kQ6_K) {
      const uint8_t* sb = w.raw + (r * (cols / 256) + b / 8) * 210;
      const float dw = __half2float(*reinterpret_cast<const __half*>(sb + 208));
#pragma unroll
      for (int j = 0; j < 32; ++j) v[j] = __float2half_rn(q6k_value_mv(sb, (b % 8) * 32 + j) * dw);
    } else {
      const float* f = reinterpret_cast<const float*>(w.raw) + r * cols + b * 32;
#pragma unroll
      for (int j = 0; j < 32; ++j) v[j] = __float2half_rn(f[j]);
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) reinterpret_cast<uint4*>(o)[j] = reinterpret_cast<const uint4*>(v)[j];
  }
}

// GGUF Q4_0 (18-byte) / Q8_0 (34-byte) blocks → the split layout; one thread per block.
__global__ void repack_kernel(const uint8_t* raw, int64_t n_blocks, bool q8, uint8_t* qs,
                              __half* d) {
  pdl_trigger();
  pdl_wait();
  const int qbytes = q8 ? 32 : 16, bbytes = qbytes + 2;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n_blocks;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint8_t* b = raw + i * bbytes;
    d[i] = __ushort_as_half(static_cast<unsigned short>(b[0] | (b[1] << 8)));
    for (int k = 0; k < qbytes; ++k) qs[i * qbytes + k] = b[2 + k];
  }
}

}  // namespace

void repack_blocks(const uint8_t* raw, int64_t n_blocks, bool q8, uint8_t* qs, __half* d,
                   cudaStream_t s) {
  const int64_t blocks = (n_blocks + 255) / 256;
  launch(repack_kernel, static_cast<unsigned>(blocks < 8192 ? blocks : 8192), 256, 0, s, raw, n_blocks, q8, qs, d);
  GEM_CUDA_LAUNCHED();
}

void matvec(const DevMatrix& w, const float* x, Q8Act xq, int n, float* y, float cap,
            cudaStream_t s, const CudaTuning& t) {
  if (w.type == WType::kQ4_0 || w.type == WType::kQ8_0) {
    // Two rows a warp; one for short matrices (the MTP assistant's 1,024-row products), whose
    // two-row grid would not give every SM a block. A row's sum is the same either way (each
    // lane takes the same blocks in the same order).
    const int rows_per_warp = w.rows <= kShortRows ? 1 : 2;
    const int64_t rows_per_block = kQWarps * rows_per_warp;
    const dim3 grid(static_cast<unsigned>((w.rows + rows_per_block - 1) / rows_per_block), n);
    const MvFlags mf{t.mv_evict_first, t.mv_preload};
    auto go = [&](auto kernel) {
      launch(kernel, grid, kQWarps * 32, 0, s, w.qs, w.d, w.rows, static_cast<int>(w.cols),
             xq.q, xq.ds, y, cap, mf);
    };
    if (w.type == WType::kQ4_0) {
      rows_per_warp == 1 ? go(matvec_q_kernel<false, 1, 4>) : go(matvec_q_kernel<false, 2, 4>);
    } else {
      rows_per_warp == 1 ? go(matvec_q_kernel<true, 1, 2>) : go(matvec_q_kernel<true, 2, 2>);
    }
  } else if (w.type == WType::kQ6_K) {
    // One token (decode), or up to 8 a grid row (the rows pass: each tile read once for them).
    launch_q6k(w, xq, n, y, cap, s, MvFlags{t.mv_evict_first, t.mv_preload});
  } else {
    // F32 (the test models): one token, or 8 or 16 a warp over 4 or 2 rows a warp, so that each
    // activation loaded serves several rows.
    const int per = n == 1 ? 1 : (n <= 8 ? 8 : 16);
    const int rpw = per == 1 ? 1 : (per == 8 ? 4 : 2);
    const int64_t rows_per_block = static_cast<int64_t>(kWarps) * rpw;
    const dim3 grid(static_cast<unsigned>((w.rows + rows_per_block - 1) / rows_per_block),
                    (n + per - 1) / per);
    if (per == 1) {
      launch(matvec_f_kernel<1, 1>, grid, kWarps * 32, 0, s, w, x, n, y, cap);
    } else if (per == 8) {
      launch(matvec_f_kernel<8, 4>, grid, kWarps * 32, 0, s, w, x, n, y, cap);
    } else {
      launch(matvec_f_kernel<16, 2>, grid, kWarps * 32, 0, s, w, x, n, y, cap);
    }
  }
  GEM_CUDA_LAUNCHED();
}

void matvec_gated(const DevMatrix& gate, const DevMatrix& up, Q8Act xq, int n, float* g,
                  cudaStream_t s, const CudaTuning& t) {
  constexpr int kRows = 2;
  const int64_t rows_per_block = kQWarps * kRows;
  const dim3 grid(static_cast<unsigned>((gate.rows + rows_per_block - 1) / rows_per_block), n);
  launch(matvec_gated_kernel<kRows, 2>, grid, kQWarps * 32, 0, s, gate.qs, gate.d, up.qs, up.d,
         gate.rows, static_cast<int>(gate.cols), xq.q, xq.ds, g,
         MvFlags{t.mv_evict_first, t.mv_preload});
  GEM_CUDA_LAUNCHED();
}

void dequant_f16(const DevMatrix& w, int64_t r0, int64_t nr, __half* out, cudaStream_t s) {
  const int64_t total = nr * (w.cols / 32);
  const int64_t blocks = (total + 255) / 256;
  launch(dequant_f16_kernel, static_cast<unsigned>(blocks < 8192 ? blocks : 8192), 256, 0, s, w, r0,
         nr, out);
  GEM_CUDA_LAUNCHED();
}

}  // namespace gem::cuda
