// AVX-512 kernels of the fast ops (ops_kernels.h): the attention chunk tiles and the softmax
// row in 16-lane registers; the rest (norm dot products, GELU, f16 rounding: under 2 % of a
// prompt pass, bench/results/cpu.md) are the AVX2 table's. Compiled with AVX-512 target flags
// whatever the build's -march (CMakeLists.txt) and reached only through avx512_ops() after
// isa.cc found the features; nothing else here is visible outside this file.
//
// Scores: a tile of R query rows × K keys (R, K <= 4) keeps one 16-lane accumulator per (row,
// key) over 16-value steps; the 16 accumulators are then summed lane-wise by one transposing
// tree (reduce16), whose order for each accumulator is the same whatever tile it sits in. V:
// R <= 8 rows × 32 (or 16) dimensions, one FMA per key in key order.
#include "backend/cpu/ops_kernels.h"

#ifdef GEM_CPU_X86

#if defined(__GNUC__) && !defined(__clang__)
// GCC 12's AVX-512 headers self-initialise their "undefined" vectors (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#if !defined(__AVX512F__) || !defined(__AVX512BW__) || !defined(__AVX512VL__)
#error "ops_avx512.cc needs its AVX-512 target flags (src/backend/cpu/CMakeLists.txt)"
#endif

namespace gem::cpu::detail {
namespace {

template <bool kF16>
inline __m512 load16(const void* row, int i) {
  if constexpr (kF16) {
    return _mm512_cvtph_ps(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(row) + i)));
  } else {
    return _mm512_loadu_ps(static_cast<const float*>(row) + i);
  }
}

// Lane L of the result = the sum of the 16 lanes of a[idx(L)], idx(L) = {0, 8, 4, 12}[L / 4] +
// {0, 2, 1, 3}[L % 4] (an involution), each by the same tree: lanes l and l + 8, then the two
// 128-bit halves of that, then elements e and e + 2, then the last pair.
inline __m512 reduce16(const __m512* a) {
  __m512 t[8], u[4], v[2];
  for (int i = 0; i < 8; ++i) {
    t[i] = _mm512_add_ps(_mm512_shuffle_f32x4(a[i], a[i + 8], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_f32x4(a[i], a[i + 8], _MM_SHUFFLE(3, 2, 3, 2)));
  }
  for (int i = 0; i < 4; ++i) {
    u[i] = _mm512_add_ps(_mm512_shuffle_f32x4(t[i], t[i + 4], _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(t[i], t[i + 4], _MM_SHUFFLE(3, 1, 3, 1)));
  }
  for (int i = 0; i < 2; ++i) {
    v[i] = _mm512_add_ps(_mm512_unpacklo_ps(u[i], u[i + 2]), _mm512_unpackhi_ps(u[i], u[i + 2]));
  }
  return _mm512_add_ps(_mm512_shuffle_ps(v[0], v[1], _MM_SHUFFLE(1, 0, 1, 0)),
                       _mm512_shuffle_ps(v[0], v[1], _MM_SHUFFLE(3, 2, 3, 2)));
}
constexpr int kReduceSlot[16] = {0, 2, 1, 3, 8, 10, 9, 11, 4, 6, 5, 7, 12, 14, 13, 15};

// scores[r * kScoreStride + j] = scale · q_r·k_j for R rows × K keys; lane 4r + j of the
// reduction holds (r, j).
template <int R, int K, bool kF16>
inline void score_tile(const float* const* q, const void* const* k, int head_dim, float scale,
                       float* scores) {
  __m512 acc[R][K];
  for (int r = 0; r < R; ++r) {
    for (int j = 0; j < K; ++j) acc[r][j] = _mm512_setzero_ps();
  }
  for (int i = 0; i < head_dim; i += 16) {
    __m512 qv[R];
    for (int r = 0; r < R; ++r) qv[r] = _mm512_loadu_ps(q[r] + i);
    for (int j = 0; j < K; ++j) {
      const __m512 kv = load16<kF16>(k[j], i);
      for (int r = 0; r < R; ++r) acc[r][j] = _mm512_fmadd_ps(qv[r], kv, acc[r][j]);
    }
  }
  __m512 a[16];
  for (int s = 0; s < 16; ++s) a[s] = _mm512_setzero_ps();
  for (int r = 0; r < R; ++r) {
    for (int j = 0; j < K; ++j) a[kReduceSlot[4 * r + j]] = acc[r][j];
  }
  const __m512 dots = _mm512_mul_ps(reduce16(a), _mm512_set1_ps(scale));
  constexpr __mmask8 kKeys = static_cast<__mmask8>((1u << K) - 1);
  for (int r = 0; r < R; ++r) {
    const __m128 row = _mm512_extractf32x4_ps(dots, r);
    if constexpr (K == 4) {
      _mm_storeu_ps(scores + r * kScoreStride, row);
    } else {
      _mm_mask_storeu_ps(scores + r * kScoreStride, kKeys, row);
    }
  }
}

template <int R, bool kF16>
inline void score_rows(const float* const* q, const void* const* k, int n_keys, int head_dim,
                       float scale, float* scores) {
  int j = 0;
  for (; j + 4 <= n_keys; j += 4) score_tile<R, 4, kF16>(q, k + j, head_dim, scale, scores + j);
  switch (n_keys - j) {
    case 3: score_tile<R, 3, kF16>(q, k + j, head_dim, scale, scores + j); break;
    case 2: score_tile<R, 2, kF16>(q, k + j, head_dim, scale, scores + j); break;
    case 1: score_tile<R, 1, kF16>(q, k + j, head_dim, scale, scores + j); break;
    default: break;
  }
}

template <bool kF16>
void scores_typed(const float* const* q, int n_rows, const void* const* k, int n_keys,
                  int head_dim, float scale, float* scores) {
  int r = 0;
  for (; r + 4 <= n_rows; r += 4) {
    score_rows<4, kF16>(q + r, k, n_keys, head_dim, scale, scores + r * kScoreStride);
  }
  float* s = scores + r * kScoreStride;
  switch (n_rows - r) {
    case 3: score_rows<3, kF16>(q + r, k, n_keys, head_dim, scale, s); break;
    case 2: score_rows<2, kF16>(q + r, k, n_keys, head_dim, scale, s); break;
    case 1: score_rows<1, kF16>(q + r, k, n_keys, head_dim, scale, s); break;
    default: break;
  }
}

// acc_r[d0 .. d0 + 16·D) += Σ_j e[r * kScoreStride + j] · v_j[d0 .. d0 + 16·D), key order.
template <int R, int D, bool kF16>
inline void pv_tile(const float* e, const void* const* v, int n_keys, int d0, float* const* acc) {
  __m512 a[R][D];
  for (int r = 0; r < R; ++r) {
    for (int d = 0; d < D; ++d) a[r][d] = _mm512_loadu_ps(acc[r] + d0 + 16 * d);
  }
  for (int j = 0; j < n_keys; ++j) {
    __m512 vv[D];
    for (int d = 0; d < D; ++d) vv[d] = load16<kF16>(v[j], d0 + 16 * d);
    for (int r = 0; r < R; ++r) {
      const __m512 s = _mm512_set1_ps(e[r * kScoreStride + j]);
      for (int d = 0; d < D; ++d) a[r][d] = _mm512_fmadd_ps(s, vv[d], a[r][d]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int d = 0; d < D; ++d) _mm512_storeu_ps(acc[r] + d0 + 16 * d, a[r][d]);
  }
}

template <int D, bool kF16>
inline void pv_rows(const float* e, int n_rows, const void* const* v, int n_keys, int d0,
                    float* const* acc) {
  int r = 0;
  for (; r + 8 <= n_rows; r += 8) pv_tile<8, D, kF16>(e + r * kScoreStride, v, n_keys, d0, acc + r);
  const float* er = e + r * kScoreStride;
  switch (n_rows - r) {
    case 7: pv_tile<7, D, kF16>(er, v, n_keys, d0, acc + r); break;
    case 6: pv_tile<6, D, kF16>(er, v, n_keys, d0, acc + r); break;
    case 5: pv_tile<5, D, kF16>(er, v, n_keys, d0, acc + r); break;
    case 4: pv_tile<4, D, kF16>(er, v, n_keys, d0, acc + r); break;
    case 3: pv_tile<3, D, kF16>(er, v, n_keys, d0, acc + r); break;
    case 2: pv_tile<2, D, kF16>(er, v, n_keys, d0, acc + r); break;
    case 1: pv_tile<1, D, kF16>(er, v, n_keys, d0, acc + r); break;
    default: break;
  }
}

template <bool kF16>
void pv_typed(const float* e, int n_rows, const void* const* v, int n_keys, int head_dim,
              float* const* acc) {
  int d0 = 0;
  for (; d0 + 32 <= head_dim; d0 += 32) pv_rows<2, kF16>(e, n_rows, v, n_keys, d0, acc);
  if (d0 < head_dim) pv_rows<1, kF16>(e, n_rows, v, n_keys, d0, acc);
}

void chunk_scores(const float* const* q, int n_rows, const void* const* k, bool f16, int n_keys,
                  int head_dim, float scale, float* scores) {
  if (f16) {
    scores_typed<true>(q, n_rows, k, n_keys, head_dim, scale, scores);
  } else {
    scores_typed<false>(q, n_rows, k, n_keys, head_dim, scale, scores);
  }
}

void chunk_pv(const float* e, int n_rows, const void* const* v, bool f16, int n_keys, int head_dim,
              float* const* acc) {
  if (f16) {
    pv_typed<true>(e, n_rows, v, n_keys, head_dim, acc);
  } else {
    pv_typed<false>(e, n_rows, v, n_keys, head_dim, acc);
  }
}

// e^x, x <= 0 here (clamped below at -87.3): the AVX2 table's polynomial in 16 lanes.
inline __m512 exp512(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-87.3f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  const __m512i e = _mm512_slli_epi32(
      _mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
  return _mm512_mul_ps(p, _mm512_castsi512_ps(e));
}

// Whole 16-key vectors up to round_up(n, 16) (<= kScoreStride); lanes at or past n are masked
// like invisible keys, so every key takes the same path.
float softmax_exp(float* s, const int32_t* k_pos, int n, int32_t q_pos, int window) {
  const __m512i vq = _mm512_set1_epi32(q_pos);
  const __m512i vw = _mm512_set1_epi32(window);
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const bool windowed = window > 0;
  auto visible = [&](int i) {
    const __m512i k = _mm512_loadu_si512(k_pos + i);
    __mmask16 ok = _mm512_cmpge_epi32_mask(k, _mm512_setzero_si512()) &
                   _mm512_cmple_epi32_mask(k, vq) &
                   _mm512_cmplt_epi32_mask(_mm512_add_epi32(lane, _mm512_set1_epi32(i)),
                                           _mm512_set1_epi32(n));
    if (windowed) ok &= _mm512_cmplt_epi32_mask(_mm512_sub_epi32(vq, k), vw);
    return ok;
  };
  __m512 vm = _mm512_set1_ps(-__builtin_inff());
  for (int i = 0; i < n; i += 16) vm = _mm512_mask_max_ps(vm, visible(i), vm, _mm512_loadu_ps(s + i));
  const float m = _mm512_reduce_max_ps(vm);
  const __m512 mv = _mm512_set1_ps(m);
  for (int i = 0; i < n; i += 16) {
    const __m512 e = exp512(_mm512_sub_ps(_mm512_loadu_ps(s + i), mv));
    _mm512_storeu_ps(s + i, _mm512_maskz_mov_ps(visible(i), e));
  }
  return m;
}

// Null entries are the AVX2 table's (ops_fast.cc fills them in).
constexpr OpsKernels kAvx512{nullptr, nullptr,     nullptr,      nullptr, nullptr,
                             nullptr, softmax_exp, chunk_scores, chunk_pv};

}  // namespace

const OpsKernels& avx512_ops() { return kAvx512; }

}  // namespace gem::cpu::detail

#endif  // GEM_CPU_X86
