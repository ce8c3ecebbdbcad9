// Fast ops of the CPU backend (see ops_fast.h): the reference math with float accumulation,
// 8-wide AVX2 loops (F16C for half-precision KV) and the thread pool.
#include "backend/cpu/ops_fast.h"

#include <algorithm>
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

namespace {

// Calls fn(segment, slot) for the visits [begin, end) of the segments taken one after another.
template <typename Fn>
inline void for_visits(std::span<const KvSegment> segments, int begin, int end, Fn&& fn) {
  int base = 0;
  for (const KvSegment& seg : segments) {
    const int lo = std::max(begin - base, 0);
    const int hi = std::min(end - base, seg.n_slots);
    for (int i = lo; i < hi; ++i) fn(seg, seg.slot_at(i));
    base += seg.n_slots;
    if (base >= end) break;
  }
}

// Splits the keys visible to a query at q_pos into chunks of kAttnChunk absolute positions:
// chunk k covers visits ranges[k] .. ranges[k+1]. Returns the number of chunks.
int chunk_ranges(std::span<const KvSegment> segments, int32_t q_pos, int window, int32_t* ranges) {
  int n = 0, prev = -1, visit = 0, last = 0;
  for (const KvSegment& seg : segments) {
    for (int i = 0; i < seg.n_slots; ++i, ++visit) {
      const int32_t p = seg.slot_pos(seg.slot_at(i));
      if (!attention_visible(q_pos, p, window)) continue;
      const int chunk = p / kAttnChunk;
      if (chunk != prev) {
        ranges[n++] = visit;
        prev = chunk;
      }
      last = visit + 1;
    }
  }
  ranges[n] = last;
  return n;
}

// Partial softmax of one chunk for the `group` query heads of KV head g:
// part[jj] = (max score m, Σ e, Σ e·v) with e = exp(score − m), over the chunk's visible keys.
// q_g: [group, head_dim].  part: [group, 2 + head_dim].  scores: [group, kAttnChunk].
void chunk_partial(const float* q_g, int g, int group, int head_dim, int32_t q_pos, int window,
                   float scale, std::span<const KvSegment> segments, int begin, int end,
                   float* scores, const void** v_ptr, uint8_t* v_f16, float* part) {
  int n = 0;
  for_visits(segments, begin, end, [&](const KvSegment& seg, int s) {
    if (!attention_visible(q_pos, seg.slot_pos(s), window)) return;
    const int64_t base = g * seg.head_stride + s * seg.slot_stride;
    // One K row, every query head of the group (the row stays in L1).
    for (int jj = 0; jj < group; ++jj) {
      const float* qj = q_g + static_cast<int64_t>(jj) * head_dim;
      const float dot = seg.f16 ? dot_f16(qj, static_cast<const uint16_t*>(seg.k) + base, head_dim)
                                : dot_f32(qj, static_cast<const float*>(seg.k) + base, head_dim);
      scores[jj * kAttnChunk + n] = dot * scale;
    }
    v_ptr[n] = seg.f16 ? static_cast<const void*>(static_cast<const uint16_t*>(seg.v) + base)
                       : static_cast<const void*>(static_cast<const float*>(seg.v) + base);
    v_f16[n] = seg.f16 ? 1 : 0;
    ++n;
  });
  const int stride = 2 + head_dim;
  for (int jj = 0; jj < group; ++jj) {
    float* sc = scores + jj * kAttnChunk;
    float* pj = part + jj * stride;
    float m = sc[0];
    for (int i = 1; i < n; ++i) m = std::max(m, sc[i]);
    float sum = 0.0f;
    for (int i = 0; i < n; ++i) {
      sc[i] = std::exp(sc[i] - m);
      sum += sc[i];
    }
    pj[0] = m;
    pj[1] = sum;
    for (int d = 0; d < head_dim; ++d) pj[2 + d] = 0.0f;
  }
  // One V row, every query head of the group.
  for (int i = 0; i < n; ++i) {
    for (int jj = 0; jj < group; ++jj) {
      float* acc = part + jj * stride + 2;
      if (v_f16[i]) {
        axpy_f16(scores[jj * kAttnChunk + i], static_cast<const uint16_t*>(v_ptr[i]), acc, head_dim);
      } else {
        axpy_f32(scores[jj * kAttnChunk + i], static_cast<const float*>(v_ptr[i]), acc, head_dim);
      }
    }
  }
}

// run <- run ⊕ part (the online-softmax merge), per query head of the group.
void merge_partial(float* run, const float* part, int group, int head_dim) {
  const int stride = 2 + head_dim;
  for (int jj = 0; jj < group; ++jj) {
    float* r = run + jj * stride;
    const float* c = part + jj * stride;
    const float m = std::max(r[0], c[0]);
    const float a = std::exp(r[0] - m);
    const float b = std::exp(c[0] - m);
    r[0] = m;
    r[1] = r[1] * a + c[1] * b;
    for (int d = 0; d < head_dim; ++d) r[2 + d] = r[2 + d] * a + c[2 + d] * b;
  }
}

// out[jj] = Σ e·v / Σ e for each query head of the group.  out: [group, head_dim].
void finish_partial(const float* run, int group, int head_dim, float* out) {
  const int stride = 2 + head_dim;
  for (int jj = 0; jj < group; ++jj) {
    const float* r = run + jj * stride;
    const float inv_sum = 1.0f / r[1];
    for (int d = 0; d < head_dim; ++d) out[jj * head_dim + d] = r[2 + d] * inv_sum;
  }
}

}  // namespace

void AttentionScratch::init(int threads, int n_heads, int n_kv_heads_min, int n_kv_heads_max,
                            int head_dim_max, int max_keys) {
  n_threads = threads;
  max_group = n_heads / std::max(1, n_kv_heads_min);
  max_head_dim = head_dim_max;
  max_kv_heads = n_kv_heads_max;
  max_ranges = max_keys / kAttnChunk + 2;
  thread_floats = static_cast<int64_t>(max_group) * (kAttnChunk + 2 * (2 + max_head_dim));
  floats.assign(static_cast<size_t>(n_threads) * thread_floats, 0.0f);
  v_ptr.assign(static_cast<size_t>(n_threads) * kAttnChunk, nullptr);
  v_f16.assign(static_cast<size_t>(n_threads) * kAttnChunk, 0);
  ranges.assign(static_cast<size_t>(n_threads) * (max_ranges + 1), 0);
  partials.assign(static_cast<size_t>(max_kv_heads) * max_ranges * max_group * (2 + max_head_dim), 0.0f);
}

uint64_t AttentionScratch::bytes() const {
  return floats.size() * sizeof(float) + v_ptr.size() * sizeof(void*) + v_f16.size() +
         ranges.size() * sizeof(int32_t) + partials.size() * sizeof(float);
}

void attention_fast(const float* q, const int32_t* q_pos, int n_tokens, int n_heads,
                    int n_kv_heads, int head_dim, int window, float scale,
                    std::span<const KvSegment> segments, float* out, ThreadPool& pool,
                    AttentionScratch& scratch) {
  GEM_CHECK(n_kv_heads > 0 && n_heads % n_kv_heads == 0, "heads %d / kv heads %d", n_heads,
            n_kv_heads);
  const int group = n_heads / n_kv_heads;
  const int stride = 2 + head_dim;
  int64_t n_keys = 0;
  for (const KvSegment& seg : segments) n_keys += seg.n_slots;
  GEM_CHECK(group <= scratch.max_group && head_dim <= scratch.max_head_dim &&
                n_kv_heads <= scratch.max_kv_heads && n_keys / kAttnChunk + 2 <= scratch.max_ranges &&
                pool.size() <= scratch.n_threads,
            "attention scratch too small: group %d head_dim %d kv heads %d keys %lld threads %d",
            group, head_dim, n_kv_heads, static_cast<long long>(n_keys), pool.size());
  auto thread_buffers = [&](int thread, float** scores, float** part, float** run,
                            const void*** v_ptr, uint8_t** v_f16, int32_t** ranges) {
    *scores = scratch.floats.data() + thread * scratch.thread_floats;
    *part = *scores + static_cast<int64_t>(scratch.max_group) * kAttnChunk;
    *run = *part + static_cast<int64_t>(scratch.max_group) * stride;
    *v_ptr = scratch.v_ptr.data() + static_cast<int64_t>(thread) * kAttnChunk;
    *v_f16 = scratch.v_f16.data() + static_cast<int64_t>(thread) * kAttnChunk;
    *ranges = scratch.ranges.data() + static_cast<int64_t>(thread) * (scratch.max_ranges + 1);
  };

  if (n_tokens == 1) {
    // Decode: too few (token, KV head) pairs to keep the threads busy; split the keys instead.
    int32_t* ranges = scratch.ranges.data();
    const int n_ranges = chunk_ranges(segments, q_pos[0], window, ranges);
    GEM_CHECK(n_ranges > 0, "query at position %d sees no key", q_pos[0]);
    const int64_t part_floats = static_cast<int64_t>(group) * stride;
    float* partials = scratch.partials.data();
    pool.parallel_for(static_cast<int64_t>(n_kv_heads) * n_ranges, [&](int64_t begin, int64_t end, int thread) {
      float *scores, *part, *run;
      const void** v_ptr;
      uint8_t* v_f16;
      int32_t* unused;
      thread_buffers(thread, &scores, &part, &run, &v_ptr, &v_f16, &unused);
      for (int64_t unit = begin; unit < end; ++unit) {
        const int g = static_cast<int>(unit / n_ranges);
        const int k = static_cast<int>(unit % n_ranges);
        chunk_partial(q + static_cast<int64_t>(g) * group * head_dim, g, group, head_dim, q_pos[0],
                      window, scale, segments, ranges[k], ranges[k + 1], scores, v_ptr, v_f16,
                      partials + unit * part_floats);
      }
    });
    pool.parallel_for(n_kv_heads, [&](int64_t begin, int64_t end, int) {
      for (int64_t g = begin; g < end; ++g) {
        float* run = partials + g * n_ranges * part_floats;
        for (int k = 1; k < n_ranges; ++k) merge_partial(run, run + k * part_floats, group, head_dim);
        finish_partial(run, group, head_dim, out + g * group * head_dim);
      }
    });
    return;
  }

  // Prompt tiles: one (token, KV head) per task, its chunks merged in order as they come.
  pool.parallel_for(static_cast<int64_t>(n_tokens) * n_kv_heads, [&](int64_t begin, int64_t end, int thread) {
    float *scores, *part, *run;
    const void** v_ptr;
    uint8_t* v_f16;
    int32_t* ranges;
    thread_buffers(thread, &scores, &part, &run, &v_ptr, &v_f16, &ranges);
    for (int64_t unit = begin; unit < end; ++unit) {
      const int t = static_cast<int>(unit / n_kv_heads);
      const int g = static_cast<int>(unit % n_kv_heads);
      const float* q_g = q + (static_cast<int64_t>(t) * n_heads + g * group) * head_dim;
      const int n_ranges = chunk_ranges(segments, q_pos[t], window, ranges);
      GEM_CHECK(n_ranges > 0, "query at position %d sees no key", q_pos[t]);
      for (int k = 0; k < n_ranges; ++k) {
        chunk_partial(q_g, g, group, head_dim, q_pos[t], window, scale, segments, ranges[k],
                      ranges[k + 1], scores, v_ptr, v_f16, k == 0 ? run : part);
        if (k > 0) merge_partial(run, part, group, head_dim);
      }
      finish_partial(run, group, head_dim, out + (static_cast<int64_t>(t) * n_heads + g * group) * head_dim);
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

#ifdef GEM_OPS_AVX2
namespace {
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
}  // namespace
#endif

void gelu_tanh_mul_fast(float* gate, const float* up, int64_t n, ThreadPool& pool) {
  pool.parallel_for(n, [&](int64_t begin, int64_t end, int) {
    constexpr float k = 0.79788456080286535588f;  // sqrt(2/pi)
    int64_t i = begin;
#ifdef GEM_OPS_AVX2
    // 0.5·u·(1 + tanh(z)) = u / (1 + e^(-2z)), z = k·(u + 0.044715·u³).
    for (; i + 8 <= end; i += 8) {
      const __m256 u = _mm256_loadu_ps(gate + i);
      const __m256 u3 = _mm256_mul_ps(_mm256_mul_ps(u, u), u);
      const __m256 z = _mm256_mul_ps(_mm256_set1_ps(k),
                                     _mm256_fmadd_ps(_mm256_set1_ps(0.044715f), u3, u));
      const __m256 e = exp_avx2(_mm256_mul_ps(_mm256_set1_ps(-2.0f), z));
      const __m256 g = _mm256_div_ps(u, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
      _mm256_storeu_ps(gate + i, _mm256_mul_ps(g, _mm256_loadu_ps(up + i)));
    }
#endif
    for (; i < end; ++i) {
      const float u = gate[i];
      gate[i] = 0.5f * u * (1.0f + std::tanh(k * (u + 0.044715f * u * u * u))) * up[i];
    }
  });
}

}  // namespace gem::cpu
