// Fast ops of the CPU backend (see ops_fast.h): the reference math with float accumulation,
// 8-wide AVX2 loops (F16C for half-precision KV) and the thread pool.
#include "backend/cpu/ops_fast.h"

#include <cmath>
#include <limits>

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#include <immintrin.h>
#define GEM_OPS_AVX2 1
#endif

#include "base/check.h"
#include "base/dtype.h"

namespace gem::cpu {

#ifdef GEM_OPS_AVX2
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
}  // namespace
#endif

float dot_f32(const float* a, const float* b, int n) {
  int i = 0;
  float sum = 0.0f;
#ifdef GEM_OPS_AVX2
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
  }
  for (; i + 8 <= n; i += 8) acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
  sum = hsum(_mm256_add_ps(acc0, acc1));
#endif
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

float dot_f16(const float* a, const uint16_t* b, int n) {
  int i = 0;
  float sum = 0.0f;
#ifdef GEM_OPS_AVX2
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), load_f16(b + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), load_f16(b + i + 8), acc1);
  }
  for (; i + 8 <= n; i += 8) acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), load_f16(b + i), acc0);
  sum = hsum(_mm256_add_ps(acc0, acc1));
#endif
  for (; i < n; ++i) sum += a[i] * fp16_to_f32(b[i]);
  return sum;
}

void axpy_f32(float s, const float* x, float* y, int n) {
  int i = 0;
#ifdef GEM_OPS_AVX2
  const __m256 vs = _mm256_set1_ps(s);
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(vs, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  }
#endif
  for (; i < n; ++i) y[i] += s * x[i];
}

void axpy_f16(float s, const uint16_t* x, float* y, int n) {
  int i = 0;
#ifdef GEM_OPS_AVX2
  const __m256 vs = _mm256_set1_ps(s);
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(vs, load_f16(x + i), _mm256_loadu_ps(y + i)));
  }
#endif
  for (; i < n; ++i) y[i] += s * fp16_to_f32(x[i]);
}

void round_to_f16(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = fp16_to_f32(f32_to_fp16(x[i]));
}

void attention_fast(const float* q, const int32_t* q_pos, int n_tokens, int n_heads,
                    int n_kv_heads, int head_dim, int window, float scale,
                    std::span<const KvSegment> segments, float* out, ThreadPool& pool,
                    float* scratch, int64_t scratch_per_thread) {
  GEM_CHECK(n_kv_heads > 0 && n_heads % n_kv_heads == 0, "heads %d / kv heads %d", n_heads,
            n_kv_heads);
  int64_t n_keys = 0;
  for (const KvSegment& seg : segments) n_keys += seg.n_slots;
  GEM_CHECK(n_keys + head_dim <= scratch_per_thread, "attention scratch %lld < %lld",
            static_cast<long long>(scratch_per_thread), static_cast<long long>(n_keys + head_dim));
  const int group = n_heads / n_kv_heads;
  const float neg_inf = -std::numeric_limits<float>::infinity();
  pool.parallel_for(static_cast<int64_t>(n_tokens) * n_heads, [&](int64_t begin, int64_t end, int thread) {
    float* scores = scratch + thread * scratch_per_thread;
    float* acc = scores + n_keys;
    for (int64_t unit = begin; unit < end; ++unit) {
      const int t = static_cast<int>(unit / n_heads);
      const int j = static_cast<int>(unit % n_heads);
      const int g = j / group;
      const float* qj = q + unit * head_dim;
      // Pass 1: scores of visible keys, -inf elsewhere; their maximum.
      float max_score = neg_inf;
      int64_t index = 0;
      for (const KvSegment& seg : segments) {
        for (int i = 0; i < seg.n_slots; ++i, ++index) {
          const int s = seg.slot_at(i);
          if (!attention_visible(q_pos[t], seg.slot_pos(s), window)) {
            scores[index] = neg_inf;
            continue;
          }
          const int64_t base = g * seg.head_stride + s * seg.slot_stride;
          const float dot = seg.f16 ? dot_f16(qj, static_cast<const uint16_t*>(seg.k) + base, head_dim)
                                    : dot_f32(qj, static_cast<const float*>(seg.k) + base, head_dim);
          scores[index] = dot * scale;
          max_score = std::max(max_score, scores[index]);
        }
      }
      // Pass 2: softmax weights and the weighted sum of V.
      for (int d = 0; d < head_dim; ++d) acc[d] = 0.0f;
      float sum = 0.0f;
      index = 0;
      for (const KvSegment& seg : segments) {
        for (int i = 0; i < seg.n_slots; ++i, ++index) {
          const int s = seg.slot_at(i);
          if (scores[index] == neg_inf) continue;
          const float p = std::exp(scores[index] - max_score);
          sum += p;
          const int64_t base = g * seg.head_stride + s * seg.slot_stride;
          if (seg.f16) {
            axpy_f16(p, static_cast<const uint16_t*>(seg.v) + base, acc, head_dim);
          } else {
            axpy_f32(p, static_cast<const float*>(seg.v) + base, acc, head_dim);
          }
        }
      }
      const float inv_sum = 1.0f / sum;
      float* oj = out + unit * head_dim;
      for (int d = 0; d < head_dim; ++d) oj[d] = acc[d] * inv_sum;
    }
  });
}

void rms_norm_fast(const float* x, const float* w, int64_t n_rows, int n_cols, float eps, float* y,
                   ThreadPool& pool) {
  pool.parallel_for(n_rows, [&](int64_t begin, int64_t end, int) {
    for (int64_t r = begin; r < end; ++r) {
      const float* xr = x + r * n_cols;
      float* yr = y + r * n_cols;
      const float inv_rms = 1.0f / std::sqrt(dot_f32(xr, xr, n_cols) / n_cols + eps);
      if (w != nullptr) {
        for (int i = 0; i < n_cols; ++i) yr[i] = xr[i] * inv_rms * w[i];
      } else {
        for (int i = 0; i < n_cols; ++i) yr[i] = xr[i] * inv_rms;
      }
    }
  });
}

void gelu_tanh_mul_fast(float* gate, const float* up, int64_t n, ThreadPool& pool) {
  pool.parallel_for(n, [&](int64_t begin, int64_t end, int) {
    constexpr float k = 0.79788456080286535588f;  // sqrt(2/pi)
    for (int64_t i = begin; i < end; ++i) {
      const float u = gate[i];
      gate[i] = 0.5f * u * (1.0f + std::tanh(k * (u + 0.044715f * u * u * u))) * up[i];
    }
  });
}

}  // namespace gem::cpu
