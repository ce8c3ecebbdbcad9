// Matrix-vector products of decode (Q4_0/Q8_0 weights against q8 activations with dp4a; Q6_K
// and F32 against f32), the fused gate|up GELU product, and the Q4_0/Q8_0/Q6_K/F32 → f16
// dequantisation that feeds cuBLAS in prefill.
#include <cuda_fp16.h>

#include <algorithm>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/kernels.cuh"

namespace gem::cuda {
namespace {

constexpr int kWarps = 8;  // warps per block of the f32/Q6_K matvec kernel

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

template <bool kQ8>
struct WBlock {
  int4 lo, hi;  // Q4_0: lo = the 16 nibble bytes; Q8_0: lo, hi = the 32 int8
};

// The L2 policy of the weight loads: evict-first (every weight byte is read once per step; the
// activations, norm weights and KV rows the small kernels read should outlive them: 305 vs 295
// tok/s on the 12B) or the default evict-normal.
__device__ __forceinline__ uint64_t weight_policy(bool evict_first) {
  uint64_t pol;
  if (evict_first) {
    asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
  } else {
    asm("createpolicy.fractional.L2::evict_normal.b64 %0, 1.0;" : "=l"(pol));
  }
  return pol;
}
__device__ __forceinline__ int4 ld_weight(const int4* p, uint64_t pol) {
  int4 v;
  asm("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.s32 {%0, %1, %2, %3}, [%4], %5;"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p), "l"(pol));
  return v;
}
__device__ __forceinline__ __half ld_scale(const __half* p, uint64_t pol) {
  unsigned short v;
  asm("ld.global.nc.L1::no_allocate.L2::cache_hint.b16 %0, [%1], %2;" : "=h"(v) : "l"(p), "l"(pol));
  return __ushort_as_half(v);
}

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

// Σ over one 32-weight block of (quant value)·xq, for Q4_0 (nibble − 8 folded in by the caller
// through ds.y) or Q8_0; then scaled: d_w·(d_x·Σ) (Q8_0) or d_w·(d_x·Σ − 8·d_x·Σx) (Q4_0).
template <bool kQ8>
__device__ __forceinline__ float wblock_term(const WBlock<kQ8>& w, float dw, int4 x0, int4 x1,
                                             float2 ds) {
  // Two independent chains of four (halves the dependent latency; integer sums are exact).
  int lo, hi;
  if constexpr (kQ8) {
    lo = __dp4a(w.lo.x, x0.x, 0);
    hi = __dp4a(w.hi.x, x1.x, 0);
    lo = __dp4a(w.lo.y, x0.y, lo);
    hi = __dp4a(w.hi.y, x1.y, hi);
    lo = __dp4a(w.lo.z, x0.z, lo);
    hi = __dp4a(w.hi.z, x1.z, hi);
    lo = __dp4a(w.lo.w, x0.w, lo);
    hi = __dp4a(w.hi.w, x1.w, hi);
    return dw * ds.x * static_cast<float>(lo + hi);
  } else {
    const int m = 0x0F0F0F0F;
    lo = __dp4a(w.lo.x & m, x0.x, 0);
    hi = __dp4a((w.lo.x >> 4) & m, x1.x, 0);
    lo = __dp4a(w.lo.y & m, x0.y, lo);
    hi = __dp4a((w.lo.y >> 4) & m, x1.y, hi);
    lo = __dp4a(w.lo.z & m, x0.z, lo);
    hi = __dp4a((w.lo.z >> 4) & m, x1.z, hi);
    lo = __dp4a(w.lo.w & m, x0.w, lo);
    hi = __dp4a((w.lo.w >> 4) & m, x1.w, hi);
    return dw * (ds.x * static_cast<float>(lo + hi) - 8.0f * ds.y);
  }
}

// The q8 activations of one token, either in global memory (x4: two int4 per 32-block, ds) or
// staged in shared memory by stage_x (lo/hi: the low and high 16 bytes of each block in two
// arrays, so that lanes reading consecutive blocks hit distinct banks; ds).
struct XSrc {
  const int4* x4;
  const int4* lo;
  const int4* hi;
  const float2* ds;
};

// Copies a token's q8 activations (nb blocks) into shared memory `smem` (nb·40 bytes) with the
// whole block, then syncs it. Returns the staged source.
__device__ __forceinline__ XSrc stage_x(const int8_t* xq, const float2* xds, int nb, int4* smem) {
  int4* lo = smem;
  int4* hi = lo + nb;
  float2* ds = reinterpret_cast<float2*>(hi + nb);
  const int4* xg = reinterpret_cast<const int4*>(xq);
  for (int k = threadIdx.x; k < 2 * nb; k += blockDim.x) (k & 1 ? hi : lo)[k >> 1] = xg[k];
  for (int k = threadIdx.x; k < nb; k += blockDim.x) ds[k] = xds[k];
  __syncthreads();
  return XSrc{nullptr, lo, hi, ds};
}

// acc[m][r] += Σ_blocks term for kMats matrices (1: one matrix; 2: gate and up) and kRows rows
// each, starting at row0 (clamped to rows − 1 for loading), activations x. With kXS the
// activations come from shared memory when used instead of being loaded into registers with the
// weights: the registers of a round hold weights only, so more warps fit per SM.
// A round loads its weights before its activations; with wait_first, pdl_wait() comes between
// the two in the first round (and after the loop for a lane with no block), so under PDL a
// product's first weights are in flight, into registers, while the previous kernel finishes.
template <bool kQ8, int kMats, int kRows, int kUnroll, bool kXS = false>
__device__ __forceinline__ void accumulate_rows(const uint8_t* const* qs, const __half* const* d,
                                                int64_t rows, int nb, int64_t row0,
                                                const XSrc& x, int lane, uint64_t pol,
                                                bool wait_first, float (&acc)[kMats][kRows]) {
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
    float2 s[kUnroll];
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
    if constexpr (!kXS) {
      // Plain loads, not __ldg: the previous kernel writes x, and a non-coherent load counts as
      // read-only memory, which the compiler may hoist above pdl_wait (run 9: it did, and decode
      // went wrong on the tiny fixtures under PDL).
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int b = b0 + 32 * u;
        if (b < nb) {
          x0[u] = x.x4[2 * b];
          x1[u] = x.x4[2 * b + 1];
          s[u] = x.ds[b];
        }
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (b0 + 32 * u < nb) {
        if constexpr (kXS) {
          x0[u] = x.lo[b0 + 32 * u];
          x1[u] = x.hi[b0 + 32 * u];
          s[u] = x.ds[b0 + 32 * u];
        }
#pragma unroll
        for (int m = 0; m < kMats; ++m) {
#pragma unroll
          for (int r = 0; r < kRows; ++r) {
            acc[m][r] += wblock_term<kQ8>(w[u][m][r], __half2float(dw[u][m][r]), x0[u], x1[u], s[u]);
          }
        }
      }
    }
  }
  if (wait_first) pdl_wait();
}

// The token's activations: staged in dynamic shared memory (kXS; after pdl_wait, before any
// warp leaves) or read from global memory.
template <bool kXS>
__device__ __forceinline__ XSrc token_x(const int8_t* xq, const float2* xds, int cols, int t) {
  const int nb = cols / 32;
  const int8_t* xt = xq + static_cast<int64_t>(t) * cols;
  const float2* dt = xds + static_cast<int64_t>(t) * nb;
  if constexpr (kXS) {
    extern __shared__ int4 xs_smem[];
    return stage_x(xt, dt, nb, xs_smem);
  } else {
    return XSrc{reinterpret_cast<const int4*>(xt), nullptr, nullptr, dt};
  }
}

// y[t, r] for kRows consecutive rows per warp; blockIdx.y = token t.
template <bool kQ8, int kRows, int kUnroll, bool kXS>
__global__ void __launch_bounds__(kQWarps * 32)
    matvec_q_kernel(const uint8_t* qs, const __half* d, int64_t rows, int cols,
                    const int8_t* xq, const float2* xds, float* y, float cap, MatvecConfig mc) {
  pdl_trigger();
  const int lane = threadIdx.x & 31;
  const int64_t row0 =
      (static_cast<int64_t>(blockIdx.x) * kQWarps + (threadIdx.x >> 5)) * kRows;
  const int t = blockIdx.y, nb = cols / 32;
  const uint8_t* q[1] = {qs};
  const __half* dd[1] = {d};
  // Staged activations wait first; register ones after the first round's weight loads.
  const bool preload = mc.preload && !kXS;
  if (!preload) pdl_wait();
  const XSrc x = token_x<kXS>(xq, xds, cols, t);
  if (row0 >= rows) return;
  float acc[1][kRows] = {};
  accumulate_rows<kQ8, 1, kRows, kUnroll, kXS>(q, dd, rows, nb, row0, x, lane,
                                               weight_policy(mc.evict_first), preload, acc);
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const float v = warp_sum(acc[0][r]);
    if (lane == 0 && row0 + r < rows) {
      y[static_cast<int64_t>(t) * rows + row0 + r] = cap > 0.0f ? cap * tanhf(v / cap) : v;
    }
  }
}

// kRows output rows per warp: gelu_tanh(gate·x)·(up·x).
template <int kRows, int kUnroll, bool kXS>
__global__ void __launch_bounds__(kQWarps * 32)
    matvec_gated_kernel(const uint8_t* gq, const __half* gd, const uint8_t* uq, const __half* ud,
                        int64_t rows, int cols, const int8_t* xq, const float2* xds, float* g,
                        MatvecConfig mc) {
  pdl_trigger();
  const int lane = threadIdx.x & 31;
  const int64_t row0 =
      (static_cast<int64_t>(blockIdx.x) * kQWarps + (threadIdx.x >> 5)) * kRows;
  const int t = blockIdx.y, nb = cols / 32;
  const uint8_t* q[2] = {gq, uq};
  const __half* dd[2] = {gd, ud};
  const bool preload = mc.preload && !kXS;
  if (!preload) pdl_wait();
  const XSrc x = token_x<kXS>(xq, xds, cols, t);
  if (row0 >= rows) return;
  float acc[2][kRows] = {};
  accumulate_rows<false, 2, kRows, kUnroll, kXS>(q, dd, rows, nb, row0, x, lane,
                                                 weight_policy(mc.evict_first), preload, acc);
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const float vg = warp_sum(acc[0][r]), vu = warp_sum(acc[1][r]);
    if (lane == 0 && row0 + r < rows) {
      g[static_cast<int64_t>(t) * rows + row0 + r] = gelu_tanh(vg) * vu;
    }
  }
}

// ---- Products that stream their weights through shared memory (cp.async.bulk) ----
// The register-fed products above keep their bytes in flight in registers, so they need many
// resident warps. Here a producer warp (one lane) streams chunks of the block's rows into a
// ring of `slots` shared-memory slots with bulk asynchronous copies; a "full" mbarrier per slot
// counts the bytes in, and an "empty" one counts the consumer warps done with it. Bytes in
// flight depend on the ring, not on warps or registers, and the copies are issued before
// pdl_wait (weights never depend on an earlier kernel). A chunk is kb blocks (columns) of
// `n_warps` consecutive rows, one per consumer warp; a row is cut into `parts` chunks when the
// ring's budget asks for it. Each block owns an even share of the rows. Every copy is a
// multiple of 16 bytes at a 16-byte aligned address (kb % 8 == 0), hence nb % 8 == 0. With kR = 2
// a chunk has 2·n_warps rows and each consumer warp computes two consecutive ones, loading each
// activation block once for both.
struct BulkArgs {
  const uint8_t* qs[2];
  const __half* d[2];
  int64_t rows;
  int nb;
  BulkShape shape;
  int slots;
  const int8_t* xq;
  const float2* xds;
  float* y;
  float cap;
  bool evict_first;
  bool no_math;  // timing only: stream the weights, skip the products (outputs are wrong)
};

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(bar)), "r"(count)
               : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)),
               "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_u32(bar)) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t phase) {
  uint32_t done = 0;
  while (!done) {
    asm volatile(
        "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;"
        " selp.u32 %0, 1, 0, p; }"
        : "=r"(done)
        : "r"(smem_u32(bar)), "r"(phase)
        : "memory");
  }
}
__device__ __forceinline__ void bulk_copy(void* dst, const void* src, uint32_t bytes, uint64_t* bar,
                                          uint64_t pol) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
      " [%0], [%1], %2, [%3], %4;" ::"r"(smem_u32(dst)),
      "l"(src), "r"(bytes), "r"(smem_u32(bar)), "l"(pol)
      : "memory");
}

// blockDim = (n_warps + 1) warps: consumers 0..n_warps-1, the producer last.
template <bool kQ8, int kMats, int kR>
__global__ void matvec_bulk_kernel(BulkArgs a) {
  constexpr int kBulkU = kR == 1 ? 4 : 2;  // blocks per lane and round
  extern __shared__ __align__(128) uint8_t smem[];
  pdl_trigger();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = (blockDim.x >> 5) - 1;
  const int CR = n_warps * kR;  // rows per chunk
  const int S = a.slots, slot_bytes = a.shape.slot_bytes;
  const int P = a.shape.parts, K = a.shape.kb, nb = a.nb;
  constexpr int qb = kQ8 ? 32 : 16;
  // Slot layout (fixed, CR rows): quants of matrix m at m·CR·K·qb, row j at j·K·qb; then the
  // scales of matrix m at kMats·CR·K·qb + m·CR·K·2, row j at j·K·2.
  const int q_region = CR * K * qb, d_region = CR * K * 2;
  uint64_t* full = reinterpret_cast<uint64_t*>(smem + static_cast<int64_t>(S) * slot_bytes);
  uint64_t* empty = full + S;
  const int64_t r_begin = blockIdx.x * a.rows / gridDim.x;
  const int64_t r_end = (blockIdx.x + 1) * a.rows / gridDim.x;
  const int n_chunks = static_cast<int>((r_end - r_begin + CR - 1) / CR) * P;
  if (threadIdx.x == 0) {
    for (int s = 0; s < S; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], n_warps);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  if (warp == n_warps) {  // the producer
    if (lane == 0) {
      const uint64_t pol = weight_policy(a.evict_first);
      for (int i = 0; i < n_chunks; ++i) {
        const int s = i % S;
        if (i >= S) mbar_wait(&empty[s], static_cast<uint32_t>((i / S - 1) & 1));
        const int64_t r = r_begin + static_cast<int64_t>(i / P) * CR;
        const int p = i % P;
        const int nr = static_cast<int>(r_end - r < CR ? r_end - r : CR);
        mbar_expect_tx(&full[s], kMats * nr * K * (qb + 2));
        uint8_t* dst = smem + static_cast<int64_t>(s) * slot_bytes;
        for (int m = 0; m < kMats; ++m) {
          if (P == 1) {  // nr whole consecutive rows: one copy each for quants and scales
            bulk_copy(dst + m * q_region, a.qs[m] + r * nb * qb, nr * K * qb, &full[s], pol);
            bulk_copy(dst + kMats * q_region + m * d_region, a.d[m] + r * nb, nr * K * 2, &full[s],
                      pol);
          } else {
            for (int j = 0; j < nr; ++j) {
              const int64_t b0 = (r + j) * nb + static_cast<int64_t>(p) * K;
              bulk_copy(dst + m * q_region + j * K * qb, a.qs[m] + b0 * qb, K * qb, &full[s], pol);
              bulk_copy(dst + kMats * q_region + m * d_region + j * K * 2, a.d[m] + b0, K * 2,
                        &full[s], pol);
            }
          }
        }
      }
    }
    return;
  }
  pdl_wait();
  // The activations, staged once per block after the slots and barriers: the low and high 16
  // bytes of each block's q8 in two arrays (conflict-free 16-byte reads for lanes 32 bytes
  // apart), then the scales. Only the consumer warps meet at named barrier 1.
  int4* xlo = reinterpret_cast<int4*>(smem + static_cast<int64_t>(S) * slot_bytes + 16 * S);
  int4* xhi = xlo + nb;
  float2* xds = reinterpret_cast<float2*>(xhi + nb);
  {
    const int4* xg = reinterpret_cast<const int4*>(a.xq);
    for (int k = threadIdx.x; k < 2 * nb; k += n_warps * 32) (k & 1 ? xhi : xlo)[k >> 1] = xg[k];
    for (int k = threadIdx.x; k < nb; k += n_warps * 32) xds[k] = a.xds[k];
  }
  asm volatile("bar.sync 1, %0;" ::"r"(n_warps * 32) : "memory");
  float carry[kMats][kR] = {};
  for (int i = 0; i < n_chunks; ++i) {
    const int s = i % S;
    mbar_wait(&full[s], static_cast<uint32_t>((i / S) & 1));
    const int64_t r = r_begin + static_cast<int64_t>(i / P) * CR + warp * kR;  // first row
    const int p = i % P;
    if (r < r_end) {
      const uint8_t* src = smem + static_cast<int64_t>(s) * slot_bytes;
      float acc[kMats][kR];
#pragma unroll
      for (int m = 0; m < kMats; ++m) {
#pragma unroll
        for (int j = 0; j < kR; ++j) acc[m][j] = p == 0 ? 0.0f : carry[m][j];
      }
      // Lane's blocks b = lane + 32·u; each round loads the activations and weights of kBulkU
      // blocks before using any. Lanes past the end load block K − 1 again (no branches) with
      // zero activation scales, so their terms are 0. A second row past the block's end reads
      // slot bytes the producer did not fill this time; its sum is never stored.
      for (int b0 = a.no_math ? K : lane; b0 < K; b0 += 32 * kBulkU) {
        int4 x0[kBulkU], x1[kBulkU];
        float2 ds[kBulkU];
        WBlock<kQ8> w[kBulkU][kMats][kR];
        __half dw[kBulkU][kMats][kR];
#pragma unroll
        for (int u = 0; u < kBulkU; ++u) {
          const int b = b0 + 32 * u < K ? b0 + 32 * u : K - 1;
          const int xb = p * K + b;
          x0[u] = xlo[xb];
          x1[u] = xhi[xb];
          ds[u] = b0 + 32 * u < K ? xds[xb] : make_float2(0.0f, 0.0f);
#pragma unroll
          for (int m = 0; m < kMats; ++m) {
#pragma unroll
            for (int j = 0; j < kR; ++j) {
              const int e = (warp * kR + j) * K + b;  // row warp·kR + j's block b in the slot
              const int4* wq = reinterpret_cast<const int4*>(src + m * q_region + e * qb);
              w[u][m][j].lo = wq[0];
              w[u][m][j].hi = kQ8 ? wq[1] : make_int4(0, 0, 0, 0);
              dw[u][m][j] = reinterpret_cast<const __half*>(src + kMats * q_region + m * d_region)[e];
            }
          }
        }
#pragma unroll
        for (int u = 0; u < kBulkU; ++u) {
#pragma unroll
          for (int m = 0; m < kMats; ++m) {
#pragma unroll
            for (int j = 0; j < kR; ++j) {
              acc[m][j] += wblock_term<kQ8>(w[u][m][j], __half2float(dw[u][m][j]), x0[u], x1[u], ds[u]);
            }
          }
        }
      }
      if (p == P - 1) {
#pragma unroll
        for (int j = 0; j < kR; ++j) {
          if constexpr (kMats == 2) {
            const float vg = warp_sum(acc[0][j]), vu = warp_sum(acc[1][j]);
            if (lane == 0 && r + j < r_end) a.y[r + j] = gelu_tanh(vg) * vu;
          } else {
            const float v = warp_sum(acc[0][j]);
            if (lane == 0 && r + j < r_end) a.y[r + j] = a.cap > 0.0f ? a.cap * tanhf(v / a.cap) : v;
          }
        }
      } else {
#pragma unroll
        for (int m = 0; m < kMats; ++m) {
#pragma unroll
          for (int j = 0; j < kR; ++j) carry[m][j] = acc[m][j];
        }
      }
    }
    __syncwarp();  // every lane is done reading the slot
    if (lane == 0) mbar_arrive(&empty[s]);
  }
}

// One warp per row, f32 activations: F32 or Q6_K weights (the test models' and the Q6_K head).
__global__ void matvec_f_kernel(DevMatrix w, const float* x, float* y, float cap) {
  pdl_trigger();
  pdl_wait();
  const int lane = threadIdx.x & 31;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarps + (threadIdx.x >> 5);
  if (row >= w.rows) return;
  const int t = blockIdx.y;
  const int64_t cols = w.cols;
  const float* xr = x + t * cols;
  float acc = 0.0f;
  if (w.type == WType::kQ6_K) {
    const int64_t nsb = cols / 256;
    const uint8_t* base = w.raw + row * nsb * 210;
    for (int64_t sbi = 0; sbi < nsb; ++sbi) {
      const uint8_t* sb = base + sbi * 210;
      float part = 0.0f;
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        const int j = lane + 32 * k;
        part += q6k_value_mv(sb, j) * xr[sbi * 256 + j];
      }
      acc += part * __half2float(*reinterpret_cast<const __half*>(sb + 208));
    }
  } else {
    const float* wr = reinterpret_cast<const float*>(w.raw) + row * cols;
    for (int64_t c = lane; c < cols; c += 32) acc += wr[c] * xr[c];
  }
  acc = warp_sum(acc);
  if (lane == 0) y[t * w.rows + row] = cap > 0.0f ? cap * tanhf(acc / cap) : acc;
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

MatvecConfig matvec_config() {
  static const MatvecConfig c = [] {
    MatvecConfig m;
    m.evict_first = env_flag("GEM_CUDA_MV_EF", true);
    m.preload = env_flag("GEM_CUDA_MV_PRELOAD", true);
    m.bulk = env_flag("GEM_CUDA_MV_BULK", false);
    m.bulk_warps = env_int("GEM_CUDA_MV_BULK_WARPS", m.bulk_warps, 1, 32);
    m.bulk_slots = env_int("GEM_CUDA_MV_BULK_SLOTS", m.bulk_slots, 1, 16);
    m.bulk_slot_bytes = env_int("GEM_CUDA_MV_BULK_SLOT_BYTES", m.bulk_slot_bytes, 256, 65536);
    m.bulk_rows = env_int("GEM_CUDA_MV_BULK_R", m.bulk_rows, 1, 2);
    m.x_smem = env_flag("GEM_CUDA_MV_XSMEM", m.x_smem);
    m.q4_unroll = env_int("GEM_CUDA_MV_UNROLL", m.q4_unroll, 4, 8);
    if (m.q4_unroll != 4 && m.q4_unroll != 8) {
      std::fprintf(stderr, "gem: GEM_CUDA_MV_UNROLL=%d is not 4 or 8; using 4\n", m.q4_unroll);
      m.q4_unroll = 4;
    }
    m.bulk_min_copy = env_int("GEM_CUDA_MV_BULK_MIN_COPY", m.bulk_min_copy, 0, 1 << 30);
    return m;
  }();
  return c;
}

BulkShape bulk_shape(int nb, int qb, int mats, int rows, int budget) {
  // The fewest parts (widest chunks) within the budget whose width is a multiple of 8 blocks;
  // nb / 8 parts (8 blocks each) is the finest cut.
  BulkShape sh;
  const int row_bytes = mats * nb * (qb + 2);
  int parts = std::min(std::max((rows * row_bytes + budget - 1) / budget, 1), nb / 8);
  while (nb % parts != 0 || (nb / parts) % 8 != 0) ++parts;
  sh.parts = parts;
  sh.kb = nb / parts;
  sh.slot_bytes = (rows * mats * sh.kb * (qb + 2) + 127) / 128 * 128;
  return sh;
}

BulkPlan bulk_plan(int nb, int qb, int mats, int rows, int slots, int budget, int min_copy,
                   int max_smem) {
  // Shared memory: the slots, two barriers each, the staged activations (32 + 8 bytes a block).
  auto smem_for = [&](const BulkShape& sh, int n) {
    return static_cast<size_t>(n) * (sh.slot_bytes + 16) + static_cast<size_t>(nb) * 40;
  };
  BulkPlan plan;
  plan.shape = bulk_shape(nb, qb, mats, rows, budget);
  if (plan.shape.parts > 1 && plan.shape.kb * qb < min_copy) {
    const BulkShape whole = bulk_shape(nb, qb, mats, rows, rows * mats * nb * (qb + 2));
    if (smem_for(whole, 2) <= static_cast<size_t>(max_smem)) plan.shape = whole;
  }
  plan.slots = std::max(slots, 1);
  while (plan.slots > 1 && smem_for(plan.shape, plan.slots) > static_cast<size_t>(max_smem)) {
    --plan.slots;
  }
  plan.smem = smem_for(plan.shape, plan.slots);
  return plan;
}

namespace {

// Register products stage the activations in shared memory (MatvecConfig::x_smem) for matrices
// of at most 65,536 rows: each block copies the whole activation row, so the output head (262,144
// rows, 32,768 blocks) would move more activation bytes than it saves.
bool x_in_smem(int64_t rows, const MatvecConfig& mc) { return mc.x_smem && rows <= 65536; }
size_t x_smem_bytes(int64_t cols) { return static_cast<size_t>(cols / 32) * 40; }

bool bulk_fits(const DevMatrix& w, int n, const MatvecConfig& mc) {
  const int64_t nb = w.cols / 32;
  return mc.bulk && n == 1 && nb % 8 == 0 && (w.type == WType::kQ4_0 || w.type == WType::kQ8_0) &&
         reinterpret_cast<uintptr_t>(w.qs) % 16 == 0 && reinterpret_cast<uintptr_t>(w.d) % 16 == 0;
}

// Launches a bulk product over `mats` matrices shaped like w[0] (gated: gate and up).
template <bool kQ8, int kMats, int kR>
void launch_bulk(const DevMatrix* w, Q8Act xq, float* y, float cap, cudaStream_t s,
                 const MatvecConfig& mc) {
  static const int sms = [] {
    int dev = 0, n = 0;
    GEM_CUDA_CHECK(cudaGetDevice(&dev));
    GEM_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev));
    return n;
  }();
  static const int max_smem = [] {
    int dev = 0, n = 0;
    GEM_CUDA_CHECK(cudaGetDevice(&dev));
    GEM_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    GEM_CUDA_CHECK(cudaFuncSetAttribute(matvec_bulk_kernel<kQ8, kMats, kR>,
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, n));
    return n;
  }();
  BulkArgs a = {};
  const int nb = static_cast<int>(w[0].cols / 32);
  const int warps = mc.bulk_warps;  // consumers; one producer warp more
  const BulkPlan plan = bulk_plan(nb, kQ8 ? 32 : 16, kMats, warps * kR, mc.bulk_slots,
                                  mc.bulk_slot_bytes, mc.bulk_min_copy, max_smem);
  a.shape = plan.shape;
  a.slots = plan.slots;
  const size_t smem = plan.smem;
  int per_sm = 0;
  GEM_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
      &per_sm, matvec_bulk_kernel<kQ8, kMats, kR>, (warps + 1) * 32, smem));
  if (per_sm < 1) per_sm = 1;
  for (int m = 0; m < kMats; ++m) {
    a.qs[m] = w[m].qs;
    a.d[m] = w[m].d;
  }
  a.rows = w[0].rows;
  a.nb = nb;
  a.xq = xq.q;
  a.xds = xq.ds;
  a.y = y;
  a.cap = cap;
  a.evict_first = mc.evict_first;
  static const bool no_math = env_flag("GEM_CUDA_MV_BULK_NOMATH", false);
  a.no_math = no_math;
  launch(matvec_bulk_kernel<kQ8, kMats, kR>, static_cast<unsigned>(sms * per_sm), (warps + 1) * 32,
         smem, s, a);
  GEM_CUDA_LAUNCHED();
}

}  // namespace

void matvec(const DevMatrix& w, const float* x, Q8Act xq, int n, float* y, float cap,
            cudaStream_t s, const MatvecConfig& mc) {
  if (bulk_fits(w, n, mc)) {
    const bool q8 = w.type == WType::kQ8_0;
    if (mc.bulk_rows == 2) {
      q8 ? launch_bulk<true, 1, 2>(&w, xq, y, cap, s, mc) : launch_bulk<false, 1, 2>(&w, xq, y, cap, s, mc);
    } else {
      q8 ? launch_bulk<true, 1, 1>(&w, xq, y, cap, s, mc) : launch_bulk<false, 1, 1>(&w, xq, y, cap, s, mc);
    }
    return;
  }
  if (w.type == WType::kQ4_0 || w.type == WType::kQ8_0) {
    constexpr int kRows = 2;
    const int64_t rows_per_block = kQWarps * kRows;
    const dim3 grid(static_cast<unsigned>((w.rows + rows_per_block - 1) / rows_per_block), n);
    const bool xs = x_in_smem(w.rows, mc);
    const size_t smem = xs ? x_smem_bytes(w.cols) : 0;
    auto go = [&](auto kernel) {
      launch(kernel, grid, kQWarps * 32, smem, s, w.qs, w.d, w.rows, static_cast<int>(w.cols),
             xq.q, xq.ds, y, cap, mc);
    };
    if (w.type == WType::kQ4_0) {
      if (!xs) {
        go(matvec_q_kernel<false, kRows, 4, false>);
      } else if (mc.q4_unroll == 8) {
        go(matvec_q_kernel<false, kRows, 8, true>);
      } else {
        go(matvec_q_kernel<false, kRows, 4, true>);
      }
    } else {
      xs ? go(matvec_q_kernel<true, kRows, 2, true>) : go(matvec_q_kernel<true, kRows, 2, false>);
    }
  } else {
    const dim3 grid(static_cast<unsigned>((w.rows + kWarps - 1) / kWarps), n);
    launch(matvec_f_kernel, grid, kWarps * 32, 0, s, w, x, y, cap);
  }
  GEM_CUDA_LAUNCHED();
}

void matvec(const DevMatrix& w, const float* x, Q8Act xq, int n, float* y, float cap,
            cudaStream_t s) {
  matvec(w, x, xq, n, y, cap, s, matvec_config());
}

void matvec_gated(const DevMatrix& gate, const DevMatrix& up, Q8Act xq, int n, float* g,
                  cudaStream_t s, const MatvecConfig& mc) {
  if (bulk_fits(gate, n, mc) && bulk_fits(up, n, mc)) {
    const DevMatrix w[2] = {gate, up};
    if (mc.bulk_rows == 2) {
      launch_bulk<false, 2, 2>(w, xq, g, 0.0f, s, mc);
    } else {
      launch_bulk<false, 2, 1>(w, xq, g, 0.0f, s, mc);
    }
    return;
  }
  constexpr int kRows = 2;
  const int64_t rows_per_block = kQWarps * kRows;
  const dim3 grid(static_cast<unsigned>((gate.rows + rows_per_block - 1) / rows_per_block), n);
  const bool xs = x_in_smem(gate.rows, mc);
  const size_t smem = xs ? x_smem_bytes(gate.cols) : 0;
  auto go = [&](auto kernel) {
    launch(kernel, grid, kQWarps * 32, smem, s, gate.qs, gate.d, up.qs, up.d, gate.rows,
           static_cast<int>(gate.cols), xq.q, xq.ds, g, mc);
  };
  if (!xs) {
    go(matvec_gated_kernel<kRows, 2, false>);
  } else if (mc.q4_unroll == 8) {
    go(matvec_gated_kernel<kRows, 4, true>);
  } else {
    go(matvec_gated_kernel<kRows, 2, true>);
  }
  GEM_CUDA_LAUNCHED();
}

void matvec_gated(const DevMatrix& gate, const DevMatrix& up, Q8Act xq, int n, float* g,
                  cudaStream_t s) {
  matvec_gated(gate, up, xq, n, g, s, matvec_config());
}

void dequant_f16(const DevMatrix& w, int64_t r0, int64_t nr, __half* out, cudaStream_t s) {
  const int64_t total = nr * (w.cols / 32);
  const int64_t blocks = (total + 255) / 256;
  launch(dequant_f16_kernel, static_cast<unsigned>(blocks < 8192 ? blocks : 8192), 256, 0, s, w, r0,
         nr, out);
  GEM_CUDA_LAUNCHED();
}

}  // namespace gem::cuda
