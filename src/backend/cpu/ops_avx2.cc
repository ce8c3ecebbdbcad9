// AVX2+FMA+F16C kernels of the fast ops (ops_kernels.h). Compiled with AVX2 target flags
// (x86-64-v3) whatever the build's -march (CMakeLists.txt) and reached only through
// avx2_ops() after isa.cc found the features; nothing here is visible outside this file but
// that entry (no std:: templates or inline library functions are instantiated, so the linker
// cannot pick an AVX2 copy of one for the rest of the program).
#include "backend/cpu/ops_kernels.h"

#ifdef GEM_CPU_X86

#include <immintrin.h>
#include <math.h>

#if !defined(__AVX2__) || !defined(__FMA__) || !defined(__F16C__)
#error "ops_avx2.cc needs its AVX2 target flags (src/backend/cpu/CMakeLists.txt)"
#endif

namespace gem::cpu::detail {
namespace {

inline float hsum(__m256 v) {
  __m128 lo = _mm256_castps256_ps128(v);
  __m128 hi = _mm256_extractf128_ps(v, 1);
  lo = _mm_add_ps(lo, hi);
  lo = _mm_add_ps(lo, _mm_movehl_ps(lo, lo));
  lo = _mm_add_ss(lo, _mm_movehdup_ps(lo));
  return _mm_cvtss_f32(lo);
}
inline __m256 load_f16(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
inline float half(uint16_t h) { return _cvtsh_ss(h); }

float dot_f32(const float* a, const float* b, int n) {
  int i = 0;
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
  }
  for (; i + 8 <= n; i += 8) acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
  float sum = hsum(_mm256_add_ps(acc0, acc1));
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

float dot_f16(const float* a, const uint16_t* b, int n) {
  int i = 0;
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), load_f16(b + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), load_f16(b + i + 8), acc1);
  }
  for (; i + 8 <= n; i += 8) acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), load_f16(b + i), acc0);
  float sum = hsum(_mm256_add_ps(acc0, acc1));
  for (; i < n; ++i) sum += a[i] * half(b[i]);
  return sum;
}

void axpy_f32(float s, const float* x, float* y, int n) {
  int i = 0;
  const __m256 vs = _mm256_set1_ps(s);
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(vs, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  }
  for (; i < n; ++i) y[i] += s * x[i];
}

void axpy_f16(float s, const uint16_t* x, float* y, int n) {
  int i = 0;
  const __m256 vs = _mm256_set1_ps(s);
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(vs, load_f16(x + i), _mm256_loadu_ps(y + i)));
  }
  for (; i < n; ++i) y[i] += s * half(x[i]);
}

void round_to_f16(float* x, int64_t n) {
  int64_t i = 0;
  // vcvtps2ph rounds to nearest even, to subnormals and to inf as f32_to_fp16 does (a NaN
  // stays a NaN; its payload may differ). The tail goes through the same instruction.
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT);
    _mm256_storeu_ps(x + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; ++i) x[i] = _cvtsh_ss(_cvtss_sh(x[i], _MM_FROUND_TO_NEAREST_INT));
}

// e^x for x in [-87.3, 88.3] (clamped), relative error < 2e-7: x = n·ln2 + r, |r| <= ln2/2,
// e^r by Cephes' degree-6 expf polynomial, 2^n built in the exponent bits.
inline __m256 exp_avx2(__m256 x) {
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.3f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i e = _mm256_slli_epi32(
      _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

// 0.5·u·(1 + tanh(z)) · up = u / (1 + e^(-2z)) · up, z = k·(u + 0.044715·u³).
inline __m256 gelu_mul8(__m256 u, __m256 up) {
  constexpr float k = 0.79788456080286535588f;  // sqrt(2/pi)
  const __m256 u3 = _mm256_mul_ps(_mm256_mul_ps(u, u), u);
  const __m256 z = _mm256_mul_ps(_mm256_set1_ps(k), _mm256_fmadd_ps(_mm256_set1_ps(0.044715f), u3, u));
  const __m256 e = exp_avx2(_mm256_mul_ps(_mm256_set1_ps(-2.0f), z));
  return _mm256_mul_ps(_mm256_div_ps(u, _mm256_add_ps(_mm256_set1_ps(1.0f), e)), up);
}

void gelu_tanh_mul(float* gate, const float* up, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(gate + i, gelu_mul8(_mm256_loadu_ps(gate + i), _mm256_loadu_ps(up + i)));
  }
  if (i < n) {  // the tail through the same vector code, so no element depends on the split
    alignas(32) float g[8] = {}, u[8] = {};
    for (int64_t j = i; j < n; ++j) {
      g[j - i] = gate[j];
      u[j - i] = up[j];
    }
    _mm256_store_ps(g, gelu_mul8(_mm256_load_ps(g), _mm256_load_ps(u)));
    for (int64_t j = i; j < n; ++j) gate[j] = g[j - i];
  }
}

// Whole 8-key vectors up to round_up(n, 8) (<= kScoreStride): lanes at or past n are masked
// out like invisible keys, so every key takes the vector path.
float softmax_exp(float* s, const int32_t* k_pos, int n, int32_t q_pos, int window) {
  const __m256i vq = _mm256_set1_epi32(q_pos);
  const __m256i vw = _mm256_set1_epi32(window);
  const __m256i vn = _mm256_set1_epi32(n);
  const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const bool windowed = window > 0;
  auto visible = [&](int i) {
    const __m256i k = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(k_pos + i));
    // k >= 0, k <= q, (window <= 0 or q - k < window), i < n.
    __m256i ok = _mm256_andnot_si256(_mm256_cmpgt_epi32(_mm256_setzero_si256(), k),
                                     _mm256_andnot_si256(_mm256_cmpgt_epi32(k, vq), _mm256_set1_epi32(-1)));
    if (windowed) ok = _mm256_and_si256(ok, _mm256_cmpgt_epi32(vw, _mm256_sub_epi32(vq, k)));
    return _mm256_and_si256(ok, _mm256_cmpgt_epi32(vn, _mm256_add_epi32(lane, _mm256_set1_epi32(i))));
  };
  const __m256 neg_inf = _mm256_set1_ps(-__builtin_inff());
  __m256 vm = neg_inf;
  for (int i = 0; i < n; i += 8) {
    const __m256 ok = _mm256_castsi256_ps(visible(i));
    vm = _mm256_max_ps(vm, _mm256_blendv_ps(neg_inf, _mm256_loadu_ps(s + i), ok));
  }
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(vm), _mm256_extractf128_ps(vm, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
  const float m = _mm_cvtss_f32(m4);
  const __m256 mv = _mm256_set1_ps(m);
  for (int i = 0; i < n; i += 8) {
    const __m256 ok = _mm256_castsi256_ps(visible(i));
    const __m256 e = exp_avx2(_mm256_sub_ps(_mm256_loadu_ps(s + i), mv));
    _mm256_storeu_ps(s + i, _mm256_and_ps(e, ok));
  }
  return m;
}

// ---- Register tiles of the chunk kernels. Each (query row, key) score is computed with exactly
// the operations of dot_f32 / dot_f16 (two 8-lane accumulators over 16-value steps, then hsum),
// and each weighted-V sum with those of axpy (one FMA per key, in key order), so a row's result
// does not depend on which tile, or which other rows, it was computed with. ----
template <bool kF16>
inline __m256 load_k(const void* row, int i) {
  if constexpr (kF16) {
    return load_f16(static_cast<const uint16_t*>(row) + i);
  } else {
    return _mm256_loadu_ps(static_cast<const float*>(row) + i);
  }
}

// scores[r * kScoreStride + j] = scale · q_r·k_j for R rows × K keys.
template <int R, int K, bool kF16>
inline void score_tile(const float* const* q, const void* const* k, int head_dim, float scale,
                       float* scores) {
  __m256 a0[R][K], a1[R][K];
  for (int r = 0; r < R; ++r) {
    for (int j = 0; j < K; ++j) a0[r][j] = a1[r][j] = _mm256_setzero_ps();
  }
  for (int i = 0; i < head_dim; i += 16) {
    __m256 qv[R];
    for (int r = 0; r < R; ++r) qv[r] = _mm256_loadu_ps(q[r] + i);
    for (int j = 0; j < K; ++j) {
      const __m256 kv = load_k<kF16>(k[j], i);
      for (int r = 0; r < R; ++r) a0[r][j] = _mm256_fmadd_ps(qv[r], kv, a0[r][j]);
    }
    for (int r = 0; r < R; ++r) qv[r] = _mm256_loadu_ps(q[r] + i + 8);
    for (int j = 0; j < K; ++j) {
      const __m256 kv = load_k<kF16>(k[j], i + 8);
      for (int r = 0; r < R; ++r) a1[r][j] = _mm256_fmadd_ps(qv[r], kv, a1[r][j]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int j = 0; j < K; ++j) {
      const float dot = hsum(_mm256_add_ps(a0[r][j], a1[r][j]));
      scores[r * kScoreStride + j] = dot * scale;
    }
  }
}

template <int R, bool kF16>
inline void score_rows(const float* const* q, const void* const* k, int n_keys, int head_dim,
                       float scale, float* scores) {
  int j = 0;
  for (; j + 3 <= n_keys; j += 3) score_tile<R, 3, kF16>(q, k + j, head_dim, scale, scores + j);
  if (n_keys - j == 2) score_tile<R, 2, kF16>(q, k + j, head_dim, scale, scores + j);
  if (n_keys - j == 1) score_tile<R, 1, kF16>(q, k + j, head_dim, scale, scores + j);
}

// acc_r[d0 .. d0+16) += Σ_j e[r * kScoreStride + j] · v_j[d0 .. d0+16), j in key order, R rows.
template <int R, bool kF16>
inline void pv_tile(const float* e, const void* const* v, int n_keys, int d0, float* const* acc) {
  __m256 a[R][2];
  for (int r = 0; r < R; ++r) {
    a[r][0] = _mm256_loadu_ps(acc[r] + d0);
    a[r][1] = _mm256_loadu_ps(acc[r] + d0 + 8);
  }
  for (int j = 0; j < n_keys; ++j) {
    const __m256 v0 = load_k<kF16>(v[j], d0);
    const __m256 v1 = load_k<kF16>(v[j], d0 + 8);
    for (int r = 0; r < R; ++r) {
      const __m256 s = _mm256_broadcast_ss(e + r * kScoreStride + j);
      a[r][0] = _mm256_fmadd_ps(s, v0, a[r][0]);
      a[r][1] = _mm256_fmadd_ps(s, v1, a[r][1]);
    }
  }
  for (int r = 0; r < R; ++r) {
    _mm256_storeu_ps(acc[r] + d0, a[r][0]);
    _mm256_storeu_ps(acc[r] + d0 + 8, a[r][1]);
  }
}

template <bool kF16>
void scores_typed(const float* const* q, int n_rows, const void* const* k, int n_keys,
                  int head_dim, float scale, float* scores) {
  int r = 0;
  for (; r + 2 <= n_rows; r += 2) {
    score_rows<2, kF16>(q + r, k, n_keys, head_dim, scale, scores + r * kScoreStride);
  }
  if (r < n_rows) score_rows<1, kF16>(q + r, k, n_keys, head_dim, scale, scores + r * kScoreStride);
}

template <bool kF16>
void pv_typed(const float* e, int n_rows, const void* const* v, int n_keys, int head_dim,
              float* const* acc) {
  for (int d0 = 0; d0 < head_dim; d0 += 16) {
    int r = 0;
    for (; r + 4 <= n_rows; r += 4) pv_tile<4, kF16>(e + r * kScoreStride, v, n_keys, d0, acc + r);
    switch (n_rows - r) {
      case 3:
        pv_tile<3, kF16>(e + r * kScoreStride, v, n_keys, d0, acc + r);
        break;
      case 2:
        pv_tile<2, kF16>(e + r * kScoreStride, v, n_keys, d0, acc + r);
        break;
      case 1:
        pv_tile<1, kF16>(e + r * kScoreStride, v, n_keys, d0, acc + r);
        break;
      default:
        break;
    }
  }
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

constexpr OpsKernels kAvx2{dot_f32,       dot_f16,     axpy_f32,     axpy_f16, round_to_f16,
                           gelu_tanh_mul, softmax_exp, chunk_scores, chunk_pv};

}  // namespace

const OpsKernels& avx2_ops() { return kAvx2; }

}  // namespace gem::cpu::detail

#endif  // GEM_CPU_X86
