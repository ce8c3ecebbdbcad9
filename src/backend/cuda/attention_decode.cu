// The decode attention: one query per head, its own K/V already in the cache. The CUDA-core
// kernel (K/V tiles staged in shared memory for the group's heads) and the tensor-core forms
// of the full layers (whole S per warp, or S split over the warps for long ranges).
#include <cuda_fp16.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <type_traits>

#include "backend/cuda/attention_decode.cuh"
#include "backend/cuda/attention_parts.cuh"
#include "backend/cuda/cuda_common.cuh"

namespace gem::cuda {
namespace {

// The tensor-core decode form of a launch (CudaTuning::attn_form, or by its rule: the split
// form for launches that can see at least attn_split_min_keys keys, else the form where every
// warp computes the whole S).
int mma_form(const AttnArgs& a, const CudaTuning& t) {
  if (t.attn_form >= 0) return t.attn_form;
  return a.max_keys >= t.attn_split_min_keys ? 2 : 1;
}
// The split form reads only K's rotated dims when the caller allows it (AttnArgs::k_shared_w).
bool shared_kv_on(const AttnArgs& a) { return a.k_shared_w != nullptr; }

// ---- Decode: one query per head (n = 1), its own K/V already in the cache ----
// Block = (KV head g, split), 8 warps. The block's keys pass through shared memory in stages
// of kDecTileBytes of K and of V (cp.async, kDecStages deep), so the r heads of the group read
// each key from device memory once. Warps: r >= 8: warp w owns heads w, w + 8 (kHPW of them)
// over all keys; r < 8: warp w owns head w % r and every (8/r)-th key, and the warps of a head
// merge their online-softmax states at the end. Lane l owns elements [l·D/32, (l+1)·D/32).
constexpr int kDecWarps = 8;
constexpr int kDecTileBytes = 8192;
constexpr int kDecStages = 3;  // two tiles in flight while the third is used: 48 KB per block
constexpr int kDecGroup = 4;  // keys whose dot products are reduced together


// kPL consecutive elements of a shared-memory row, from element lane·kPL, as floats.
template <typename T, int kPL>
__device__ __forceinline__ void load_lane(const T* row, int lane, float (&out)[kPL]) {
  if constexpr ((kPL * sizeof(T)) % 16 == 0) {
    const uint4* src = reinterpret_cast<const uint4*>(row + lane * kPL);
#pragma unroll
    for (int c = 0; c < static_cast<int>(kPL * sizeof(T) / 16); ++c) {
      const uint4 u = src[c];
      if constexpr (sizeof(T) == 2) {
        const __half2* h = reinterpret_cast<const __half2*>(&u);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float2 f = __half22float2(h[e]);
          out[8 * c + 2 * e] = f.x;
          out[8 * c + 2 * e + 1] = f.y;
        }
      } else {
        const float* f = reinterpret_cast<const float*>(&u);
#pragma unroll
        for (int e = 0; e < 4; ++e) out[4 * c + e] = f[e];
      }
    }
  } else {
#pragma unroll
    for (int i = 0; i < kPL; ++i) out[i] = to_f(row[lane * kPL + i]);
  }
}

// This decode block's key range [kb, ke) (its split's) and its tiles of kKeys keys. Reads only
// the step's position (copied from the host before the graph), so it may run before pdl_wait.
template <int kKeys>
__device__ __forceinline__ void decode_block_range(const AttnArgs& a, int split, int& kb, int& ke,
                                                   int& n_tiles) {
  const SplitRange range = decode_split_range(a, split);
  kb = range.kb;
  ke = range.ke;
  n_tiles = kb < ke ? (ke - kb + kKeys - 1) / kKeys : 0;
}

// Whether this decode block's key range [kb, ke) holds the token's own position, whose key this
// step stores (the prologue kernel).
__device__ __forceinline__ bool holds_token(const AttnArgs& a, int kb, int ke) {
  return kb <= a.sp->pos0 && a.sp->pos0 < ke;
}

// When a decode block issues the copies of its first tiles (stages_begin): before pdl_wait
// when its range does not hold the token's position, so that every key it reads was stored by
// an earlier step (no kernel of this step writes it) — under PDL the block is resident while the
// prologue (and the product before it) still run, and its first K/V bytes are in flight then
// (AttnArgs::early_kv) —, else right after pdl_wait. The tensor-core
// forms stage their queries through the last stage, which stages_begin leaves free, so the
// queries never share a stage with these tiles.
// (The q/k/v prologue inside the decode kernels, storing the token's K/V from the block holding
// it, was 3-5 % slower.)
// `begin` (the copies) has one call site, so its loops are inlined once per kernel (with two,
// the CUDA-core kernel's PTX was 1,901 instructions instead of 1,457).
template <typename Begin>
__device__ __forceinline__ void begin_and_wait(const AttnArgs& a, int kb, int ke, Begin&& begin) {
  const bool early = a.early_kv && !holds_token(a, kb, ke);
  if (!early) pdl_wait();
  begin();
  if (early) pdl_wait();
}

// The cp.async schedule of the decode kernels, kStages deep: stages_begin requests tiles
// 0 .. kStages-2; stages_next(it) requests tile it + kStages - 1 into the stage tile it - 1 used
// (an empty group past the end, so that "all but the newest kStages - 1 groups done" always
// means "tile it has landed"), waits for tile it and syncs the block. load(stage, tile) issues
// one tile's copies and commits them.
template <int kStages, typename Load>
__device__ __forceinline__ void stages_begin(int n_tiles, Load&& load) {
#pragma unroll
  for (int s0 = 0; s0 < kStages - 1; ++s0) {
    if (s0 < n_tiles) {
      load(s0, s0);
    } else {
      cp_async_commit();
    }
  }
}
template <int kStages, typename Load>
__device__ __forceinline__ void stages_next(int it, int n_tiles, Load&& load) {
  const int nxt = it + kStages - 1;
  if (nxt < n_tiles) {
    load(nxt % kStages, nxt);
  } else {
    cp_async_commit();
  }
  cp_async_wait<kStages - 1>();
  __syncthreads();
}

// (The sliding layers' splits as one cluster of 8 or 16 blocks per KV head merging through
// distributed shared memory, no merge launch, were slower: fewer, longer blocks lose more than
// the merge launch costs.)
// The kernel is bound by its instructions per warp (~1,200 at ~10 cycles each), not by
// bandwidth, hence its lean form: one ring modulo per tile instead of one per 16-byte copy, the hardware
// ex2-based __expf in the softmax (a few instructions instead of expf's dozen; relative error
// ~2^-21 plus 2 ulp), the queries in float4 loads and the parts in float2 stores.
template <int D, typename T, int kHPW, bool kRows>
__global__ void __launch_bounds__(kDecWarps * 32) attention_decode_kernel(AttnArgs a_in) {
  const AttnArgs a = kRows ? row_view(a_in, blockIdx.z) : a_in;
  constexpr int kPL = D / 32;
  constexpr int kRow = D * static_cast<int>(sizeof(T));  // bytes per key row
  constexpr int kKT = kDecTileBytes / kRow;              // keys per stage
  __shared__ __align__(16) unsigned char smem[kDecStages][2][kDecTileBytes];  // [stage][K, V]
  static_assert(kDecWarps * (D + 2) * 4 <= static_cast<int>(sizeof(smem)), "merge scratch");
  pdl_trigger();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int r = a.n_heads / a.n_kv;
  const int g = blockIdx.x, split = blockIdx.y;
  const bool wide = r >= kDecWarps;
  const int n_ksub = wide ? 1 : kDecWarps / r, ksub = wide ? 0 : warp / r;
  int heads[kHPW];
#pragma unroll
  for (int h = 0; h < kHPW; ++h) heads[h] = g * r + (wide ? warp + kDecWarps * h : warp % r);
  int kb, ke, n_tiles;  // keys [kb, ke)
  decode_block_range<kKT>(a, split, kb, ke, n_tiles);
  if (kRows && n_tiles == 0) return;  // a rows pass's empty split: no part (the merge skips it)
  const unsigned char* kc = static_cast<const unsigned char*>(a.k_cache) +
                            static_cast<int64_t>(g) * a.n_slots * kRow;
  const unsigned char* vc = static_cast<const unsigned char*>(a.v_cache) +
                            static_cast<int64_t>(g) * a.n_slots * kRow;
  auto load_stage = [&](int stage, int tile) {
    const int k0 = kb + tile * kKT;
    const int nk = min(kKT, ke - k0);
    // The tile's first slot once; its keys (fewer than the ring's slots) wrap at most once.
    const int slot0 = a.ring ? k0 % a.n_slots : k0;
    // (This loop with `#pragma unroll 1`, PTX of the sliding kernel 1,458 -> 934 instructions,
    // was within noise.)
    for (int c = threadIdx.x; c < nk * (kRow / 16); c += kDecWarps * 32) {
      const int kk = c / (kRow / 16), off = (c % (kRow / 16)) * 16;
      int slot = slot0 + kk;
      if (a.ring && slot >= a.n_slots) slot -= a.n_slots;
      const int64_t src = static_cast<int64_t>(slot) * kRow + off;
      cp_async16(&smem[stage][0][kk * kRow + off], kc + src);
      cp_async16(&smem[stage][1][kk * kRow + off], vc + src);
    }
    cp_async_commit();
  };
  begin_and_wait(a, kb, ke, [&] { stages_begin<kDecStages>(n_tiles, load_stage); });
  float qv[kHPW][kPL], acc[kHPW][kPL], m[kHPW], l[kHPW];
#pragma unroll
  for (int h = 0; h < kHPW; ++h) {
    // Plain loads after pdl_wait (the prologue kernel wrote q).
    const float* qrow = a.q + static_cast<int64_t>(heads[h]) * D + lane * kPL;
    if constexpr (kPL % 4 == 0) {
      // 16-byte aligned: D and kPL are multiples of 4 (a.q from cudaMalloc).
#pragma unroll
      for (int j = 0; j < kPL / 4; ++j) {
        const float4 v4 = reinterpret_cast<const float4*>(qrow)[j];
        qv[h][4 * j] = v4.x;
        qv[h][4 * j + 1] = v4.y;
        qv[h][4 * j + 2] = v4.z;
        qv[h][4 * j + 3] = v4.w;
      }
    } else {
#pragma unroll
      for (int i = 0; i < kPL; ++i) qv[h][i] = qrow[i];
    }
#pragma unroll
    for (int i = 0; i < kPL; ++i) acc[h][i] = 0.0f;
    m[h] = -INFINITY;
    l[h] = 0.0f;
  }
  for (int it = 0; it < n_tiles; ++it) {
    const int st = it % kDecStages;
    stages_next<kDecStages>(it, n_tiles, load_stage);
    const int nk = min(kKT, ke - (kb + it * kKT));
    const T* ks = reinterpret_cast<const T*>(smem[st][0]);
    const T* vs = reinterpret_cast<const T*>(smem[st][1]);
    for (int kk0 = ksub; kk0 < nk; kk0 += n_ksub * kDecGroup) {
      float s[kHPW][kDecGroup];
#pragma unroll
      for (int u = 0; u < kDecGroup; ++u) {
        const int kk = kk0 + u * n_ksub;
        float kf[kPL];
        if (kk < nk) {
          load_lane<T, kPL>(ks + kk * D, lane, kf);
        } else {
#pragma unroll
          for (int i = 0; i < kPL; ++i) kf[i] = 0.0f;
        }
#pragma unroll
        for (int h = 0; h < kHPW; ++h) {
          float dot = 0.0f;
#pragma unroll
          for (int i = 0; i < kPL; ++i) dot += qv[h][i] * kf[i];
          s[h][u] = dot;
        }
      }
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) {
#pragma unroll
        for (int h = 0; h < kHPW; ++h) {
#pragma unroll
          for (int u = 0; u < kDecGroup; ++u) s[h][u] += __shfl_xor_sync(0xffffffffu, s[h][u], o);
        }
      }
      float pr[kHPW][kDecGroup];
#pragma unroll
      for (int h = 0; h < kHPW; ++h) {
        float mg = m[h];
#pragma unroll
        for (int u = 0; u < kDecGroup; ++u) {
          if (kk0 + u * n_ksub < nk) mg = fmaxf(mg, s[h][u]);
        }
        const float corr = __expf(m[h] - mg);
        l[h] *= corr;
#pragma unroll
        for (int i = 0; i < kPL; ++i) acc[h][i] *= corr;
#pragma unroll
        for (int u = 0; u < kDecGroup; ++u) {
          pr[h][u] = kk0 + u * n_ksub < nk ? __expf(s[h][u] - mg) : 0.0f;
          l[h] += pr[h][u];
        }
        m[h] = mg;
      }
#pragma unroll
      for (int u = 0; u < kDecGroup; ++u) {
        const int kk = kk0 + u * n_ksub;
        if (kk >= nk) continue;
        float vf[kPL];
        load_lane<T, kPL>(vs + kk * D, lane, vf);
#pragma unroll
        for (int h = 0; h < kHPW; ++h) {
#pragma unroll
          for (int i = 0; i < kPL; ++i) acc[h][i] += pr[h][u] * vf[i];
        }
      }
    }
    __syncthreads();  // the stage is refilled next iteration
  }

  auto write_part = [&](int j, float mm, float ll, const float (&ac)[kPL]) {
    float* part = a.part + (static_cast<int64_t>(j) * a.n_splits + split) * part_stride(D);
    if (lane == 0) {
      part[0] = mm;
      part[1] = ll;
    }
    if constexpr (kPL % 4 == 0) {
      // 16-byte aligned: part_stride(D) and kPartHead are multiples of 4.
#pragma unroll
      for (int i = 0; i < kPL; i += 4) {
        reinterpret_cast<float4*>(part + kPartHead + lane * kPL)[i / 4] =
            make_float4(ac[i], ac[i + 1], ac[i + 2], ac[i + 3]);
      }
    } else {
#pragma unroll
      for (int i = 0; i < kPL; ++i) part[kPartHead + lane * kPL + i] = ac[i];
    }
  };
  if (n_ksub == 1) {
#pragma unroll
    for (int h = 0; h < kHPW; ++h) write_part(heads[h], m[h], l[h], acc[h]);
    return;
  }
  // r < 8: the n_ksub warps of each head merge through shared memory (kHPW == 1).
  float* red = reinterpret_cast<float*>(smem);
  float* mine = red + warp * (D + 2);
  if (lane == 0) {
    mine[0] = m[0];
    mine[1] = l[0];
  }
#pragma unroll
  for (int i = 0; i < kPL; ++i) mine[2 + lane * kPL + i] = acc[0][i];
  __syncthreads();
  if (ksub != 0) return;
  float mx = -INFINITY;
  for (int sw = 0; sw < n_ksub; ++sw) {
    const float* o = red + (warp + sw * r) * (D + 2);
    if (o[1] > 0.0f) mx = fmaxf(mx, o[0]);
  }
  float ll = 0.0f, ac[kPL];
#pragma unroll
  for (int i = 0; i < kPL; ++i) ac[i] = 0.0f;
  for (int sw = 0; sw < n_ksub; ++sw) {
    const float* o = red + (warp + sw * r) * (D + 2);
    if (!(o[1] > 0.0f)) continue;
    const float w = __expf(o[0] - mx);
    ll += o[1] * w;
#pragma unroll
    for (int i = 0; i < kPL; ++i) ac[i] += o[2 + lane * kPL + i] * w;
  }
  write_part(heads[0], mx, ll, ac);
}

// ---- Decode on the tensor cores: groups of 8 or 16 query heads (full layers), f16 cache ----
// The group's query heads are the 16 rows (zero past r) of an m16n8k16 product: per tile of 16
// keys every warp computes S = Q·Kᵀ (16 × 16, all of D: the Q fragments live in registers, the
// K tile is read from shared memory once per warp) and the same online softmax, then its own
// D/8 output columns of P·V. Per key the shared-memory traffic is ~8 K reads + 1 V read instead
// of the CUDA-core kernel's 8 K + 8 V, and the FMAs move to the tensor cores. Rows of the
// staged tiles are padded by 8 halves so that the fragments' loads hit distinct banks; partial
// tiles are zero-filled (cp.async with no source bytes).
constexpr int kMmaKeys = 16;
constexpr int kMmaStages = 3;

template <int D>
constexpr int mma_smem_bytes() {
  return kMmaStages * 2 * kMmaKeys * (D + 8) * 2;
}

__device__ __forceinline__ void cp_async16_zfill(void* smem, const void* gmem, bool valid) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  const int n = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(gmem), "r"(n)
               : "memory");
}

__device__ __forceinline__ uint32_t pack_half2(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}

__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Full layers whose V is the raw K projection (AttnArgs::k_shared_w): K = RoPE(V ⊙ w_k), and
// the proportional RoPE turns only the pairs below D/8 (dims [0, D/8) and [D/2, D/2 + D/8));
// on every other dim K = V ⊙ w_k, so the scores there are (q ⊙ w_k)·V and the split decode reads
// only K's D/4 rotated dims (kept contiguous in its stage) besides V: 5/8 of the K/V bytes.
template <int D>
__device__ __forceinline__ bool shared_kv_rotated(int d) {
  return (d & (D / 2 - 1)) < D / 8;
}
// A rotated dim's column in the compact K rows of the stage.
template <int D>
__device__ __forceinline__ int shared_kv_col(int d) {
  return d < D / 2 ? d : d - D / 2 + D / 8;
}

// The Q fragments (A of m16n8k16, row-major: rows qr and qr + 8, columns qc, qc + 1 (+ 8)) of
// kKS k-steps from column c0 on, from the prologue's q in global memory. The block first stages
// the group's Q as f16 rows (zero past r) in qs ([16][kRowH] halves of shared memory) with
// coalesced 16-byte loads, all in flight at once, so every warp then reads its fragments from
// shared memory (reading them from global memory was 256 scattered loads per lane). Block-wide,
// with a barrier at the end (qs is free again).
template <int D, int kKS, bool kShared = false>
__device__ __forceinline__ void mma_q_fragments_staged(const AttnArgs& a, int g, int r, int qr,
                                                       int qc, int c0, __half* qs,
                                                       uint32_t (&qa)[kKS][4]) {
  constexpr int kRowH = D + 8;
  constexpr int kQLoads = 16 * D / 4 / (kDecWarps * 32);
  float4 v[kQLoads];
#pragma unroll
  for (int u = 0; u < kQLoads; ++u) {
    const int i = threadIdx.x + u * kDecWarps * 32, row = i / (D / 4), c4 = i % (D / 4);
    // A plain load (the prologue wrote q; a non-coherent one may be hoisted above pdl_wait).
    v[u] = row < r ? reinterpret_cast<const float4*>(a.q + static_cast<int64_t>(g * r + row) * D)[c4]
                   : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if constexpr (kShared) {
      // The pass-through dims meet V, not K: q·K = (q ⊙ w_k)·V there (shared_kv_rotated).
      if (!shared_kv_rotated<D>(4 * c4)) {
        const float4 w = reinterpret_cast<const float4*>(a.k_shared_w)[c4];
        v[u].x *= w.x;
        v[u].y *= w.y;
        v[u].z *= w.z;
        v[u].w *= w.w;
      }
    }
  }
#pragma unroll
  for (int u = 0; u < kQLoads; ++u) {
    const int i = threadIdx.x + u * kDecWarps * 32, row = i / (D / 4), c4 = i % (D / 4);
    uint32_t* dst = reinterpret_cast<uint32_t*>(qs + row * kRowH + 4 * c4);
    dst[0] = pack_half2(v[u].x, v[u].y);
    dst[1] = pack_half2(v[u].z, v[u].w);
  }
  __syncthreads();
#pragma unroll
  for (int ks = 0; ks < kKS; ++ks) {
    const __half* q0 = qs + qr * kRowH + c0 + ks * 16 + qc;
    const __half* q8 = q0 + 8 * kRowH;
    qa[ks][0] = *reinterpret_cast<const uint32_t*>(q0);
    qa[ks][1] = *reinterpret_cast<const uint32_t*>(q8);
    qa[ks][2] = *reinterpret_cast<const uint32_t*>(q0 + 8);
    qa[ks][3] = *reinterpret_cast<const uint32_t*>(q8 + 8);
  }
  __syncthreads();  // qs's stage is filled next
}

// One tile of kKeys keys from k0 (K rows into ks, V rows into vs, kRowH-half rows; keys at or
// past ke zero-filled) as one cp.async group. kShared (the shared-K/V form): only K's rotated
// dims, D/4 per key in compact rows of D/4 + 8 halves; a V piece on a rotated dim also copies
// K's (the same offsets: a separate loop over K's pieces kept its own addresses live across
// the split form's main loop, +45 registers).
template <int D, int kKeys, bool kShared = false>
__device__ __forceinline__ void mma_load_tile(const AttnArgs& a, const __half* kc,
                                              const __half* vc, __half* ks, __half* vs, int k0,
                                              int ke) {
  constexpr int kRowH = D + 8, kRowK = D / 4 + 8;
  constexpr int kChunks = D / 8;  // 16-byte pieces per row
#pragma unroll 4
  for (int c = threadIdx.x; c < kKeys * kChunks; c += kDecWarps * 32) {
    const int kk = c / kChunks, off = (c % kChunks) * 8;
    const int kp = k0 + kk;
    const bool valid = kp < ke;
    const int64_t slot = valid ? (a.ring ? kp % a.n_slots : kp) : 0;
    if constexpr (!kShared) cp_async16_zfill(ks + kk * kRowH + off, kc + slot * D + off, valid);
    cp_async16_zfill(vs + kk * kRowH + off, vc + slot * D + off, valid);
    if constexpr (kShared) {
      if (shared_kv_rotated<D>(off)) {
        cp_async16_zfill(ks + kk * kRowK + shared_kv_col<D>(off), kc + slot * D + off, valid);
      }
    }
  }
  cp_async_commit();
}

// The online softmax's step for a tile of the tensor-core forms: the rows' running maxima m0/m1
// (rows qr, qr + 8) become mx0/mx1 (this lane's maxima over the tile and the old ones, reduced
// here over the row's four lanes), and the sums l0/l1 and the accumulators are rescaled by
// exp(old - new).
template <int kNB>
__device__ __forceinline__ void mma_softmax_rescale(float mx0, float mx1, float& m0, float& m1,
                                                    float& l0, float& l1, float (&acc)[kNB][4]) {
#pragma unroll
  for (int o = 1; o <= 2; o <<= 1) {
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, o));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, o));
  }
  const float c0 = expf(m0 - mx0), c1 = expf(m1 - mx1);
  m0 = mx0;
  m1 = mx1;
  l0 *= c0;
  l1 *= c1;
#pragma unroll
  for (int j = 0; j < kNB; ++j) {
    acc[j][0] *= c0;
    acc[j][1] *= c0;
    acc[j][2] *= c1;
    acc[j][3] *= c1;
  }
}

// The parts (m, l, this warp's D/8 output columns) of the group's rows qr and qr + 8 (those
// below r) for this split; l0/l1 are this lane's sums, reduced over the row's four lanes here.
template <int D, int kNB>
__device__ __forceinline__ void mma_write_parts(const AttnArgs& a, int g, int r, int split,
                                                int qr, int qc, float m0, float m1, float l0,
                                                float l1, const float (&acc)[kNB][4]) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int o = 1; o <= 2; o <<= 1) {
    l0 += __shfl_xor_sync(0xffffffffu, l0, o);
    l1 += __shfl_xor_sync(0xffffffffu, l1, o);
  }
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int row = qr + 8 * half;
    if (row >= r) continue;
    float* part = a.part + (static_cast<int64_t>(g * r + row) * a.n_splits + split) * part_stride(D);
    if (warp == 0 && (lane & 3) == 0) {
      part[0] = half ? m1 : m0;
      part[1] = half ? l1 : l0;
    }
#pragma unroll
    for (int j = 0; j < kNB; ++j) {
      const int col = warp * (D / kDecWarps) + j * 8 + qc;
      *reinterpret_cast<float2*>(part + kPartHead + col) = make_float2(acc[j][2 * half], acc[j][2 * half + 1]);
    }
  }
}

template <int D, bool kRows>
__global__ void __launch_bounds__(kDecWarps * 32, 1) attention_decode_mma_kernel(AttnArgs a_in) {
  const AttnArgs a = kRows ? row_view(a_in, blockIdx.z) : a_in;
  constexpr int kRowH = D + 8;          // halves per staged row
  constexpr int kKS = D / 16;           // k-steps of S = Q·Kᵀ
  constexpr int kNB = D / 8 / kDecWarps;  // n-blocks of 8 output columns per warp
  extern __shared__ __align__(16) unsigned char dsmem[];
  __half* stage_base = reinterpret_cast<__half*>(dsmem);  // [stage][K|V][16][kRowH]
  pdl_trigger();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int r = a.n_heads / a.n_kv;
  const int g = blockIdx.x, split = blockIdx.y;
  const int qr = lane >> 2, qc = 2 * (lane & 3);  // fragment row and column pair
  int kb, ke, n_tiles;  // keys [kb, ke)
  decode_block_range<kMmaKeys>(a, split, kb, ke, n_tiles);
  if (kRows && n_tiles == 0) return;  // a rows pass's empty split: no part (the merge skips it)
  const __half* kc = static_cast<const __half*>(a.k_cache) + static_cast<int64_t>(g) * a.n_slots * D;
  const __half* vc = static_cast<const __half*>(a.v_cache) + static_cast<int64_t>(g) * a.n_slots * D;
  auto load_stage = [&](int stage, int tile) {
    __half* ks = stage_base + static_cast<int64_t>(stage) * 2 * kMmaKeys * kRowH;
    mma_load_tile<D, kMmaKeys>(a, kc, vc, ks, ks + kMmaKeys * kRowH, kb + tile * kMmaKeys, ke);
  };
  // Q fragments go through the last stage (free until the first stages_next): from the
  // prologue's q.
  begin_and_wait(a, kb, ke, [&] { stages_begin<kMmaStages>(n_tiles, load_stage); });
  __half* q_stage = stage_base + (kMmaStages - 1) * 2 * kMmaKeys * kRowH;
  uint32_t qa[kKS][4];
  mma_q_fragments_staged<D, kKS>(a, g, r, qr, qc, 0, q_stage, qa);
  float acc[kNB][4];
#pragma unroll
  for (int j = 0; j < kNB; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;  // rows qr, qr + 8

  for (int it = 0; it < n_tiles; ++it) {
    stages_next<kMmaStages>(it, n_tiles, load_stage);
    const __half* ks = stage_base + static_cast<int64_t>(it % kMmaStages) * 2 * kMmaKeys * kRowH;
    const __half* vs = ks + kMmaKeys * kRowH;
    const int nk = min(kMmaKeys, ke - (kb + it * kMmaKeys));
    // S (16 rows × 16 keys): two n-blocks of 8 keys. B (col-major k × n) = K rows.
    float sc[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
    for (int nb = 0; nb < 2; ++nb) {
      const __half* krow = ks + (nb * 8 + qr) * kRowH + qc;
#pragma unroll
      for (int kq = 0; kq < kKS; ++kq) {
        const uint32_t b0 = *reinterpret_cast<const uint32_t*>(krow + kq * 16);
        const uint32_t b1 = *reinterpret_cast<const uint32_t*>(krow + kq * 16 + 8);
        mma16816(sc[nb], qa[kq], b0, b1);
      }
    }
    // Online softmax over the tile's valid keys (columns nb·8 + qc, + 1).
    float mx0 = m0, mx1 = m1;
#pragma unroll
    for (int nb = 0; nb < 2; ++nb) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const bool ok = nb * 8 + qc + e < nk;
        sc[nb][e] = ok ? sc[nb][e] : -INFINITY;
        sc[nb][2 + e] = ok ? sc[nb][2 + e] : -INFINITY;
        mx0 = fmaxf(mx0, sc[nb][e]);
        mx1 = fmaxf(mx1, sc[nb][2 + e]);
      }
    }
    mma_softmax_rescale<kNB>(mx0, mx1, m0, m1, l0, l1, acc);
    float pr[2][4];
#pragma unroll
    for (int nb = 0; nb < 2; ++nb) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        pr[nb][e] = expf(sc[nb][e] - m0);  // -inf (masked) gives 0
        pr[nb][2 + e] = expf(sc[nb][2 + e] - m1);
        l0 += pr[nb][e];
        l1 += pr[nb][2 + e];
      }
    }
    // P as the A fragment (rows × 16 keys), then O += P·V over this warp's columns. B = V tile
    // (row-major keys × columns) through ldmatrix.trans: lanes 0-15 give the rows of keys 0-15.
    uint32_t pa[4] = {pack_half2(pr[0][0], pr[0][1]), pack_half2(pr[0][2], pr[0][3]),
                      pack_half2(pr[1][0], pr[1][1]), pack_half2(pr[1][2], pr[1][3])};
#pragma unroll
    for (int j = 0; j < kNB; ++j) {
      const int col = warp * (D / kDecWarps) + j * 8;
      const __half* vrow = vs + (lane & 15) * kRowH + col;
      const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(vrow));
      uint32_t b0, b1;
      asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];"
                   : "=r"(b0), "=r"(b1)
                   : "r"(addr));
      mma16816(acc[j], pa, b0, b1);
    }
    __syncthreads();  // the stage is refilled next iteration
  }
  mma_write_parts<D, kNB>(a, g, r, split, qr, qc, m0, m1, l0, l1, acc);
}

// The split form (CudaTuning::attn_form 2; by default for long key ranges): tiles of kMma2Keys (16 or 32) keys, and
// S = Q·Kᵀ split over the warps instead of computed whole by each: warp w computes the 16 × 8
// block of keys 8·(w % kNBS) .. +8 over the part w / kNBS of D, the parts meet in shared
// memory, and every warp then runs the same online softmax over the tile's scores and its own
// D/8 output columns of P·V. Per 32 keys a warp issues 16 + 2·D/64 products where the form
// above issues 2·(2·D/16 + D/64) (12B full layers: 32 vs 144): at depth the form above is bound
// by the tensor-core work of its eight identical S products (42 µs per 64 MB full layer of the
// 12B at depth 32768, 1.5 TB/s). Two barriers per tile: "tile landed, previous tile done"
// (after which the stage of tile it - 1 is refilled with tile it + kStages - 1) and "S parts
// written".
template <int kKeys>
constexpr int mma2_srow() {
  return kKeys + 4;  // floats per row of the S parts (fewer bank conflicts)
}
// Halves per staged K row: all of D, or the D/4 rotated dims of the shared-K/V form.
template <int D, bool kShared>
constexpr int mma2_krow() {
  return (kShared ? D / 4 : D) + 8;
}
template <int D, int kKeys, int kStages, bool kShared>
constexpr int mma2_smem_bytes() {
  return kStages * kKeys * (mma2_krow<D, kShared>() + D + 8) * 2 +
         (64 / kKeys) * 16 * mma2_srow<kKeys>() * 4;
}

template <int D, int kMma2Keys, int kMma2Stages, bool kShared, bool kRows>
__global__ void __launch_bounds__(kDecWarps * 32, 1) attention_decode_mma2_kernel(AttnArgs a_in) {
  const AttnArgs a = kRows ? row_view(a_in, blockIdx.z) : a_in;
  constexpr int kNBS = kMma2Keys / 8;      // n-blocks of 8 keys in S
  constexpr int kParts = kDecWarps / kNBS;  // parts of D whose S products meet in shared memory
  constexpr int kKS2 = kMma2Keys / 16;     // k-steps of P·V per tile
  constexpr int kMma2SRow = mma2_srow<kMma2Keys>();
  constexpr int kRowH = D + 8;             // halves per staged V row
  constexpr int kRowK = mma2_krow<D, kShared>();  // halves per staged K row
  constexpr int kKSW = D / 16 / kParts;    // k-steps of this warp's part of S = Q·Kᵀ
  static_assert(kKSW % 2 == 0, "two accumulator chains");
  constexpr int kNB = D / 8 / kDecWarps;   // n-blocks of 8 output columns per warp
  static_assert(kNB % 2 == 0, "ldmatrix.x4 takes two n-blocks");
  constexpr int kStageH = kMma2Keys * (kRowK + kRowH);  // halves per stage (K then V)
  static_assert(kStageH >= 16 * kRowH, "the queries are staged through one stage");
  extern __shared__ __align__(16) unsigned char dsmem[];
  __half* stage_base = reinterpret_cast<__half*>(dsmem);
  float* s_half = reinterpret_cast<float*>(dsmem + kMma2Stages * kStageH * 2);  // [kParts][16][SRow]
  pdl_trigger();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int nbs = warp % kNBS, dh = warp / kNBS;  // S: keys 8·nbs .. +8, D part dh
  const int r = a.n_heads / a.n_kv;
  const int g = blockIdx.x, split = blockIdx.y;
  const int qr = lane >> 2, qc = 2 * (lane & 3);
  int kb, ke, n_tiles;  // keys [kb, ke)
  decode_block_range<kMma2Keys>(a, split, kb, ke, n_tiles);
  if (kRows && n_tiles == 0) return;  // a rows pass's empty split: no part (the merge skips it)

  const __half* kc = static_cast<const __half*>(a.k_cache) + static_cast<int64_t>(g) * a.n_slots * D;
  const __half* vc = static_cast<const __half*>(a.v_cache) + static_cast<int64_t>(g) * a.n_slots * D;
  auto load_stage = [&](int stage, int tile) {
    __half* ks = stage_base + static_cast<int64_t>(stage) * kStageH;
    mma_load_tile<D, kMma2Keys, kShared>(a, kc, vc, ks, ks + kMma2Keys * kRowK,
                                         kb + tile * kMma2Keys, ke);
  };
  // The stages_begin of this form (tiles 0 .. kStages-2).
  auto begin = [&]() {
#pragma unroll
    for (int s0 = 0; s0 < kMma2Stages - 1; ++s0) {
      if (s0 < n_tiles) {
        load_stage(s0, s0);
      } else {
        cp_async_commit();
      }
    }
  };
  // Q fragments of this warp's part of D through the last stage, as in the form above (the
  // loop's first barrier comes before that stage is refilled).
  begin_and_wait(a, kb, ke, begin);
  __half* q_stage = stage_base + (kMma2Stages - 1) * kStageH;
  uint32_t qa[kKSW][4];
  mma_q_fragments_staged<D, kKSW, kShared>(a, g, r, qr, qc, dh * (D / kParts), q_stage, qa);
  float acc[kNB][4];
#pragma unroll
  for (int j = 0; j < kNB; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;  // rows qr, qr + 8

  for (int it = 0; it < n_tiles; ++it) {
    cp_async_wait<kMma2Stages - 2>();  // tile it has landed (this thread's copies)
    __syncthreads();                   // ... everyone's; and tile it - 1 is done with
    {
      const int nxt = it + kMma2Stages - 1;
      if (nxt < n_tiles) {
        load_stage(nxt % kMma2Stages, nxt);
      } else {
        cp_async_commit();
      }
    }
    const __half* ks = stage_base + static_cast<int64_t>(it % kMma2Stages) * kStageH;
    const __half* vs = ks + kMma2Keys * kRowK;
    const int nk = min(kMma2Keys, ke - (kb + it * kMma2Keys));
    // This warp's part of S: keys 8·nbs + qr (B = K rows), D part dh; two accumulators so that
    // consecutive products do not wait for each other. The shared-K/V form takes a k-step's B
    // from the compact K rows on the rotated dims and from the V rows on the others.
    {
      float s0[4] = {0.0f, 0.0f, 0.0f, 0.0f}, s1[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      const int key = nbs * 8 + qr, d_part = dh * (D / kParts);
      // A part is a half or a quarter of D: it rotates on its first D/8 dims when it starts a
      // half (shared_kv_rotated), and those sit at shared_kv_col in the compact K rows.
      const bool rot_part = (d_part & (D / 2 - 1)) == 0;
      const __half* kbase = ks + key * kRowK + (kShared ? (d_part >= D / 2 ? D / 8 : 0) : d_part) + qc;
      const __half* vbase = vs + key * kRowH + d_part + qc;
      auto b_of = [&](int kq) -> const __half* {
        if constexpr (kShared) {
          return kq * 16 < D / 8 && rot_part ? kbase + kq * 16 : vbase + kq * 16;
        } else {
          return kbase + kq * 16;
        }
      };
#pragma unroll
      for (int kq = 0; kq < kKSW; kq += 2) {
        const __half* b0 = b_of(kq);
        const __half* b1 = b_of(kq + 1);
        mma16816(s0, qa[kq], *reinterpret_cast<const uint32_t*>(b0),
                 *reinterpret_cast<const uint32_t*>(b0 + 8));
        mma16816(s1, qa[kq + 1], *reinterpret_cast<const uint32_t*>(b1),
                 *reinterpret_cast<const uint32_t*>(b1 + 8));
      }
      float* sh = s_half + dh * 16 * kMma2SRow;
      *reinterpret_cast<float2*>(sh + qr * kMma2SRow + nbs * 8 + qc) =
          make_float2(s0[0] + s1[0], s0[1] + s1[1]);
      *reinterpret_cast<float2*>(sh + (qr + 8) * kMma2SRow + nbs * 8 + qc) =
          make_float2(s0[2] + s1[2], s0[3] + s1[3]);
    }
    __syncthreads();
    // The tile's scores in A-fragment order: sc[ks2][nb][e] is row qr (e < 2) or qr + 8 (e >= 2),
    // key 16·ks2 + 8·nb + qc + (e & 1).
    float sc[kKS2][2][4];
    float mx0 = m0, mx1 = m1;
#pragma unroll
    for (int ks2 = 0; ks2 < kKS2; ++ks2) {
#pragma unroll
      for (int nb = 0; nb < 2; ++nb) {
        const int key = ks2 * 16 + nb * 8 + qc;
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) {
          const int row = qr + 8 * hr;
          float2 x = *reinterpret_cast<const float2*>(s_half + row * kMma2SRow + key);
#pragma unroll
          for (int pp = 1; pp < kParts; ++pp) {
            const float2 y = *reinterpret_cast<const float2*>(
                s_half + (pp * 16 + row) * kMma2SRow + key);
            x.x += y.x;
            x.y += y.y;
          }
          sc[ks2][nb][2 * hr] = key < nk ? x.x : -INFINITY;
          sc[ks2][nb][2 * hr + 1] = key + 1 < nk ? x.y : -INFINITY;
        }
        mx0 = fmaxf(mx0, fmaxf(sc[ks2][nb][0], sc[ks2][nb][1]));
        mx1 = fmaxf(mx1, fmaxf(sc[ks2][nb][2], sc[ks2][nb][3]));
      }
    }
    mma_softmax_rescale<kNB>(mx0, mx1, m0, m1, l0, l1, acc);
#pragma unroll
    for (int ks2 = 0; ks2 < kKS2; ++ks2) {
      float pr[2][4];
#pragma unroll
      for (int nb = 0; nb < 2; ++nb) {
        pr[nb][0] = expf(sc[ks2][nb][0] - m0);  // -inf (masked) gives 0
        pr[nb][1] = expf(sc[ks2][nb][1] - m0);
        pr[nb][2] = expf(sc[ks2][nb][2] - m1);
        pr[nb][3] = expf(sc[ks2][nb][3] - m1);
        l0 += pr[nb][0] + pr[nb][1];
        l1 += pr[nb][2] + pr[nb][3];
      }
      const uint32_t pa[4] = {pack_half2(pr[0][0], pr[0][1]), pack_half2(pr[0][2], pr[0][3]),
                              pack_half2(pr[1][0], pr[1][1]), pack_half2(pr[1][2], pr[1][3])};
      // B = V rows 16·ks2 .. +16 through ldmatrix.x4.trans: two n-blocks of 8 columns per load
      // (lanes 0-15 address the first's keys, 16-31 the second's).
#pragma unroll
      for (int j = 0; j < kNB; j += 2) {
        const int col = warp * (D / kDecWarps) + j * 8 + (lane >> 4) * 8;
        const __half* vrow = vs + (ks2 * 16 + (lane & 15)) * kRowH + col;
        const unsigned addr = static_cast<unsigned>(__cvta_generic_to_shared(vrow));
        uint32_t b0, b1, b2, b3;
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                     : "=r"(b0), "=r"(b1), "=r"(b2), "=r"(b3)
                     : "r"(addr));
        mma16816(acc[j], pa, b0, b1);
        mma16816(acc[j + 1], pa, b2, b3);
      }
    }
  }
  mma_write_parts<D, kNB>(a, g, r, split, qr, qc, m0, m1, l0, l1, acc);
}

// The split form's keys per tile × stages (CudaTuning::attn_split_shape): 0 = 16×3 (~100 KB of
// shared memory with whole K rows), 1 = 16×4, 2 = 32×2 (~133 KB), 3 = 32×3 (~200 KB). Reading
// whole K rows, 32×2 was the fastest (depth 32768, 12B / 31B tok/s: 273.1 / 127.3, 292.9 /
// 131.3, 296.0 / 133.4, 281.6 / 127.0); with the shared K/V rows the 16-key shapes fit two
// blocks per SM and 16×4 is the fastest (12B 350.1 / 325.0 / 312.7 vs 349.3 / 324.7 / 310.7 at
// depths 0 / 4096 / 32768; 31B 164.7 / 153.7 / 141.9 vs 164.2 / 152.5 / 141.1).
template <int D, int kKeys, int kStages, bool kShared>
void launch2(dim3 grid, const AttnArgs& a, cudaStream_t s) {
  const size_t smem = static_cast<size_t>(mma2_smem_bytes<D, kKeys, kStages, kShared>());
  if (a.rows) {
    launch(attention_decode_mma2_kernel<D, kKeys, kStages, kShared, true>, grid, kDecWarps * 32,
           smem, s, a);
  } else {
    launch(attention_decode_mma2_kernel<D, kKeys, kStages, kShared, false>, grid, kDecWarps * 32,
           smem, s, a);
  }
}

template <int D, bool kShared>
void mma2_setup() {
  auto set = [](auto kernel, int bytes) {
    GEM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  };
  auto shape = [&](auto keys, auto stages) {
    constexpr int kK = decltype(keys)::value, kS = decltype(stages)::value;
    set(attention_decode_mma2_kernel<D, kK, kS, kShared, false>, mma2_smem_bytes<D, kK, kS, kShared>());
    set(attention_decode_mma2_kernel<D, kK, kS, kShared, true>, mma2_smem_bytes<D, kK, kS, kShared>());
  };
  shape(std::integral_constant<int, 16>{}, std::integral_constant<int, 3>{});
  shape(std::integral_constant<int, 16>{}, std::integral_constant<int, 4>{});
  shape(std::integral_constant<int, 32>{}, std::integral_constant<int, 2>{});
  shape(std::integral_constant<int, 32>{}, std::integral_constant<int, 3>{});
}

// A launch's grid: (KV head, split), and the rows of a rows pass.
dim3 decode_grid(const AttnArgs& a) {
  return dim3(a.n_kv, a.n_splits, a.rows ? a.n_rows : 1);
}

template <int D, bool kShared>
void launch_mma2(const AttnArgs& a, const CudaTuning& t, cudaStream_t s) {
  const dim3 grid = decode_grid(a);
  switch (t.attn_split_shape) {
    case 0: launch2<D, 16, 3, kShared>(grid, a, s); break;
    case 1: launch2<D, 16, 4, kShared>(grid, a, s); break;
    case 2: launch2<D, 32, 2, kShared>(grid, a, s); break;
    default: launch2<D, 32, 3, kShared>(grid, a, s); break;
  }
}

template <int D>
void launch_decode_mma(const AttnArgs& a, const CudaTuning& t, cudaStream_t s) {
  if (mma_form(a, t) == 2) {
    if (shared_kv_on(a)) {
      launch_mma2<D, true>(a, t, s);
    } else {
      launch_mma2<D, false>(a, t, s);
    }
  } else {
    const size_t smem = static_cast<size_t>(mma_smem_bytes<D>());
    if (a.rows) {
      launch(attention_decode_mma_kernel<D, true>, decode_grid(a), kDecWarps * 32, smem, s, a);
    } else {
      launch(attention_decode_mma_kernel<D, false>, decode_grid(a), kDecWarps * 32, smem, s, a);
    }
  }
}

template <int D, typename T, int kHPW>
void launch_decode_hpw(const AttnArgs& a, cudaStream_t s) {
  if (a.rows) {
    launch(attention_decode_kernel<D, T, kHPW, true>, decode_grid(a), kDecWarps * 32, 0, s, a);
  } else {
    launch(attention_decode_kernel<D, T, kHPW, false>, decode_grid(a), kDecWarps * 32, 0, s, a);
  }
}

template <int D, typename T>
void launch_decode(const AttnArgs& a, cudaStream_t s) {
  const int r = a.n_heads / a.n_kv;
  if (r == 16) {
    launch_decode_hpw<D, T, 2>(a, s);
  } else {
    launch_decode_hpw<D, T, 1>(a, s);
  }
}

template <int D>
void decode_for(const AttnArgs& a, cudaStream_t s) {
  if (a.f16) {
    launch_decode<D, __half>(a, s);
  } else {
    launch_decode<D, float>(a, s);
  }
}

}  // namespace

void attention_setup() {
  static bool done = false;
  if (done) return;
  done = true;
  auto set = [](auto kernel, int bytes) {
    GEM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  };
  set(attention_decode_mma_kernel<256, false>, mma_smem_bytes<256>());
  set(attention_decode_mma_kernel<256, true>, mma_smem_bytes<256>());
  set(attention_decode_mma_kernel<512, false>, mma_smem_bytes<512>());
  set(attention_decode_mma_kernel<512, true>, mma_smem_bytes<512>());
  mma2_setup<256, false>();
  mma2_setup<512, false>();
  mma2_setup<256, true>();
  mma2_setup<512, true>();
}

// Groups of 8 or 16 heads fill the tensor-core forms' 16 rows well. (Groups of 2 and 4, the
// sliding layers, with the rows past r zero, were no faster.)
bool attention_decode_uses_mma(const AttnArgs& a, const CudaTuning& t) {
  const int r = a.n_kv > 0 ? a.n_heads / a.n_kv : 0;
  return attention_decode_supported(a) && a.f16 && (r == 8 || r == 16) &&
         (a.head_dim == 256 || a.head_dim == 512) && t.attn_form != 0;
}

bool attention_decode_shares_kv(const AttnArgs& a, const CudaTuning& t) {
  return attention_decode_uses_mma(a, t) && mma_form(a, t) == 2 && shared_kv_on(a);
}

bool attention_decode_supported(const AttnArgs& a) {
  const int r = a.n_kv > 0 ? a.n_heads / a.n_kv : 0;
  const bool pow2_dim = a.head_dim >= 32 && a.head_dim <= 512 && (a.head_dim & (a.head_dim - 1)) == 0;
  return a.n == 1 && a.tile_in_cache && a.n_heads == r * a.n_kv && pow2_dim &&
         (r == 1 || r == 2 || r == 4 || r == 8 || r == 16);
}

void launch_attention_decode(const AttnArgs& a, const CudaTuning& t, cudaStream_t s) {
  if (attention_decode_uses_mma(a, t)) {
    attention_setup();
    if (a.head_dim == 256) {
      launch_decode_mma<256>(a, t, s);
    } else {
      launch_decode_mma<512>(a, t, s);
    }
    return;
  }
  switch (a.head_dim) {
    case 32: decode_for<32>(a, s); break;
    case 64: decode_for<64>(a, s); break;
    case 128: decode_for<128>(a, s); break;
    case 256: decode_for<256>(a, s); break;
    default: decode_for<512>(a, s); break;
  }
}

}  // namespace gem::cuda
