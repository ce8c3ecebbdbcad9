// AVX-512 (F/BW/VL + VNNI) matmul tiles over the 16-row interleaved layout (packed.h). Compiled
// with AVX-512 target flags whatever the build's -march (CMakeLists.txt); called only when
// isa.cc found the features (simd_kernels.h).
//
// One 64-byte load holds a 4-element slice of 16 rows; vpdpbusd multiplies its unsigned bytes
// with the token's 4 signed activations broadcast to every lane and adds the 4 products into
// the row's int32 lane, exactly. Q4_0: the unsigned nibbles (0..15) go in directly and the -8
// offset is the block's exact correction -8·Σq, the accumulators' start value. Q8_0: the signed
// weights are shifted to unsigned (w ^ 0x80 = w + 128) and the start value is -128·Σq. Each
// block's integer sums are then scaled in f32: acc += float(isum) · (d_w[16 rows] · d_x).
#include "backend/cpu/simd_kernels.h"
#include "backend/cpu/token_tiles.h"

#ifdef GEM_CPU_X86

#if defined(__GNUC__) && !defined(__clang__)
// GCC 12's AVX-512 headers self-initialise their "undefined" vectors (`__m512 __Y = __Y;`),
// which -Wuninitialized reports at every inlined use (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <cstring>

#if !defined(__AVX512F__) || !defined(__AVX512BW__) || !defined(__AVX512VNNI__)
#error "matmul_avx512.cc needs its AVX-512 VNNI target flags (src/backend/cpu/CMakeLists.txt)"
#endif

namespace gem::cpu::detail {
namespace {

inline __m512i bcast32(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

// A unit's first token tile streams its weights from DRAM while it computes on them. Without
// help the core waits on each slice: a short eval's tiles ran memory then compute, one after the
// other (12B attn_q at 8 tokens, 2 threads: 0.56 ms cold against 0.25 ms for decode's stream and
// 0.28 ms hot). A software prefetch this far ahead on that first tile overlaps the two (8 tokens:
// ffn_gate/up 1.77 -> 1.27 ms, ffn_down 1.83 -> 1.29, attn_output 0.48 -> 0.36; 2-12 KiB swept,
// 3 KiB and less gave back part of it, 4-8 KiB were alike; bench/results/cpu.md). The
// later tiles find the unit in L1/L2 and prefetch nothing.
constexpr int64_t kPrefetchBytes = 4096;

// Rows of group g (16) against tokens t..t+T-1 over every block; pf: prefetch the weights ahead
// (the unit's first token tile).
template <bool kQ4, int T>
inline void micro_packed(const PackedMatrix& w, const QuantizedX& x, int64_t g, int t, float* y,
                         int64_t ldy, bool pf) {
  constexpr int kChunks = kQ4 ? 4 : 8;
  const int64_t nb = x.n_blocks;
  const uint8_t* wq = w.qs + g * nb * (kChunks * 64);
  const uint16_t* wd = w.d + g * nb * kPackRows;
  const int8_t* xq[T];
  const float* xd[T];
  const int32_t* xc[T];
  for (int j = 0; j < T; ++j) {
    xq[j] = x.qs + (t + j) * x.cols;
    xd[j] = x.d + (t + j) * nb;
    xc[j] = x.neg_corr + (t + j) * nb;
  }
  __m512 acc[T];
  for (int j = 0; j < T; ++j) acc[j] = _mm512_setzero_ps();
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i bias = _mm512_set1_epi8(static_cast<char>(0x80));
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* p = wq + b * (kChunks * 64);
    if (pf) {
      for (int k = 0; k < kChunks; ++k) {
        _mm_prefetch(reinterpret_cast<const char*>(p + kPrefetchBytes + 64 * k), _MM_HINT_T0);
      }
    }
    __m512i wv[8];  // the 8 unsigned 4-element slices of this block (x dword k pairs with wv[k])
    if constexpr (kQ4) {
      for (int k = 0; k < 4; ++k) {
        const __m512i v = _mm512_loadu_si512(p + 64 * k);
        wv[k] = _mm512_and_si512(v, m4);
        wv[4 + k] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
      }
    } else {
      for (int k = 0; k < 8; ++k) wv[k] = _mm512_xor_si512(_mm512_loadu_si512(p + 64 * k), bias);
    }
    const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wd + b * kPackRows)));
    for (int j = 0; j < T; ++j) {
      const int8_t* q = xq[j] + 32 * b;
      __m512i s0 = _mm512_set1_epi32(xc[j][b]);
      __m512i s1 = _mm512_setzero_si512();
      for (int k = 0; k < 8; k += 2) {
        s0 = _mm512_dpbusd_epi32(s0, wv[k], bcast32(q + 4 * k));
        s1 = _mm512_dpbusd_epi32(s1, wv[k + 1], bcast32(q + 4 * k + 4));
      }
      const __m512 s = _mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1));
      acc[j] = _mm512_fmadd_ps(s, _mm512_mul_ps(dw, _mm512_set1_ps(xd[j][b])), acc[j]);
    }
  }
  for (int j = 0; j < T; ++j) _mm512_storeu_ps(y + (t + j) * ldy + g * kPackRows, acc[j]);
}

// 4-token tiles (the register budget: 8 weight slices, 4 float accumulators and 2 int32 sums per
// token in flight; 8-token tiles spilled and were slower: ffn_gate/up at 8 tokens 2.76 against
// 1.83 ms), then the remainder (token_tiles.h).
template <bool kQ4>
void packed_tile(const PackedMatrix& w, const QuantizedX& x, int64_t g0, int64_t g1, int t0, int t1,
                 float* y, int64_t ldy) {
  for (int64_t g = g0; g < g1; ++g) {
    token_tiles(t0, t1,
                [&]<int T>(int t, bool first) { micro_packed<kQ4, T>(w, x, g, t, y, ldy, first); });
  }
}

// Q6_K (packed.h's super-block layout): rows of group g against tokens t..t+T-1. A block's 8
// slices of codes (0..63, unsigned) are its 4 low-nibble slices (group 2b) and 4 high-nibble
// ones (group 2b + 1), each its nibbles with the two high bits put in at bits 4..5. Each group's
// vpdpbusd sum starts at -32·Σq (the codes' offset), is multiplied by the row's int8 group
// scale, and the products add up over the super-block in int32: at most 256·32·127·128 < 2^31.
// Then acc += float(isum) · (d_w · d_x), once per super-block.
template <int T>
inline void micro_packed_q6k(const PackedMatrix& w, const QuantizedX& x, int64_t g, int t,
                             float* y, int64_t ldy, bool pf) {
  const int64_t ns = x.n_blocks;
  const int64_t ng = x.cols / 16;
  const uint8_t* wq = w.qs + g * ns * 3072;
  const int8_t* wsc = w.sc + g * ns * 256;
  const uint16_t* wd = w.d + g * ns * kPackRows;
  const int8_t* xq[T];
  const float* xd[T];
  const int32_t* xc[T];
  for (int j = 0; j < T; ++j) {
    xq[j] = x.qs + (t + j) * x.cols;
    xd[j] = x.d + (t + j) * ns;
    xc[j] = x.neg_corr + (t + j) * ng;
  }
  __m512 acc[T];
  for (int j = 0; j < T; ++j) acc[j] = _mm512_setzero_ps();
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i m30 = _mm512_set1_epi8(0x30);
  for (int64_t s = 0; s < ns; ++s) {
    __m512i isum[T];
    for (int j = 0; j < T; ++j) isum[j] = _mm512_setzero_si512();
    for (int b = 0; b < 8; ++b) {
      const uint8_t* p = wq + s * 3072 + 384 * b;
      if (pf) {
        for (int k = 0; k < 6; ++k) {
          _mm_prefetch(reinterpret_cast<const char*>(p + kPrefetchBytes + 64 * k), _MM_HINT_T0);
        }
      }
      __m512i lo[4], hi[4];
      for (int m = 0; m < 2; ++m) {
        const __m512i qh = _mm512_loadu_si512(p + 256 + 64 * m);
        // High bits at 4..5: slice 2m's (bits 0..1, 2..3), slice 2m + 1's (bits 4..5, 6..7).
        const __m512i h[4] = {_mm512_slli_epi16(qh, 4), _mm512_slli_epi16(qh, 2), qh,
                              _mm512_srli_epi16(qh, 2)};
        for (int c = 0; c < 2; ++c) {
          const int k = 2 * m + c;
          const __m512i v = _mm512_loadu_si512(p + 64 * k);
          // 0xF8: a | (b & c), with a the nibbles and c = 0x30.
          lo[k] = _mm512_ternarylogic_epi32(_mm512_and_si512(v, m4), h[2 * c], m30, 0xF8);
          hi[k] = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(v, 4), m4),
                                            h[2 * c + 1], m30, 0xF8);
        }
      }
      const int8_t* sc = wsc + s * 256 + 32 * b;
      const __m512i sc_lo = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sc)));
      const __m512i sc_hi =
          _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sc + 16)));
      for (int j = 0; j < T; ++j) {
        const int8_t* q = xq[j] + 256 * s + 32 * b;
        __m512i s_lo = _mm512_set1_epi32(xc[j][16 * s + 2 * b]);
        __m512i s_hi = _mm512_set1_epi32(xc[j][16 * s + 2 * b + 1]);
        for (int k = 0; k < 4; ++k) {
          s_lo = _mm512_dpbusd_epi32(s_lo, lo[k], bcast32(q + 4 * k));
          s_hi = _mm512_dpbusd_epi32(s_hi, hi[k], bcast32(q + 16 + 4 * k));
        }
        isum[j] = _mm512_add_epi32(
            isum[j], _mm512_add_epi32(_mm512_mullo_epi32(s_lo, sc_lo), _mm512_mullo_epi32(s_hi, sc_hi)));
      }
    }
    const __m512 dw =
        _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(wd + s * kPackRows)));
    for (int j = 0; j < T; ++j) {
      acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[j]), _mm512_mul_ps(dw, _mm512_set1_ps(xd[j][s])),
                               acc[j]);
    }
  }
  for (int j = 0; j < T; ++j) _mm512_storeu_ps(y + (t + j) * ldy + g * kPackRows, acc[j]);
}

void packed_tile_q6k(const PackedMatrix& w, const QuantizedX& x, int64_t g0, int64_t g1, int t0,
                     int t1, float* y, int64_t ldy) {
  for (int64_t g = g0; g < g1; ++g) {
    token_tiles(t0, t1,
                [&]<int T>(int t, bool first) { micro_packed_q6k<T>(w, x, g, t, y, ldy, first); });
  }
}

}  // namespace

PackedTileFn avx512_packed_fn(DType t) {
  switch (t) {
    case DType::kQ4_0: return packed_tile<true>;
    case DType::kQ8_0: return packed_tile<false>;
    case DType::kQ6_K: return packed_tile_q6k;
    default: return nullptr;
  }
}

}  // namespace gem::cpu::detail

#endif  // GEM_CPU_X86
