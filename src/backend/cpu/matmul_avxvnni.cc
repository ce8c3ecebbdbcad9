// AVX-VNNI (the VEX-encoded 256-bit vpdpbusd of AVX2-only CPUs: Intel Alder Lake and later
// client cores, Zen 4 and 5) matmul tiles over the 16-row interleaved layout (packed.h), for
// Q4_0 and Q8_0. Compiled with AVX2 + AVX-VNNI target flags whatever the build's -march
// (CMakeLists.txt); called only when isa.cc found the features (simd_kernels.h).
//
// The AVX-512 kernel (matmul_avx512.cc) at half its width: a 16-row group is two 8-row halves,
// and a half's 4-element slice k is the 32 bytes at chunk offset 64k + 32h, one row per 32-bit
// lane. vpdpbusd multiplies the unsigned weight bytes (Q4_0 nibbles; Q8_0 bytes shifted by
// 0x80) with the token's 4 activations broadcast and adds the 4 products into the row's lane,
// exactly; the block's sums start at its integer offset (-8·Σq, -128·Σq) and are scaled in f32
// as the AVX-512 kernel scales them, so each row's result is that kernel's bit for bit
// (AvxVnniEqualsAvx512BitForBit). Where the AVX2 path needs vpmaddubsw, int16 sums and vpmaddwd
// (about 2 instructions a slice and token), this needs one.
#include "backend/cpu/simd_kernels.h"

#ifdef GEM_CPU_X86

#include <immintrin.h>

#include <cstring>

#if !defined(__AVX2__) || !defined(__FMA__) || !defined(__F16C__) || !defined(__AVXVNNI__)
#error "matmul_avxvnni.cc needs its AVX2 + AVX-VNNI target flags (src/backend/cpu/CMakeLists.txt)"
#endif

#define GEM_CPU_SIMD256_HELPERS 1
#include "backend/cpu/token_tiles.h"

namespace gem::cpu::detail {
namespace {

// As the AVX-512 kernel: the first token tile of a unit prefetches its weights this far ahead.
constexpr int64_t kPrefetchBytes = 4096;

// Halves h0..h0+NH-1 of group g (NH = 2: decode, each 64-byte slice used whole when it arrives)
// against tokens t..t+T-1 over every block; pf: prefetch the weights ahead.
template <bool kQ4, int T, int NH>
inline void micro_vnni(const PackedMatrix& w, const QuantizedX& x, int64_t g, int h0, int t,
                       float* y, int64_t ldy, bool pf) {
  constexpr int kChunks = kQ4 ? 4 : 8;
  const int64_t nb = x.n_blocks;
  const uint8_t* wq = w.qs + g * nb * (kChunks * 64);
  const uint16_t* wd = w.d + g * nb * kPackRows + 8 * h0;
  const int8_t* xq[T];
  const float* xd[T];
  const int32_t* xc[T];
  for (int j = 0; j < T; ++j) {
    xq[j] = x.qs + (t + j) * x.cols;
    xd[j] = x.d + (t + j) * nb;
    xc[j] = x.neg_corr + (t + j) * nb;
  }
  __m256 acc[NH][T];
  for (int h = 0; h < NH; ++h)
    for (int j = 0; j < T; ++j) acc[h][j] = _mm256_setzero_ps();
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i bias = _mm256_set1_epi8(static_cast<char>(0x80));
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* p = wq + b * (kChunks * 64);
    if (pf) {
      for (int k = 0; k < kChunks; ++k) {
        _mm_prefetch(reinterpret_cast<const char*>(p + kPrefetchBytes + 64 * k), _MM_HINT_T0);
      }
    }
    for (int h = 0; h < NH; ++h) {
      const uint8_t* ph = p + 32 * (h0 + h);
      __m256i wv[8];  // the 8 unsigned 4-element slices of this block (x dword k pairs with wv[k])
      if constexpr (kQ4) {
        for (int k = 0; k < 4; ++k) {
          const __m256i v = loadu256(ph + 64 * k);
          wv[k] = _mm256_and_si256(v, m4);
          wv[4 + k] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
        }
      } else {
        for (int k = 0; k < 8; ++k) wv[k] = _mm256_xor_si256(loadu256(ph + 64 * k), bias);
      }
      const __m256 dw =
          _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wd + b * kPackRows + 8 * h)));
      for (int j = 0; j < T; ++j) {
        const int8_t* q = xq[j] + 32 * b;
        __m256i s0 = _mm256_set1_epi32(xc[j][b]);
        __m256i s1 = _mm256_setzero_si256();
        for (int k = 0; k < 8; k += 2) {
          s0 = _mm256_dpbusd_avx_epi32(s0, wv[k], bcast32(q + 4 * k));
          s1 = _mm256_dpbusd_avx_epi32(s1, wv[k + 1], bcast32(q + 4 * k + 4));
        }
        const __m256 s = _mm256_cvtepi32_ps(_mm256_add_epi32(s0, s1));
        acc[h][j] = _mm256_fmadd_ps(s, _mm256_mul_ps(dw, _mm256_set1_ps(xd[j][b])), acc[h][j]);
      }
    }
  }
  for (int h = 0; h < NH; ++h)
    for (int j = 0; j < T; ++j)
      _mm256_storeu_ps(y + (t + j) * ldy + g * kPackRows + 8 * (h0 + h), acc[h][j]);
}

// Decode: both halves in one pass. More tokens: 4-token tiles of a half (16 ymm: 8 weight
// slices, 4 accumulators, the sums), the first tile of each group prefetching, then the rest.
template <bool kQ4>
void packed_tile(const PackedMatrix& w, const QuantizedX& x, int64_t g0, int64_t g1, int t0, int t1,
                 float* y, int64_t ldy) {
  if (t1 - t0 == 1) {
    for (int64_t g = g0; g < g1; ++g) micro_vnni<kQ4, 1, 2>(w, x, g, 0, t0, y, ldy, true);
    return;
  }
  for (int64_t g = g0; g < g1; ++g) {
    for (int h = 0; h < 2; ++h) {
      token_tiles(t0, t1, [&]<int T>(int t, bool first) {
        micro_vnni<kQ4, T, 1>(w, x, g, h, t, y, ldy, first && h == 0);
      });
    }
  }
}

}  // namespace

PackedTileFn avxvnni_packed_fn(DType t) {
  switch (t) {
    case DType::kQ4_0: return packed_tile<true>;
    case DType::kQ8_0: return packed_tile<false>;
    default: return nullptr;
  }
}

}  // namespace gem::cpu::detail

#endif  // GEM_CPU_X86
