// AVX2+FMA+F16C matmul tiles. Compiled with AVX2 target flags (x86-64-v3) whatever the build's
// -march (CMakeLists.txt), and called only when isa.cc found the features (simd_kernels.h).
// On the file's layout an R-row × T-token register tile walks the blocks of R weight rows once,
// reusing each unpacked weight block for T tokens; on the packed layout (packed.h) a 16-row
// group is two 8-row halves, one row per 32-bit lane. Integer block dots use maddubs/madd,
// exactly; scales apply in f32.
#include "backend/cpu/simd_kernels.h"

#ifdef GEM_CPU_X86

#include <immintrin.h>

#include <cstring>

#include "base/dtype.h"

#if !defined(__AVX2__) || !defined(__FMA__) || !defined(__F16C__)
#error "matmul_avx2.cc needs its AVX2 target flags (src/backend/cpu/CMakeLists.txt)"
#endif

#define GEM_CPU_SIMD256_HELPERS 1
#include "backend/cpu/token_tiles.h"

namespace gem::cpu::detail {
namespace {

inline float load_half(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// 16 Q4_0 bytes -> 32 signed weights in [-8, 7]: low nibbles are elements 0..15 (low lane),
// high nibbles elements 16..31 (high lane).
inline __m256i unpack_q4_0(const uint8_t* qs) {
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m256i v = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(b, 4), b),
                                     _mm256_set1_epi8(0x0F));
  return _mm256_sub_epi8(v, _mm256_set1_epi8(8));
}

// Σ w·q over 32 int8 pairs as 8 int32 partial sums. maddubs wants one unsigned operand, so
// multiply |w| by q·sign(w); q is never -128 (activations round into [-127, 127]) and pairs sum
// to at most 2·128·127 < 2^15, so nothing saturates.
inline __m256i dot32(__m256i abs_w, __m256i w, __m256i q) {
  const __m256i p16 = _mm256_maddubs_epi16(abs_w, _mm256_sign_epi8(q, w));
  return _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
}

// ---- Q4_0 / Q8_0 (32-value blocks) ----

// Decode (one token) streams one weight row at a time (the rows of a matrix are contiguous, so
// that is one long sequential stream) and prefetches this far ahead, non-temporally (every
// weight byte is read once per token): measured from DRAM on the 12B's shapes, one row with a
// software prefetch beat 2 or 4 interleaved rows with or without one (Q4_0 ffn_gate/up, 1
// thread: 3.0 ms vs 4.2-6.1 ms), and NTA 3-8 KiB ahead beat T0 2 KiB by ~7% with 2 threads
// (bench/results/backend_cpu.md).
constexpr int64_t kDecodePrefetchBytes = 4096;
inline void prefetch_weights(const uint8_t* p) {
  _mm_prefetch(reinterpret_cast<const char*>(p + kDecodePrefetchBytes), _MM_HINT_NTA);
}

template <bool kQ4, int R, int T>
inline void micro_q32(const model::TensorView& w, const QuantizedX& x, int64_t r, int t, float* y,
                      int64_t ldy) {
  constexpr int64_t kBlockBytes = kQ4 ? sizeof(BlockQ4_0) : sizeof(BlockQ8_0);
  const uint64_t rb = w.row_bytes();
  const uint8_t* wr[R];
  for (int i = 0; i < R; ++i) wr[i] = w.data + (r + i) * rb;
  const int8_t* xq[T];
  const float* xd[T];
  for (int j = 0; j < T; ++j) {
    xq[j] = x.qs + (t + j) * x.cols;
    xd[j] = x.d + (t + j) * x.n_blocks;
  }
  __m256 acc[R][T];
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < T; ++j) acc[i][j] = _mm256_setzero_ps();
  for (int64_t b = 0; b < x.n_blocks; ++b) {
    __m256i q[T];
    for (int j = 0; j < T; ++j) q[j] = loadu256(xq[j] + 32 * b);
    for (int i = 0; i < R; ++i) {
      const uint8_t* blk = wr[i] + b * kBlockBytes;
      if constexpr (T == 1) {
        prefetch_weights(blk);
      }
      const float dw = load_half(blk);
      const __m256i wv = kQ4 ? unpack_q4_0(blk + 2) : loadu256(blk + 2);
      const __m256i aw = _mm256_sign_epi8(wv, wv);
      for (int j = 0; j < T; ++j) {
        const __m256 p = _mm256_cvtepi32_ps(dot32(aw, wv, q[j]));
        acc[i][j] = _mm256_fmadd_ps(p, _mm256_set1_ps(dw * xd[j][b]), acc[i][j]);
      }
    }
  }
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < T; ++j) y[(t + j) * ldy + r + i] = hsum(acc[i][j]);
}

// ---- Q4_0 in block pairs (x as Q4PairX records, simd_kernels.h) ----

// One 32-byte register per pair of weight blocks: block 2p's 16 nibble bytes in the low lane,
// block 2p+1's in the high lane. The unsigned nibbles (0..15) go into maddubs directly against
// the record's lo/hi halves (two products of at most 15·127 per int16, and the sum of the two
// maddubs at most 4·15·127 < 2^15: nothing saturates); the -8 offset is the exact integer
// correction corr = 8·Σq per block. Scales: [dw_2p ×4 | dw_2p+1 ×4] · d_x per lane.
struct Q4Pair {
  __m256i lo, hi;
  __m256 dw;
};

// kTail: the row's last, unpaired block (only 18 bytes may be read).
template <bool kTail>
inline Q4Pair load_q4_pair(const uint8_t* blk) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m128i dup = _mm_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3, 2, 3);
  __m256i v;
  uint16_t d0, d1 = 0;
  std::memcpy(&d0, blk, 2);
  if constexpr (kTail) {
    v = _mm256_zextsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2)));
  } else {
    v = _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(blk + sizeof(BlockQ4_0) + 2),
                            reinterpret_cast<const __m128i*>(blk + 2));
    std::memcpy(&d1, blk + sizeof(BlockQ4_0), 2);
  }
  Q4Pair w;
  w.lo = _mm256_and_si256(v, m4);
  w.hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
  const __m128i h = _mm_cvtsi32_si128(static_cast<int>(d0 | static_cast<uint32_t>(d1) << 16));
  w.dw = _mm256_cvtph_ps(_mm_shuffle_epi8(h, dup));
  return w;
}

// acc += (Σ nib·q - corr) · dw · dx, lanewise.
inline __m256 q4_pair_dot(const Q4Pair& w, const Q4PairX& x, __m256 acc) {
  const __m256i s16 = _mm256_add_epi16(
      _mm256_maddubs_epi16(w.lo, _mm256_load_si256(reinterpret_cast<const __m256i*>(x.lo))),
      _mm256_maddubs_epi16(w.hi, _mm256_load_si256(reinterpret_cast<const __m256i*>(x.hi))));
  const __m256i s32 = _mm256_sub_epi32(_mm256_madd_epi16(s16, _mm256_set1_epi16(1)),
                                       _mm256_load_si256(reinterpret_cast<const __m256i*>(x.corr)));
  return _mm256_fmadd_ps(_mm256_cvtepi32_ps(s32), _mm256_mul_ps(w.dw, _mm256_load_ps(x.d)), acc);
}

// Rows r..r+R-1 against tokens t..t+T-1 over every pair of blocks; the odd last block (if any)
// reads only its own 18 bytes.
template <int R, int T>
inline void micro_q4_pairs(const model::TensorView& w, const QuantizedX& x, int64_t r, int t,
                           float* y, int64_t ldy) {
  constexpr int64_t kPairBytes = 2 * sizeof(BlockQ4_0);
  const uint64_t rb = w.row_bytes();
  const uint8_t* wr[R];
  for (int i = 0; i < R; ++i) wr[i] = w.data + (r + i) * rb;
  const Q4PairX* xp[T];
  for (int j = 0; j < T; ++j) xp[j] = x.q4_pairs + (t + j) * x.n_pairs;
  __m256 acc[R][T];
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < T; ++j) acc[i][j] = _mm256_setzero_ps();
  const int64_t full = x.n_blocks / 2;
  for (int64_t p = 0; p < full; ++p) {
    for (int i = 0; i < R; ++i) {
      const uint8_t* pair = wr[i] + p * kPairBytes;
      if constexpr (T == 1) {
        prefetch_weights(pair);
      }
      const Q4Pair wp = load_q4_pair<false>(pair);
      for (int j = 0; j < T; ++j) acc[i][j] = q4_pair_dot(wp, xp[j][p], acc[i][j]);
    }
  }
  if (full < x.n_pairs) {
    for (int i = 0; i < R; ++i) {
      const Q4Pair wp = load_q4_pair<true>(wr[i] + full * kPairBytes);
      for (int j = 0; j < T; ++j) acc[i][j] = q4_pair_dot(wp, xp[j][full], acc[i][j]);
    }
  }
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < T; ++j) y[(t + j) * ldy + r + i] = hsum(acc[i][j]);
}

// ---- Q6_K (256-value super-blocks) ----

// Byte shuffles that spread scales (2p, 2p+1) over 8 bytes each, for group pair p = 0..7.
alignas(16) constexpr uint8_t kScalePairShuffle[8][16] = {
    {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1},
    {2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3},
    {4, 4, 4, 4, 4, 4, 4, 4, 5, 5, 5, 5, 5, 5, 5, 5},
    {6, 6, 6, 6, 6, 6, 6, 6, 7, 7, 7, 7, 7, 7, 7, 7},
    {8, 8, 8, 8, 8, 8, 8, 8, 9, 9, 9, 9, 9, 9, 9, 9},
    {10, 10, 10, 10, 10, 10, 10, 10, 11, 11, 11, 11, 11, 11, 11, 11},
    {12, 12, 12, 12, 12, 12, 12, 12, 13, 13, 13, 13, 13, 13, 13, 13},
    {14, 14, 14, 14, 14, 14, 14, 14, 15, 15, 15, 15, 15, 15, 15, 15},
};

// Σ_i sc_{i/16}·code_i·q_i over one super-block, for T tokens, added to isum (int32 lanes).
// Codes are unsigned 6-bit (0..63), so maddubs takes them directly; the -32 offset is applied
// once per super-block through the activation group sums (bsums).
template <int T>
inline void q6k_block(const BlockQ6_K* blk, const int8_t* const* xq, int64_t b, __m256i* isum) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i m30 = _mm256_set1_epi8(0x30);
  const __m128i sc8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk->scales));
  for (int h = 0; h < 2; ++h) {
    const __m256i qla = loadu256(blk->ql + 64 * h);
    const __m256i qlb = loadu256(blk->ql + 64 * h + 32);
    const __m256i qh = loadu256(blk->qh + 32 * h);
    // Codes of elements 128h + 32k + l, k = 0..3 (see q6k_code in base/dtype.h).
    const __m256i code[4] = {
        _mm256_or_si256(_mm256_and_si256(qla, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), m30)),
        _mm256_or_si256(_mm256_and_si256(qlb, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30)),
        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(qla, 4), m4), _mm256_and_si256(qh, m30)),
        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(qlb, 4), m4),
                        _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30)),
    };
    for (int k = 0; k < 4; ++k) {
      const int pair = 4 * h + k;  // groups 2·pair (low lane) and 2·pair+1 (high lane)
      const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(
          sc8, _mm_load_si128(reinterpret_cast<const __m128i*>(kScalePairShuffle[pair]))));
      for (int j = 0; j < T; ++j) {
        const __m256i p16 = _mm256_maddubs_epi16(code[k], loadu256(xq[j] + 256 * b + 32 * pair));
        isum[j] = _mm256_add_epi32(isum[j], _mm256_madd_epi16(p16, sc16));
      }
    }
  }
}

template <int R, int T>
inline void micro_q6_k(const model::TensorView& w, const QuantizedX& x, int64_t r, int t, float* y,
                       int64_t ldy) {
  const uint64_t rb = w.row_bytes();
  const int8_t* xq[T];
  const float* xd[T];
  const int16_t* xs[T];
  for (int j = 0; j < T; ++j) {
    xq[j] = x.qs + (t + j) * x.cols;
    xd[j] = x.d + (t + j) * x.n_blocks;
    xs[j] = x.bsums + (t + j) * (x.cols / 16);
  }
  __m256 acc[R][T];
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < T; ++j) acc[i][j] = _mm256_setzero_ps();
  for (int64_t b = 0; b < x.n_blocks; ++b) {
    for (int i = 0; i < R; ++i) {
      const auto* blk = reinterpret_cast<const BlockQ6_K*>(w.data + (r + i) * rb) + b;
      __m256i isum[T];
      for (int j = 0; j < T; ++j) isum[j] = _mm256_setzero_si256();
      q6k_block<T>(blk, xq, b, isum);
      const __m256i sc_all =
          _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk->scales)));
      const float dw = load_half(reinterpret_cast<const uint8_t*>(&blk->d));
      for (int j = 0; j < T; ++j) {
        // -32 · Σ_g sc_g · bsum_g
        const __m256i corr = _mm256_madd_epi16(sc_all, loadu256(xs[j] + 16 * b));
        const __m256i s = _mm256_sub_epi32(isum[j], _mm256_slli_epi32(corr, 5));
        acc[i][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(dw * xd[j][b]), acc[i][j]);
      }
    }
  }
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < T; ++j) y[(t + j) * ldy + r + i] = hsum(acc[i][j]);
}

// ---- F32 ----

template <int R, int T>
inline void micro_f32(const model::TensorView& w, const QuantizedX& x, int64_t r, int t, float* y,
                      int64_t ldy) {
  const float* wr[R];
  for (int i = 0; i < R; ++i) wr[i] = w.f32() + (r + i) * w.cols;
  const float* xt[T];
  for (int j = 0; j < T; ++j) xt[j] = x.xf + (t + j) * x.cols;
  __m256 acc[R][T];
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < T; ++j) acc[i][j] = _mm256_setzero_ps();
  int64_t c = 0;
  for (; c + 8 <= w.cols; c += 8) {
    __m256 wv[R];
    for (int i = 0; i < R; ++i) wv[i] = _mm256_loadu_ps(wr[i] + c);
    for (int j = 0; j < T; ++j) {
      const __m256 xv = _mm256_loadu_ps(xt[j] + c);
      for (int i = 0; i < R; ++i) acc[i][j] = _mm256_fmadd_ps(wv[i], xv, acc[i][j]);
    }
  }
  for (int i = 0; i < R; ++i) {
    for (int j = 0; j < T; ++j) {
      float s = hsum(acc[i][j]);
      for (int64_t cc = c; cc < w.cols; ++cc) s += wr[i][cc] * xt[j][cc];
      y[(t + j) * ldy + r + i] = s;
    }
  }
}


// ---- Tile drivers: token tiles of up to 4, rows in tiles of R with single-row remainders ----

enum class Kind { kF32, kQ4_0, kQ8_0, kQ6_K };

template <Kind K, int R, int T>
inline void micro(const model::TensorView& w, const QuantizedX& x, int64_t r, int t, float* y,
                  int64_t ldy) {
  if constexpr (K == Kind::kF32) micro_f32<R, T>(w, x, r, t, y, ldy);
  if constexpr (K == Kind::kQ4_0) micro_q4_pairs<R, T>(w, x, r, t, y, ldy);
  if constexpr (K == Kind::kQ8_0) micro_q32<false, R, T>(w, x, r, t, y, ldy);
  if constexpr (K == Kind::kQ6_K) micro_q6_k<R, T>(w, x, r, t, y, ldy);
}

template <Kind K, int R, int T>
inline void rows_pass(const model::TensorView& w, const QuantizedX& x, int64_t r0, int64_t r1,
                      int t, float* y, int64_t ldy) {
  int64_t r = r0;
  for (; r + R <= r1; r += R) micro<K, R, T>(w, x, r, t, y, ldy);
  for (; r < r1; ++r) micro<K, 1, T>(w, x, r, t, y, ldy);
}

// Register budget (16 ymm): R·T float accumulators plus T activation blocks plus the unpacked
// weights. Q6_K needs T more int32 sums per row, so it keeps one row per tile when T > 1.
template <Kind K>
void tile(const model::TensorView& w, const QuantizedX& x, int64_t r0, int64_t r1, int t0, int t1,
          float* y, int64_t ldy) {
  // Q4_0 (micro_q4_pairs): 2 rows × 4 tokens (3 × 4 spills 4 accumulators and was slower
  // end to end). Decode of Q4_0 and Q8_0: one prefetched row stream (kDecodePrefetchBytes).
  constexpr int kRowsWide = K == Kind::kQ6_K ? 1 : 2;
  constexpr int kDecodeRows = K == Kind::kQ6_K ? 2 : (K == Kind::kF32 ? 4 : 1);
  int t = t0;
  for (; t + 4 <= t1; t += 4) rows_pass<K, kRowsWide, 4>(w, x, r0, r1, t, y, ldy);
  switch (t1 - t) {
    case 3:
      rows_pass<K, kRowsWide, 3>(w, x, r0, r1, t, y, ldy);
      break;
    case 2:
      rows_pass<K, 2, 2>(w, x, r0, r1, t, y, ldy);
      break;
    case 1:  // decode
      rows_pass<K, kDecodeRows, 1>(w, x, r0, r1, t, y, ldy);
      break;
    default:
      break;
  }
}


// ---- The 16-row interleaved layout (packed.h), as two 8-row halves ----

// Half h (rows 8h..8h+7) of group g against tokens t..t+T-1 over every block. A half's slice k
// is the 32 bytes at chunk offset 64k + 32h: one row per 32-bit lane.
//   Q4_0: maddubs(nibbles 0..15, 4 activations broadcast) gives two int16 sums per row, each at
//   most 2·15·127; the block's 8 such products add up to at most 8·3810 = 30480 < 2^15, so they
//   are summed in int16 and widened once (madd with 1), plus the block's -8·Σq.
//   Q8_0: signed weights, so |w| times q·sign(w) (as micro_q32), widened per slice.
// pf: prefetch the group's bytes kPackedPrefetchBytes ahead (the first pass over the group, which
// streams it from DRAM; the AVX-512 tile's reason, matmul_avx512.cc).
constexpr int64_t kPackedPrefetchBytes = 4096;
template <bool kQ4, int T>
inline void micro_packed_half(const PackedMatrix& w, const QuantizedX& x, int64_t g, int h, int t,
                              float* y, int64_t ldy, bool pf) {
  constexpr int kChunks = kQ4 ? 4 : 8;
  const int64_t nb = x.n_blocks;
  const uint8_t* wq = w.qs + g * nb * (kChunks * 64) + 32 * h;
  const uint16_t* wd = w.d + g * nb * kPackRows + 8 * h;
  const int8_t* xq[T];
  const float* xd[T];
  const int32_t* xc[T];
  for (int j = 0; j < T; ++j) {
    xq[j] = x.qs + (t + j) * x.cols;
    xd[j] = x.d + (t + j) * nb;
    xc[j] = x.neg_corr + (t + j) * nb;
  }
  __m256 acc[T];
  for (int j = 0; j < T; ++j) acc[j] = _mm256_setzero_ps();
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* p = wq + b * (kChunks * 64);
    if (pf) {
      for (int k = 0; k < kChunks; ++k) {
        _mm_prefetch(reinterpret_cast<const char*>(p + kPackedPrefetchBytes + 64 * k), _MM_HINT_T0);
      }
    }
    __m256i wv[8];
    if constexpr (kQ4) {
      for (int k = 0; k < 4; ++k) {
        const __m256i v = loadu256(p + 64 * k);
        wv[k] = _mm256_and_si256(v, m4);
        wv[4 + k] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
      }
    } else {
      for (int k = 0; k < 8; ++k) wv[k] = loadu256(p + 64 * k);
    }
    const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wd + b * kPackRows)));
    for (int j = 0; j < T; ++j) {
      const int8_t* q = xq[j] + 32 * b;
      __m256i s32;
      if constexpr (kQ4) {
        __m256i s16 = _mm256_maddubs_epi16(wv[0], bcast32(q));
        for (int k = 1; k < 8; ++k) s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(wv[k], bcast32(q + 4 * k)));
        s32 = _mm256_add_epi32(_mm256_madd_epi16(s16, ones), _mm256_set1_epi32(xc[j][b]));
      } else {
        s32 = _mm256_setzero_si256();
        for (int k = 0; k < 8; ++k) {
          s32 = _mm256_add_epi32(s32, dot32(_mm256_sign_epi8(wv[k], wv[k]), wv[k], bcast32(q + 4 * k)));
        }
      }
      acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s32), _mm256_mul_ps(dw, _mm256_set1_ps(xd[j][b])), acc[j]);
    }
  }
  for (int j = 0; j < T; ++j) _mm256_storeu_ps(y + (t + j) * ldy + g * kPackRows + 8 * h, acc[j]);
}

// Decode of Q4_0 (one token): both halves in one pass over the group's bytes, so every 64-byte
// slice is used whole when it arrives; the activations are broadcast once per slice pair.
// Hot in L3 (attn_k, 1 thread, Zen 5): 47.8 GB/s against 42.7 for two passes of
// micro_packed_half<true, 1> and 19.7 for the file layout's pair tile. From DRAM it prefetches
// kPackedPrefetchBytes ahead, as the short evals' first tiles do.
inline void decode_packed_q4(const PackedMatrix& w, const QuantizedX& x, int64_t g, int t, float* y,
                             int64_t ldy) {
  const int64_t nb = x.n_blocks;
  const uint8_t* wq = w.qs + g * nb * 256;
  const uint16_t* wd = w.d + g * nb * kPackRows;
  const int8_t* xq = x.qs + t * x.cols;
  const float* xd = x.d + t * nb;
  const int32_t* xc = x.neg_corr + t * nb;
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i ones = _mm256_set1_epi16(1);
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* p = wq + b * 256;
    const int8_t* q = xq + 32 * b;
    for (int k = 0; k < 4; ++k) {
      _mm_prefetch(reinterpret_cast<const char*>(p + kPackedPrefetchBytes + 64 * k), _MM_HINT_T0);
    }
    __m256i s0 = _mm256_setzero_si256(), s1 = _mm256_setzero_si256();
    for (int k = 0; k < 4; ++k) {
      const __m256i xlo = bcast32(q + 4 * k), xhi = bcast32(q + 16 + 4 * k);
      const __m256i v0 = loadu256(p + 64 * k), v1 = loadu256(p + 64 * k + 32);
      s0 = _mm256_add_epi16(s0, _mm256_maddubs_epi16(_mm256_and_si256(v0, m4), xlo));
      s0 = _mm256_add_epi16(s0, _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(v0, 4), m4), xhi));
      s1 = _mm256_add_epi16(s1, _mm256_maddubs_epi16(_mm256_and_si256(v1, m4), xlo));
      s1 = _mm256_add_epi16(s1, _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(v1, 4), m4), xhi));
    }
    const __m256i c = _mm256_set1_epi32(xc[b]);
    const __m256 dx = _mm256_set1_ps(xd[b]);
    const __m256 d0 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wd + b * kPackRows)));
    const __m256 d1 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wd + b * kPackRows + 8)));
    acc0 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(_mm256_madd_epi16(s0, ones), c)),
                           _mm256_mul_ps(d0, dx), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(_mm256_madd_epi16(s1, ones), c)),
                           _mm256_mul_ps(d1, dx), acc1);
  }
  _mm256_storeu_ps(y + t * ldy + g * kPackRows, acc0);
  _mm256_storeu_ps(y + t * ldy + g * kPackRows + 8, acc1);
}

// 4-token tiles (16 ymm: 8 weight slices, 4 accumulators, the sums), then the remainder.
template <bool kQ4>
void packed_tile(const PackedMatrix& w, const QuantizedX& x, int64_t g0, int64_t g1, int t0, int t1,
                 float* y, int64_t ldy) {
  if (kQ4 && t1 - t0 == 1) {
    for (int64_t g = g0; g < g1; ++g) decode_packed_q4(w, x, g, t0, y, ldy);
    return;
  }
  for (int64_t g = g0; g < g1; ++g) {
    for (int h = 0; h < 2; ++h) {
      token_tiles(t0, t1, [&]<int T>(int t, bool first) {
        micro_packed_half<kQ4, T>(w, x, g, h, t, y, ldy, first && h == 0);
      });
    }
  }
}

// Q6_K on the packed layout (packed.h), half h (rows 8h..8h+7) of group g against tokens
// t..t+T-1. Per 32-value block: the 4 low-nibble slices (group 2b) and then the 4 high-nibble
// ones (group 2b + 1) are made into codes 0..63 (nibbles | high bits at 4..5), and
// vpmaddubsw(codes, 4 activations) gives two int16 sums per row, at most 2·63·127; two slices'
// add up to at most 32004 < 2^15 in int16, and vpmaddwd with the row's group scale (in both
// int16 halves of its lane) widens them. The codes' -32 offset: -32·(sc_2b·bsum_2b +
// sc_2b+1·bsum_2b+1), one more vpmaddwd per block. The super-block's int32 sum is exact and
// is scaled as the AVX-512 kernel scales it: acc += float(isum) · (d_w · d_x).
inline __m256i scale_pairs(const int8_t* sc) {  // 8 rows' int8 scales, each in both int16 halves
  const __m256i v = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(sc)));
  return _mm256_blend_epi16(v, _mm256_slli_epi32(v, 16), 0xAA);
}

// Halves h0..h0+NH-1 in one pass (decode: both, so that each 64-byte slice is used whole when it
// arrives and the activations are broadcast once for the two).
template <int T, int NH>
inline void micro_packed_q6k_half(const PackedMatrix& w, const QuantizedX& x, int64_t g, int h0,
                                  int t, float* y, int64_t ldy, bool pf) {
  const int64_t ns = x.n_blocks;
  const uint8_t* wq = w.qs + g * ns * 3072 + 32 * h0;
  const int8_t* wsc = w.sc + g * ns * 256 + 8 * h0;
  const uint16_t* wd = w.d + g * ns * kPackRows + 8 * h0;
  const int8_t* xq[T];
  const float* xd[T];
  const int16_t* xs[T];
  for (int j = 0; j < T; ++j) {
    xq[j] = x.qs + (t + j) * x.cols;
    xd[j] = x.d + (t + j) * ns;
    xs[j] = x.bsums + (t + j) * (x.cols / 16);
  }
  __m256 acc[NH][T];
  for (int h = 0; h < NH; ++h)
    for (int j = 0; j < T; ++j) acc[h][j] = _mm256_setzero_ps();
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i m30 = _mm256_set1_epi8(0x30);
  for (int64_t s = 0; s < ns; ++s) {
    __m256i isum[NH][T];
    for (int h = 0; h < NH; ++h)
      for (int j = 0; j < T; ++j) isum[h][j] = _mm256_setzero_si256();
    for (int b = 0; b < 8; ++b) {
      const uint8_t* pb = wq + s * 3072 + 384 * b;
      if (pf) {
        for (int k = 0; k < 6; ++k) {
          _mm_prefetch(reinterpret_cast<const char*>(pb + kPackedPrefetchBytes + 64 * k), _MM_HINT_T0);
        }
      }
      for (int h = 0; h < NH; ++h) {
        const uint8_t* p = pb + 32 * h;
        const int8_t* scb = wsc + s * 256 + 32 * b + 8 * h;
        const __m256i sc_lo = scale_pairs(scb), sc_hi = scale_pairs(scb + 16);
        const __m256i qh0 = loadu256(p + 256), qh1 = loadu256(p + 320);
        for (int part = 0; part < 2; ++part) {  // 0: low nibbles (group 2b), 1: high (2b + 1)
          __m256i c[4];
          for (int k = 0; k < 4; ++k) {
            const __m256i qh = k < 2 ? qh0 : qh1;
            // Slice k's high bits: its low-nibble element's at bits 4(k&1)..+1, the high
            // nibble's 2 above; moved to bits 4..5.
            const int sh = 4 * (k & 1) + 2 * part;
            const __m256i hb = sh == 0   ? _mm256_slli_epi16(qh, 4)
                               : sh == 2 ? _mm256_slli_epi16(qh, 2)
                               : sh == 4 ? qh
                                         : _mm256_srli_epi16(qh, 2);
            const __m256i v = loadu256(p + 64 * k);
            const __m256i nib = part == 0 ? v : _mm256_srli_epi16(v, 4);
            c[k] = _mm256_or_si256(_mm256_and_si256(nib, m4), _mm256_and_si256(hb, m30));
          }
          const __m256i sc = part == 0 ? sc_lo : sc_hi;
          for (int j = 0; j < T; ++j) {
            const int8_t* q = xq[j] + 256 * s + 32 * b + 16 * part;
            const __m256i p01 = _mm256_add_epi16(_mm256_maddubs_epi16(c[0], bcast32(q)),
                                                 _mm256_maddubs_epi16(c[1], bcast32(q + 4)));
            const __m256i p23 = _mm256_add_epi16(_mm256_maddubs_epi16(c[2], bcast32(q + 8)),
                                                 _mm256_maddubs_epi16(c[3], bcast32(q + 12)));
            isum[h][j] = _mm256_add_epi32(isum[h][j], _mm256_add_epi32(_mm256_madd_epi16(p01, sc),
                                                                       _mm256_madd_epi16(p23, sc)));
          }
        }
        const __m256i sc_both = _mm256_blend_epi16(sc_lo, sc_hi, 0xAA);  // (sc_2b, sc_2b+1) a row
        for (int j = 0; j < T; ++j) {
          int32_t pair;
          std::memcpy(&pair, xs[j] + 16 * s + 2 * b, 4);  // bsum_2b, bsum_2b+1
          const __m256i corr = _mm256_madd_epi16(sc_both, _mm256_set1_epi32(pair));
          isum[h][j] = _mm256_sub_epi32(isum[h][j], _mm256_slli_epi32(corr, 5));
        }
      }
    }
    for (int h = 0; h < NH; ++h) {
      const __m256 dw = _mm256_cvtph_ps(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(wd + s * kPackRows + 8 * h)));
      for (int j = 0; j < T; ++j) {
        acc[h][j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[h][j]),
                                    _mm256_mul_ps(dw, _mm256_set1_ps(xd[j][s])), acc[h][j]);
      }
    }
  }
  for (int h = 0; h < NH; ++h)
    for (int j = 0; j < T; ++j)
      _mm256_storeu_ps(y + (t + j) * ldy + g * kPackRows + 8 * (h0 + h), acc[h][j]);
}

void packed_tile_q6k(const PackedMatrix& w, const QuantizedX& x, int64_t g0, int64_t g1, int t0,
                     int t1, float* y, int64_t ldy) {
  if (t1 - t0 == 1) {
    for (int64_t g = g0; g < g1; ++g) micro_packed_q6k_half<1, 2>(w, x, g, 0, t0, y, ldy, true);
    return;
  }
  for (int64_t g = g0; g < g1; ++g) {
    for (int h = 0; h < 2; ++h) {
      token_tiles(t0, t1, [&]<int T>(int t, bool first) {
        micro_packed_q6k_half<T, 1>(w, x, g, h, t, y, ldy, first && h == 0);
      });
    }
  }
}

// ---- Activation rounding ----

// quantize_block32 (matmul.cc) eight lanes at a time: the same amax, the same products x·id and
// the same nearest-even rounding (vcvtps2dq under the default rounding mode, as nearbyint), so
// the same codes and scale, bit for bit (round_activations_simd is tested against
// round_activations).
inline float quantize_block32(const float* x, int8_t* q) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  __m256 v[4];
  for (int i = 0; i < 4; ++i) v[i] = _mm256_loadu_ps(x + 8 * i);
  const __m256 m01 = _mm256_max_ps(_mm256_and_ps(v[0], abs_mask), _mm256_and_ps(v[1], abs_mask));
  const __m256 m23 = _mm256_max_ps(_mm256_and_ps(v[2], abs_mask), _mm256_and_ps(v[3], abs_mask));
  const __m256 m = _mm256_max_ps(m01, m23);
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
  const float amax = _mm_cvtss_f32(m4);
  const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
  const __m256 vid = _mm256_set1_ps(id);
  const __m256i lo = _mm256_set1_epi32(-127), hi = _mm256_set1_epi32(127);
  __m256i c[4];
  for (int i = 0; i < 4; ++i) {
    const __m256i r = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], vid));
    c[i] = _mm256_min_epi32(_mm256_max_epi32(r, lo), hi);
  }
  // packs interleave the 128-bit lanes: restore element order with one dword permutation.
  const __m256i p8 =
      _mm256_packs_epi16(_mm256_packs_epi32(c[0], c[1]), _mm256_packs_epi32(c[2], c[3]));
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  const __m256i ordered = _mm256_permutevar8x32_epi32(p8, order);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(q), ordered);
  return fp16_to_f32(f32_to_fp16(amax / 127.0f));
}

}  // namespace

void avx2_quantize_q8(const float* x, int64_t n_blocks, int8_t* q, float* d) {
  for (int64_t b = 0; b < n_blocks; ++b) d[b] = quantize_block32(x + 32 * b, q + 32 * b);
}

PackedTileFn avx2_packed_fn(DType t) {
  switch (t) {
    case DType::kQ4_0: return packed_tile<true>;
    case DType::kQ8_0: return packed_tile<false>;
    case DType::kQ6_K: return packed_tile_q6k;
    default: return nullptr;
  }
}

TileFn avx2_tile_fn(DType t) {
  switch (t) {
    case DType::kF32:
      return tile<Kind::kF32>;
    case DType::kQ4_0:
      return tile<Kind::kQ4_0>;
    case DType::kQ8_0:
      return tile<Kind::kQ8_0>;
    case DType::kQ6_K:
      return tile<Kind::kQ6_K>;
    default:
      return nullptr;
  }
}

}  // namespace gem::cpu::detail

#endif  // GEM_CPU_X86
