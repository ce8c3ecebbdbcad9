// The n-token products on the tensor cores (mma.sync m16n8k16, f16 operands, f32 accumulators),
// for up to 32 tokens: the weights are dequantised to f16 in registers as they arrive (scale
// folded in, so the accumulators run over all of K with no per-block epilogue) and x is rounded
// to f16 once per block into shared memory. Why f16 rather than int8 mma on the q8 copy: with
// per-32 scales on both sides an int8 product needs a conversion and two FMAs per accumulator per
// block, which at 32 tokens costs more issue slots than the whole f16 path (matmul_n.cu).
// The kernel template, included by the files of instances (matmul_n_mma_*.cu: one per weight
// type, so that nvcc compiles them in parallel).
#pragma once

#include <cooperative_groups.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <type_traits>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/matmul_n_parts.cuh"

namespace gem::cuda::mmn {
namespace {

namespace cg = cooperative_groups;

constexpr int kWarps = 4;     // warps per block
constexpr int kChunk = 128;   // columns per step of the K loop: 4 blocks of 32, one per quad lane
constexpr int kXPitch = 136;  // halves per token row of a staged x chunk (272 bytes, see x_convert)

// ---- the thread-to-data mapping ----
// A warp owns kMT tiles of 16 rows (per matrix) and all tokens (kNT tiles of 8). Lane (g, i) =
// (lane / 4, lane % 4) loads, for each of its rows g and g + 8, the whole 32-column block 4c + i
// of chunk c: one 16-byte (Q4_0) or 32-byte (Q8_0) load per row, and the four lanes of a quad read
// 64 (128) contiguous bytes of the row. The mma's k index needs no relation to the column order as
// long as A and B agree, and the scales are folded into A: in k-step s (0..7) of a chunk, the four
// k slots {2i, 2i+1, 2i+8, 2i+9} held by lanes with quad index i are four columns of block 4c + i,
// and B (x of token g of each n tile) is read from those same four columns. So each lane
// dequantises only its own loads, and the B fragment of a step is 8 contiguous bytes of x.

// Raw bytes of one row's 32-column block as loaded (kept raw until used, so that the loads stay
// in flight: nothing computes on them at load time).
template <WType kT>
struct Raw;
template <>
struct Raw<WType::kQ4_0> {
  uint4 q;           // 16 bytes: byte j = weight j (low nibble), weight j + 16 (high)
  unsigned short d;  // f16 scale
};
template <>
struct Raw<WType::kQ8_0> {
  uint4 q0, q1;  // 32 int8
  unsigned short d;
};
// Q6_K: value l of 32-column group (half h, quarter u) of a super-block: low 4 bits from ql
// byte l (+32 when u is odd; nibble u >> 1), high 2 bits from qh byte l (bits 2u), scale
// sc[2u + l/16]. The super-blocks are 210 bytes, so a group's 32 ql and 32 qh bytes are only
// 2-byte aligned: 9 aligned words each, shifted by `sh` bits when used.
template <>
struct Raw<WType::kQ6_K> {
  uint32_t ql[9], qh[9];
  unsigned short sc;  // sc[2u], sc[2u + 1] (int8)
  unsigned short d;   // f16 super-block scale
  uint32_t sh;        // 0 or 16
};

// Where row `row`'s data for lane quad index i starts (chunk 0), and the bytes from one chunk to
// the next.
template <WType kT>
__device__ __forceinline__ const uint8_t* row_quants(const uint8_t* q, int64_t row, int cols,
                                                     int i) {
  if constexpr (kT == WType::kQ4_0) return q + row * (cols / 2) + 16 * i;
  if constexpr (kT == WType::kQ8_0) return q + row * cols + 32 * i;
  return q + row * (cols / 256) * 210;  // Q6_K: the row's first super-block
}

template <WType kT>
__device__ __forceinline__ Raw<kT> load_raw(const uint8_t* wq, const __half* wd, int c, int i,
                                            uint64_t pol) {
  Raw<kT> r;
  if constexpr (kT == WType::kQ4_0) {
    r.q = ld_w128(wq + 64LL * c, pol);
    r.d = ld_w16(wd + 4LL * c, pol);
  } else if constexpr (kT == WType::kQ8_0) {
    r.q0 = ld_w128(wq + 128LL * c, pol);
    r.q1 = ld_w128(wq + 128LL * c + 16, pol);
    r.d = ld_w16(wd + 4LL * c, pol);
  } else {
    // Chunk c = half (c & 1) of super-block c >> 1; lane quad index i = quarter.
    const uint8_t* sb = wq + 210LL * (c >> 1);
    const int h = c & 1;
    const uint8_t* ql = sb + 64 * h + 32 * (i & 1);
    const uint8_t* qh = sb + 128 + 32 * h;
    const uintptr_t qla = reinterpret_cast<uintptr_t>(ql);
    r.sh = static_cast<uint32_t>(qla & 3) * 8;
    const uint8_t* qlw = reinterpret_cast<const uint8_t*>(qla & ~uintptr_t{3});
    const uint8_t* qhw = reinterpret_cast<const uint8_t*>(reinterpret_cast<uintptr_t>(qh) & ~uintptr_t{3});
#pragma unroll
    for (int k = 0; k < 9; ++k) {
      r.ql[k] = ld_w32(qlw + 4 * k, pol);
      r.qh[k] = ld_w32(qhw + 4 * k, pol);
    }
    r.sc = ld_w16(sb + 192 + 8 * h + 2 * i, pol);
    r.d = ld_w16(sb + 208, pol);
  }
  return r;
}

__device__ __forceinline__ uint32_t h2_bits(__half2 h) {
  uint32_t u;
  memcpy(&u, &h, 4);
  return u;
}
__device__ __forceinline__ __half2 bits_h2(uint32_t u) {
  __half2 h;
  memcpy(&h, &u, 4);
  return h;
}

// Two f16 pairs from bytes 0,1 and 2,3 of `b` (each byte an unsigned 0..255): the bytes become the
// low mantissa bits of 1024 (f16 0x64XX = 1024 + XX exactly), minus `bias` (exact: small
// integers), times the scale (the one rounding, as dequant_f16 rounds for cuBLAS).
__device__ __forceinline__ void bytes_to_h2(uint32_t b, __half2 bias, __half2 scale, uint32_t& p01,
                                            uint32_t& p23) {
  p01 = h2_bits(__hmul2(__hsub2(bits_h2(__byte_perm(b, 0x64646464u, 0x4140)), bias), scale));
  p23 = h2_bits(__hmul2(__hsub2(bits_h2(__byte_perm(b, 0x64646464u, 0x4342)), bias), scale));
}

// The per-row scales of a chunk as f16 pairs: Q4_0/Q8_0 d; Q6_K d·sc for values 0..15 (lo) and
// 16..31 (hi), rounded to f16 once.
struct Scales {
  __half2 lo, hi;
};
template <WType kT>
__device__ __forceinline__ Scales scales_of(const Raw<kT>& r) {
  const __half d = __ushort_as_half(r.d);
  if constexpr (kT == WType::kQ6_K) {
    const float df = __half2float(d);
    const float s0 = static_cast<float>(static_cast<int8_t>(r.sc & 0xFF));
    const float s1 = static_cast<float>(static_cast<int8_t>(r.sc >> 8));
    return {__half2half2(__float2half_rn(df * s0)), __half2half2(__float2half_rn(df * s1))};
  } else {
    return {__half2half2(d), __half2half2(d)};
  }
}

// A's two registers for one row in k-step s: the f16 weights of k slots {2i, 2i+1} (p01) and
// {2i+8, 2i+9} (p23), i.e. four consecutive columns of the lane's block:
//   Q4_0: step s = 2q + h takes the nibbles of word q, low (h = 0: weights 4q..4q+3) or high
//         (h = 1: weights 16+4q..16+4q+3);
//   Q8_0, Q6_K: step s takes weights 4s..4s+3.
template <WType kT, int s>
__device__ __forceinline__ void a_regs(const Raw<kT>& r, const Scales& sc, int i, uint32_t& p01,
                                       uint32_t& p23) {
  if constexpr (kT == WType::kQ4_0) {
    const uint32_t words[4] = {r.q.x, r.q.y, r.q.z, r.q.w};
    const uint32_t w = words[s >> 1];
    const uint32_t nib = (s & 1) ? (w >> 4) & 0x0F0F0F0Fu : w & 0x0F0F0F0Fu;
    bytes_to_h2(nib, __float2half2_rn(1032.0f), sc.lo, p01, p23);  // 1024 + 8
  } else if constexpr (kT == WType::kQ8_0) {
    const uint32_t words[8] = {r.q0.x, r.q0.y, r.q0.z, r.q0.w, r.q1.x, r.q1.y, r.q1.z, r.q1.w};
    // Signed bytes to unsigned by flipping the sign bit: b + 128.
    bytes_to_h2(words[s] ^ 0x80808080u, __float2half2_rn(1152.0f), sc.lo, p01, p23);
  } else {
    const uint32_t l = __funnelshift_r(r.ql[s], r.ql[s + 1], r.sh);
    const uint32_t h = __funnelshift_r(r.qh[s], r.qh[s + 1], r.sh);
    const uint32_t lo = (l >> (4 * (i >> 1))) & 0x0F0F0F0Fu;
    const uint32_t hi = ((h >> (2 * i)) & 0x03030303u) << 4;
    bytes_to_h2(lo | hi, __float2half2_rn(1056.0f), s < 4 ? sc.lo : sc.hi, p01, p23);  // 1024 + 32
  }
}

// The 8-byte slot (of the 8 in a 32-column block) that k-step s reads: the four columns of A's
// registers (see a_regs).
template <WType kT>
constexpr int step_slot(int s) {
  return kT == WType::kQ4_0 ? 4 * (s & 1) + (s >> 1) : s;
}

__device__ __forceinline__ void mma_16816(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                          uint32_t a3, uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// ---- x staging ----
// A chunk of x goes global → shared as f32 by cp.async into one of kL staging slots, issued kL
// chunks ahead (no registers held while it lands: an L2 round trip per chunk would otherwise
// bound the K loop), then each thread converts the 16-byte pieces it copied to f16 in one of two
// buffers [kNT·8 tokens][kXPitch halves]. In those, the 8-byte slot k of block j (columns
// 32j + 4k .. +3) sits at slot k ^ (j >> 1) of the block: with the 272-byte row pitch, the 16
// lanes of each half-warp's B read (4 tokens' rows × 4 blocks) fall on 16 different bank pairs.
// Every call commits one cp.async group (empty past the slice), so that group counts stay
// uniform.
template <int kNT>
__device__ __forceinline__ void x_async(const float* x, int n, int cols, int c, bool valid,
                                        int tid, float* stage) {
  if (valid) {
#pragma unroll
    for (int k = 0; k < 2 * kNT; ++k) {
      const int e = tid + kWarps * 32 * k, t = e >> 5, slot = e & 31;
      if (t < n) {
        // cp.async reads through L2 after pdl_wait: coherent with the previous kernel's writes.
        cp_async16(stage + 4 * e, x + static_cast<int64_t>(t) * cols + kChunk * c + 4 * slot);
      }
    }
  }
  cp_async_commit();
}
// Waits until at most kPending of this thread's copy groups are in flight, then converts.
template <int kNT, int kPending>
__device__ __forceinline__ void x_convert(const float* stage, int n, int tid, __half* xs) {
  cp_async_wait<kPending>();
#pragma unroll
  for (int k = 0; k < 2 * kNT; ++k) {
    const int e = tid + kWarps * 32 * k, t = e >> 5, slot = e & 31;
    if (t < n) {
      const float4 f = *reinterpret_cast<const float4*>(stage + 4 * e);
      const int j = slot >> 3, sk = slot & 7;
      uint2 v;
      v.x = h2_bits(__floats2half2_rn(f.x, f.y));
      v.y = h2_bits(__floats2half2_rn(f.z, f.w));
      *reinterpret_cast<uint2*>(xs + t * kXPitch + 32 * j + 4 * (sk ^ (j >> 1))) = v;
    }
  }
}

// One chunk: 8 k-steps, each dequantising A for the warp's rows and multiplying it with every n
// tile of the staged x.
template <WType kT, int kMats, int kMT, int kNT>
__device__ __forceinline__ void chunk_mma(const Raw<kT> (&w)[kMats][kMT][2], const __half* xq,
                                          int i, float (&acc)[kMats][kMT][kNT][4]) {
  Scales sc[kMats][kMT][2];
#pragma unroll
  for (int m = 0; m < kMats; ++m) {
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
      sc[m][mt][0] = scales_of<kT>(w[m][mt][0]);
      sc[m][mt][1] = scales_of<kT>(w[m][mt][1]);
    }
  }
  // xq: this lane's token row (g) and block (i); the swizzle flips slot bit 0 when i >= 2.
  const int flip = i >> 1;
  auto step = [&](auto s_const) {
    constexpr int s = decltype(s_const)::value;
    uint32_t a[kMats][kMT][4];
#pragma unroll
    for (int m = 0; m < kMats; ++m) {
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        a_regs<kT, s>(w[m][mt][0], sc[m][mt][0], i, a[m][mt][0], a[m][mt][2]);
        a_regs<kT, s>(w[m][mt][1], sc[m][mt][1], i, a[m][mt][1], a[m][mt][3]);
      }
    }
    const int slot = step_slot<kT>(s) ^ flip;
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
      const uint2 b = *reinterpret_cast<const uint2*>(xq + nt * 8 * kXPitch + 4 * slot);
#pragma unroll
      for (int m = 0; m < kMats; ++m) {
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          mma_16816(acc[m][mt][nt], a[m][mt][0], a[m][mt][1], a[m][mt][2], a[m][mt][3], b.x, b.y);
        }
      }
    }
  };
  step(std::integral_constant<int, 0>{});
  step(std::integral_constant<int, 1>{});
  step(std::integral_constant<int, 2>{});
  step(std::integral_constant<int, 3>{});
  step(std::integral_constant<int, 4>{});
  step(std::integral_constant<int, 5>{});
  step(std::integral_constant<int, 6>{});
  step(std::integral_constant<int, 7>{});
}

// Shared memory: the two f16 x buffers and the kL f32 staging slots during the K loop;
// afterwards the partial sums, over the same bytes.
template <int kNT>
constexpr size_t x16_halves() {
  return static_cast<size_t>(kNT) * 8 * kXPitch;
}
template <int kNT>
constexpr size_t stage_floats() {
  return static_cast<size_t>(kNT) * 8 * kChunk;
}
template <int kMats, int kMT, int kNT, int kL>
constexpr size_t smem_bytes() {
  constexpr int kRPB = 16 * kMT * kWarps;
  constexpr size_t x = 2 * x16_halves<kNT>() * sizeof(__half) + kL * stage_floats<kNT>() * sizeof(float);
  constexpr size_t red = static_cast<size_t>(kMats) * kNT * 8 * (kRPB + 4) * sizeof(float);
  return x > red ? x : red;
}

// y[t, r] (kMats = 1, optional soft-cap) or gelu_tanh(gate·x)·(up·x) (kMats = 2) for a tile of
// kRPB = 64·kMT rows and kNT·8 tokens. blockIdx.x = tile·split + slice: the `split` blocks of a
// tile form a cluster, each over 1/split of the chunks of K; their partial sums meet in shared
// memory (distributed across the cluster), and block rank k sums rows [k·kRPB/split, ...) in
// rank order (deterministic) and stores them. K loop: kP chunks of weights in flight in
// registers, x copied kL chunks ahead and double-buffered as f16, one barrier per chunk.
template <WType kT, int kMats, int kMT, int kNT, int kP, int kL>
__global__ void __launch_bounds__(kWarps * 32) mma_kernel(NArgs a, int split) {
  constexpr int kRPB = 16 * kMT * kWarps;
  constexpr int kRedPitch = kRPB + 4;  // floats; bank-conflict-free fragment stores
  extern __shared__ __align__(16) unsigned char smem[];
  __half* xs = reinterpret_cast<__half*>(smem);  // buffer b at xs + b·x16_halves
  float* stage = reinterpret_cast<float*>(xs + 2 * x16_halves<kNT>());  // kL slots
  pdl_trigger();
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, i = lane & 3;
  const int slice = static_cast<int>(blockIdx.x % split);
  const int64_t tile = blockIdx.x / split;
  const int n_chunks = a.cols / kChunk;
  const int c0 = slice * n_chunks / split, c1 = (slice + 1) * n_chunks / split;
  const uint64_t pol = weight_policy(a.evict_first);

  // This lane's rows (clamped for loading; only rows < a.rows are stored).
  const uint8_t* wq[kMats][kMT][2];
  const __half* wd[kMats][kMT][2];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      int64_t row = tile * kRPB + warp * 16 * kMT + 16 * mt + 8 * hr + g;
      row = row < a.rows ? row : a.rows - 1;
#pragma unroll
      for (int m = 0; m < kMats; ++m) {
        wq[m][mt][hr] = row_quants<kT>(a.q[m], row, a.cols, i);
        wd[m][mt][hr] = kT == WType::kQ6_K ? nullptr : a.d[m] + row * (a.cols / 32) + i;
      }
    }
  }
  auto load_chunk = [&](Raw<kT> (&r)[kMats][kMT][2], int c) {
#pragma unroll
    for (int m = 0; m < kMats; ++m) {
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) r[m][mt][hr] = load_raw<kT>(wq[m][mt][hr], wd[m][mt][hr], c, i, pol);
      }
    }
  };

  // The first kP chunks of weights are requested before pdl_wait (CudaTuning::mv_preload).
  Raw<kT> ring[kP][kMats][kMT][2];
  if (!a.preload) pdl_wait();
#pragma unroll
  for (int p = 0; p < kP; ++p) {
    if (c0 + p < c1) load_chunk(ring[p], c0 + p);
  }
  if (a.preload) pdl_wait();

  // Chunk c0 + j goes to slot j % kL; chunk c0 lands first.
#pragma unroll
  for (int j = 0; j < kL; ++j) {
    x_async<kNT>(a.x, a.n, a.cols, c0 + j, c0 + j < c1, tid, stage + j * stage_floats<kNT>());
  }
  if (c0 < c1) x_convert<kNT, kL - 1>(stage, a.n, tid, xs);
  __syncthreads();

  float acc[kMats][kMT][kNT][4] = {};
  const int xoff = g * kXPitch + 32 * i;  // this lane's token row and block in a staged chunk
  for (int cb = c0; cb < c1; cb += kP) {
#pragma unroll
    for (int p = 0; p < kP; ++p) {
      const int c = cb + p;
      if (c < c1) {
        const bool more = c + 1 < c1;
        const int k = c - c0;
        // Slot k % kL held chunk c, converted before the last barrier: it takes chunk c + kL.
        x_async<kNT>(a.x, a.n, a.cols, c + kL, c + kL < c1, tid, stage + (k % kL) * stage_floats<kNT>());
        Raw<kT> cur[kMats][kMT][2];
#pragma unroll
        for (int m = 0; m < kMats; ++m) {
#pragma unroll
          for (int mt = 0; mt < kMT; ++mt) {
            cur[m][mt][0] = ring[p][m][mt][0];
            cur[m][mt][1] = ring[p][m][mt][1];
          }
        }
        if (c + kP < c1) load_chunk(ring[p], c + kP);
        const int buf = k & 1;
        chunk_mma<kT, kMats, kMT, kNT>(cur, xs + buf * x16_halves<kNT>() + xoff, i, acc);
        // Groups committed: kL + k + 1; chunk c + 1's is done when at most kL − 1 are pending.
        if (more) {
          x_convert<kNT, kL - 1>(stage + ((k + 1) % kL) * stage_floats<kNT>(), a.n, tid,
                                 xs + (buf ^ 1) * x16_halves<kNT>());
        }
        __syncthreads();
      }
    }
  }

  // Partial sums to shared memory, [kMats][kNT·8 tokens][kRedPitch] (the x buffers are free: the
  // loop ended on a barrier). Fragment c0, c1: row g, tokens 2i, 2i+1; c2, c3: row g + 8.
  float* red = reinterpret_cast<float*>(smem);
#pragma unroll
  for (int m = 0; m < kMats; ++m) {
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) {
        const int r = warp * 16 * kMT + 16 * mt + g, t = nt * 8 + 2 * i;
        float* base = red + (m * kNT * 8 + t) * kRedPitch + r;
        base[0] = acc[m][mt][nt][0];
        base[kRedPitch] = acc[m][mt][nt][1];
        base[8] = acc[m][mt][nt][2];
        base[kRedPitch + 8] = acc[m][mt][nt][3];
      }
    }
  }
  if (split > 1) {
    cg::this_cluster().sync();
  } else {
    __syncthreads();
  }
  const int r_begin = slice * kRPB / split, r_count = (slice + 1) * kRPB / split - r_begin;
  for (int e = tid; e < r_count * a.n; e += kWarps * 32) {
    const int t = e / r_count, rl = r_begin + e % r_count;
    const int64_t row = tile * kRPB + rl;
    float v[kMats] = {};
    for (int k = 0; k < split; ++k) {
      const float* rr = split > 1 ? cg::this_cluster().map_shared_rank(red, k) : red;
#pragma unroll
      for (int m = 0; m < kMats; ++m) v[m] += rr[(m * kNT * 8 + t) * kRedPitch + rl];
    }
    if (row < a.rows) {
      float out;
      if constexpr (kMats == 2) {
        out = gelu_tanh(v[0]) * v[1];
      } else {
        out = a.cap > 0.0f ? a.cap * tanhf(v[0] / a.cap) : v[0];
      }
      a.y[static_cast<int64_t>(t) * a.rows + row] = out;
    }
  }
  // No block leaves while another of its cluster may still read its partial sums.
  if (split > 1) cg::this_cluster().sync();
}

// Per instance: the row tile, the SM count, the largest cluster, and the launch.
struct InstanceLimits {
  int n_sm;
  int max_split;  // 16 where the device takes non-portable clusters of 16, else 8
};
template <WType kT, int kMats, int kMT, int kNT, int kP, int kL>
int launch_instance(const NArgs& a, int split, cudaStream_t s) {
  constexpr int kRPB = 16 * kMT * kWarps;
  constexpr size_t kSmem = smem_bytes<kMats, kMT, kNT, kL>();
  auto kernel = mma_kernel<kT, kMats, kMT, kNT, kP, kL>;
  static const InstanceLimits limits = [&] {
    int n_sm = 0, dev = 0;
    GEM_CUDA_CHECK(cudaGetDevice(&dev));
    GEM_CUDA_CHECK(cudaDeviceGetAttribute(&n_sm, cudaDevAttrMultiProcessorCount, dev));
    GEM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(kSmem)));
    int max_split = 8;
    if (cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) == cudaSuccess) {
      cudaLaunchConfig_t cfg = {};
      cfg.gridDim = dim3(16);
      cfg.blockDim = dim3(kWarps * 32);
      cfg.dynamicSmemBytes = kSmem;
      cudaLaunchAttribute attr;
      attr.id = cudaLaunchAttributeClusterDimension;
      attr.val.clusterDim.x = 16;
      attr.val.clusterDim.y = 1;
      attr.val.clusterDim.z = 1;
      cfg.attrs = &attr;
      cfg.numAttrs = 1;
      int clusters = 0;
      if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg) == cudaSuccess && clusters > 0) {
        max_split = 16;
      }
    }
    cudaGetLastError();  // a refused query is no launch error
    return InstanceLimits{n_sm, max_split};
  }();
  const int64_t tiles = (a.rows + kRPB - 1) / kRPB;
  const int n_chunks = a.cols / kChunk;
  if (split <= 0) {
    // The rule (H200, bench/results/matmul_n.md; it picks the fastest of splits 1-16 for every
    // 12B and 31B product but the 31B gate|up at 16 tokens, +6 %): the fewest blocks per
    // cluster that give about 1.8 blocks per SM (3.6 for 32-token tiles), keeping 2 chunks per
    // block; the gated pair also at most 16 chunks per block. Fewer blocks leave SMs idle; more
    // cut each block's K run so short that its fixed costs (first copies, reduction) dominate.
    const double target = (kNT == 4 ? 3.6 : 1.8) * limits.n_sm;
    split = 1;
    while (split < 8 && static_cast<double>(tiles * split) < target && n_chunks / (2 * split) >= 2) {
      split *= 2;
    }
    if constexpr (kMats == 2) {
      while (split < 8 && n_chunks > 16 * split && n_chunks / (2 * split) >= 2) split *= 2;
    }
  }
  split = std::clamp(split, 1, std::min(limits.max_split, n_chunks));
  const dim3 grid(static_cast<unsigned>(tiles * split));
  launch_clustered(kernel, grid, dim3(kWarps * 32), kSmem, s, static_cast<unsigned>(split), a, split);
  return split;
}

// The instance for n tokens (8, 16 or 32 per launch) of a form (kMT, kP, kL).
template <WType kT, int kMats, int kMT, int kP, int kL>
int launch_nt(const NArgs& a, int split, cudaStream_t s) {
  if (a.n <= 8) return launch_instance<kT, kMats, kMT, 1, kP, kL>(a, split, s);
  if (a.n <= 16) return launch_instance<kT, kMats, kMT, 2, kP, kL>(a, split, s);
  return launch_instance<kT, kMats, kMT, 4, kP, kL>(a, split, s);
}

}  // namespace
}  // namespace gem::cuda::mmn
