// Fast ops of the CPU backend (see ops_fast.h): the reference math with float accumulation
// and the thread pool; the inner loops are the kernels of the active path (ops_kernels.h:
// scalar here, AVX2 in ops_avx2.cc, AVX-512 in ops_avx512.cc).
#include "backend/cpu/ops_fast.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "backend/cpu/ops_kernels.h"
#include "base/check.h"
#include "base/dtype.h"

namespace gem::cpu {

using detail::OpsKernels;
static_assert(detail::kScoreStride == kAttnChunk, "score rows are one chunk long");

// ---- The scalar table: plain loops (the portable path and the ARM one). ----
namespace {

float dot_f32_scalar(const float* a, const float* b, int n) {
  float sum = 0.0f;
  for (int i = 0; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

float dot_f16_scalar(const float* a, const uint16_t* b, int n) {
  float sum = 0.0f;
  for (int i = 0; i < n; ++i) sum += a[i] * fp16_to_f32(b[i]);
  return sum;
}

void axpy_f32_scalar(float s, const float* x, float* y, int n) {
  for (int i = 0; i < n; ++i) y[i] += s * x[i];
}

void axpy_f16_scalar(float s, const uint16_t* x, float* y, int n) {
  for (int i = 0; i < n; ++i) y[i] += s * fp16_to_f32(x[i]);
}

void round_to_f16_scalar(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = fp16_to_f32(f32_to_fp16(x[i]));
}

// 0.5·u·(1 + tanh(z)) = u / (1 + e^(-2z)), z = k·(u + 0.044715·u³): the form without the
// cancellation of 1 + tanh(z) in float for negative u (as the SIMD paths compute it).
void gelu_tanh_mul_scalar(float* gate, const float* up, int64_t n) {
  constexpr float k = 0.79788456080286535588f;  // sqrt(2/pi)
  for (int64_t i = 0; i < n; ++i) {
    const float u = gate[i];
    const float z = k * (u + 0.044715f * u * u * u);
    gate[i] = u / (1.0f + std::exp(-2.0f * z)) * up[i];
  }
}

float softmax_exp_scalar(float* s, const int32_t* k_pos, int n, int32_t q_pos, int window) {
  float m = -std::numeric_limits<float>::infinity();
  for (int i = 0; i < n; ++i) {
    if (attention_visible(q_pos, k_pos[i], window)) m = std::max(m, s[i]);
  }
  for (int i = 0; i < n; ++i) s[i] = attention_visible(q_pos, k_pos[i], window) ? std::exp(s[i] - m) : 0.0f;
  return m;
}

constexpr OpsKernels kScalar{dot_f32_scalar,       dot_f16_scalar,     axpy_f32_scalar,
                             axpy_f16_scalar,      round_to_f16_scalar, gelu_tanh_mul_scalar,
                             softmax_exp_scalar,   nullptr,            nullptr};

const OpsKernels& ops_kernels(Isa isa) {
  GEM_CHECK(isa_supported(isa), "cpu ops: path %s is not supported on this CPU",
            std::string(isa_name(isa)).c_str());
#ifdef GEM_CPU_X86
  if (isa == Isa::kAvx512 || isa == Isa::kAmx) {
    static const OpsKernels merged = [] {
      OpsKernels t = detail::avx2_ops();
      const OpsKernels& w = detail::avx512_ops();
      auto take = [](auto& mine, auto theirs) {
        if (theirs != nullptr) mine = theirs;
      };
      take(t.dot_f32, w.dot_f32);
      take(t.dot_f16, w.dot_f16);
      take(t.axpy_f32, w.axpy_f32);
      take(t.axpy_f16, w.axpy_f16);
      take(t.round_to_f16, w.round_to_f16);
      take(t.gelu_tanh_mul, w.gelu_tanh_mul);
      take(t.softmax_exp, w.softmax_exp);
      take(t.chunk_scores, w.chunk_scores);
      take(t.chunk_pv, w.chunk_pv);
      return t;
    }();
    return merged;
  }
  if (isa == Isa::kAvx2 || isa == Isa::kAvxVnni) return detail::avx2_ops();
#endif
  return kScalar;  // scalar, and NEON (no NEON forms of these ops yet)
}

}  // namespace

float dot_f32(const float* a, const float* b, int n, Isa isa) { return ops_kernels(isa).dot_f32(a, b, n); }
float dot_f16(const float* a, const uint16_t* b, int n, Isa isa) {
  return ops_kernels(isa).dot_f16(a, b, n);
}
void axpy_f32(float s, const float* x, float* y, int n, Isa isa) { ops_kernels(isa).axpy_f32(s, x, y, n); }
void axpy_f16(float s, const uint16_t* x, float* y, int n, Isa isa) {
  ops_kernels(isa).axpy_f16(s, x, y, n);
}
void round_to_f16(float* x, int64_t n, Isa isa) { ops_kernels(isa).round_to_f16(x, n); }

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

// True when a key at k_pos is visible to at least one of the n_tok query positions.
inline bool visible_any(const int32_t* q_pos, int n_tok, int32_t k_pos, int window) {
  for (int t = 0; t < n_tok; ++t) {
    if (attention_visible(q_pos[t], k_pos, window)) return true;
  }
  return false;
}

// Splits the keys visible to any of the queries at q_pos[0..n_tok) into chunks of kAttnChunk
// absolute positions: chunk k covers visits ranges[k] .. ranges[k+1]. Returns the number of
// chunks. For one query, exactly that query's chunks; for several, their union (a query may see
// no key of some chunk: chunk_partial marks that row empty).
int chunk_ranges(std::span<const KvSegment> segments, const int32_t* q_pos, int n_tok, int window,
                 int32_t* ranges) {
  int n = 0, prev = -1, visit = 0, last = 0;
  for (const KvSegment& seg : segments) {
    for (int i = 0; i < seg.n_slots; ++i, ++visit) {
      const int32_t p = seg.slot_pos(seg.slot_at(i));
      if (!visible_any(q_pos, n_tok, p, window)) continue;
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

// One thread's buffers (AttentionScratch::init sizes them).
struct ThreadBuffers {
  float* scores;       // [rows, kAttnChunk]
  float* part;         // [rows, 2 + head_dim]
  float* run;          // [rows, 2 + head_dim]
  const void** k_ptr;  // [kAttnChunk] the chunk's K rows, V rows, positions, storage
  const void** v_ptr;
  int32_t* k_pos;
  uint8_t* f16;
  int32_t* ranges;     // [max_ranges + 1]
};

ThreadBuffers thread_buffers(AttentionScratch& s, int thread, int head_dim) {
  ThreadBuffers b;
  b.scores = s.floats.data() + thread * s.thread_floats;
  b.part = b.scores + static_cast<int64_t>(s.max_rows) * kAttnChunk;
  b.run = b.part + static_cast<int64_t>(s.max_rows) * (2 + head_dim);
  b.k_ptr = s.k_ptr.data() + static_cast<int64_t>(thread) * kAttnChunk;
  b.v_ptr = s.v_ptr.data() + static_cast<int64_t>(thread) * kAttnChunk;
  b.k_pos = s.k_pos.data() + static_cast<int64_t>(thread) * kAttnChunk;
  b.f16 = s.v_f16.data() + static_cast<int64_t>(thread) * kAttnChunk;
  b.ranges = s.ranges.data() + static_cast<int64_t>(thread) * (s.max_ranges + 1);
  return b;
}


// Scores of n_rows query rows against keys [j0, j1) of the chunk (one storage type).
void scores_run(const OpsKernels& ops, const float* const* q, int n_rows, const ThreadBuffers& b,
                int j0, int j1, int head_dim, float scale) {
  if (ops.chunk_scores != nullptr && head_dim % 16 == 0) {
    ops.chunk_scores(q, n_rows, b.k_ptr + j0, b.f16[j0] != 0, j1 - j0, head_dim, scale, b.scores + j0);
    return;
  }
  for (int r = 0; r < n_rows; ++r) {
    for (int j = j0; j < j1; ++j) {
      const float dot = b.f16[j] ? ops.dot_f16(q[r], static_cast<const uint16_t*>(b.k_ptr[j]), head_dim)
                                 : ops.dot_f32(q[r], static_cast<const float*>(b.k_ptr[j]), head_dim);
      b.scores[r * kAttnChunk + j] = dot * scale;
    }
  }
}

// acc rows += weights · V over keys [j0, j1) of the chunk (one storage type).
void pv_run(const OpsKernels& ops, float* const* acc, int n_rows, const ThreadBuffers& b, int j0,
            int j1, int head_dim) {
  if (ops.chunk_pv != nullptr && head_dim % 16 == 0) {
    ops.chunk_pv(b.scores + j0, n_rows, b.v_ptr + j0, b.f16[j0] != 0, j1 - j0, head_dim, acc);
    return;
  }
  for (int j = j0; j < j1; ++j) {
    for (int r = 0; r < n_rows; ++r) {
      const float e = b.scores[r * kAttnChunk + j];
      if (b.f16[j]) {
        ops.axpy_f16(e, static_cast<const uint16_t*>(b.v_ptr[j]), acc[r], head_dim);
      } else {
        ops.axpy_f32(e, static_cast<const float*>(b.v_ptr[j]), acc[r], head_dim);
      }
    }
  }
}

// Partial softmax of one chunk (visits [begin, end)) of KV head g for n_tok query tokens at
// q_pos, `group` query rows each (row r = token r / group; q[r] its query vector):
// part[r] = (max score m, Σ e, Σ e·v) with e = exp(score − m) over the keys row r sees, in visit
// order. A row that sees no key of the chunk gets m = -inf and Σ e = 0 (skip it when merging).
// The chunk's keys are those visible to any of the tokens.
void chunk_partial(const OpsKernels& ops, const float* const* q, const int32_t* q_pos, int n_tok,
                   int group, int g, int head_dim, int window, float scale,
                   std::span<const KvSegment> segments, int begin, int end, const ThreadBuffers& b,
                   float* part) {
  const int n_rows = n_tok * group;
  int n = 0;
  for_visits(segments, begin, end, [&](const KvSegment& seg, int s) {
    const int32_t p = seg.slot_pos(s);
    if (!visible_any(q_pos, n_tok, p, window)) return;
    const int64_t base = g * seg.head_stride + s * seg.slot_stride;
    b.k_ptr[n] = seg.f16 ? static_cast<const void*>(static_cast<const uint16_t*>(seg.k) + base)
                         : static_cast<const void*>(static_cast<const float*>(seg.k) + base);
    b.v_ptr[n] = seg.f16 ? static_cast<const void*>(static_cast<const uint16_t*>(seg.v) + base)
                         : static_cast<const void*>(static_cast<const float*>(seg.v) + base);
    b.k_pos[n] = p;
    b.f16[n] = seg.f16 ? 1 : 0;
    ++n;
  });
  // Runs of one storage type (a chunk may hold cached f16 keys and the tile's f32 ones).
  for (int j0 = 0; j0 < n;) {
    int j1 = j0 + 1;
    while (j1 < n && b.f16[j1] == b.f16[j0]) ++j1;
    scores_run(ops, q, n_rows, b, j0, j1, head_dim, scale);
    j0 = j1;
  }
  const int stride = 2 + head_dim;
  float* acc[kAttnMaxRows];
  float sum[kAttnMaxRows];
  for (int r = 0; r < n_rows; ++r) {
    float* pr = part + r * stride;
    acc[r] = pr + 2;
    pr[0] = ops.softmax_exp(b.scores + r * kAttnChunk, b.k_pos, n, q_pos[r / group], window);
    sum[r] = 0.0f;
    for (int d = 0; d < head_dim; ++d) pr[2 + d] = 0.0f;
  }
  // Σ e of each row in key order (the keys a row does not see add exact zeros), rows
  // interleaved so that the additions of different rows overlap.
  for (int i = 0; i < n; ++i) {
    for (int r = 0; r < n_rows; ++r) sum[r] += b.scores[r * kAttnChunk + i];
  }
  for (int r = 0; r < n_rows; ++r) part[r * stride + 1] = sum[r];
  for (int j0 = 0; j0 < n;) {
    int j1 = j0 + 1;
    while (j1 < n && b.f16[j1] == b.f16[j0]) ++j1;
    pv_run(ops, acc, n_rows, b, j0, j1, head_dim);
    j0 = j1;
  }
}

// run <- run ⊕ part (the online-softmax merge), per query row.
void merge_partial(float* run, const float* part, int n_rows, int head_dim) {
  const int stride = 2 + head_dim;
  for (int jj = 0; jj < n_rows; ++jj) {
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

// out[jj] = Σ e·v / Σ e for each query row.  out: [n_rows, head_dim].
void finish_partial(const float* run, int n_rows, int head_dim, float* out) {
  const int stride = 2 + head_dim;
  for (int jj = 0; jj < n_rows; ++jj) {
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
  GEM_CHECK(max_group <= kAttnMaxRows, "attention: %d query heads per KV head, at most %d",
            max_group, kAttnMaxRows);
  max_rows = std::max(max_group, kAttnBlockRows);
  max_head_dim = head_dim_max;
  max_kv_heads = n_kv_heads_max;
  max_ranges = max_keys / kAttnChunk + 2;
  thread_floats = static_cast<int64_t>(max_rows) * (kAttnChunk + 2 * (2 + max_head_dim));
  floats.assign(static_cast<size_t>(n_threads) * thread_floats, 0.0f);
  k_ptr.assign(static_cast<size_t>(n_threads) * kAttnChunk, nullptr);
  v_ptr.assign(static_cast<size_t>(n_threads) * kAttnChunk, nullptr);
  k_pos.assign(static_cast<size_t>(n_threads) * kAttnChunk, 0);
  v_f16.assign(static_cast<size_t>(n_threads) * kAttnChunk, 0);
  ranges.assign(static_cast<size_t>(n_threads) * (max_ranges + 1), 0);
  partials.assign(static_cast<size_t>(max_kv_heads) * max_ranges * max_group * (2 + max_head_dim), 0.0f);
}

uint64_t AttentionScratch::bytes() const {
  return floats.size() * sizeof(float) + (k_ptr.size() + v_ptr.size()) * sizeof(void*) +
         k_pos.size() * sizeof(int32_t) + v_f16.size() + ranges.size() * sizeof(int32_t) +
         partials.size() * sizeof(float);
}

void attention_fast(const float* q, const int32_t* q_pos, int n_tokens, int n_heads,
                    int n_kv_heads, int head_dim, int window, float scale,
                    std::span<const KvSegment> segments, float* out, ThreadPool& pool,
                    AttentionScratch& scratch, Isa isa) {
  const OpsKernels& ops = ops_kernels(isa);
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

  if (n_tokens == 1) {
    // Decode: too few (token, KV head) pairs to keep the threads busy; split the keys instead.
    int32_t* ranges = scratch.ranges.data();
    const int n_ranges = chunk_ranges(segments, q_pos, 1, window, ranges);
    GEM_CHECK(n_ranges > 0, "query at position %d sees no key", q_pos[0]);
    const int64_t part_floats = static_cast<int64_t>(group) * stride;
    float* partials = scratch.partials.data();
    pool.parallel_for(static_cast<int64_t>(n_kv_heads) * n_ranges, [&](int64_t begin, int64_t end, int thread) {
      const ThreadBuffers b = thread_buffers(scratch, thread, head_dim);
      for (int64_t unit = begin; unit < end; ++unit) {
        const int g = static_cast<int>(unit / n_ranges);
        const int k = static_cast<int>(unit % n_ranges);
        const float* rows[kAttnMaxRows];
        for (int jj = 0; jj < group; ++jj) {
          rows[jj] = q + (static_cast<int64_t>(g) * group + jj) * head_dim;
        }
        chunk_partial(ops, rows, q_pos, 1, group, g, head_dim, window, scale, segments, ranges[k],
                      ranges[k + 1], b, partials + unit * part_floats);
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

  // Prompt tiles: a task is one KV head and a block of consecutive tokens (up to kAttnBlockRows
  // query rows, so each K/V row loaded serves all of them), its chunks merged in order. Tasks
  // go head by head (consecutive tasks read the same K/V: 12B sliding layers at depth 4096, 1.46×
  // fewer CPU-seconds than alternating heads, whose 1 MB of K/V each left the L2), within a head
  // latest block first (causal: the latest see the most keys), to whichever thread is free.
  int block_tok = std::max(1, kAttnBlockRows / group);
  auto blocks = [&](int tok) { return (n_tokens + tok - 1) / tok; };
  while (block_tok > 1 && blocks(block_tok) * n_kv_heads < 4 * pool.size()) block_tok /= 2;
  const int n_blocks = blocks(block_tok);
  const int64_t n_units = static_cast<int64_t>(n_blocks) * n_kv_heads;
  pool.parallel_for_dynamic(n_units, 1, [&](int64_t begin, int64_t end, int slot) {
    const ThreadBuffers b = thread_buffers(scratch, slot, head_dim);
    for (int64_t unit = begin; unit < end; ++unit) {
      const int g = static_cast<int>(unit / n_blocks);
      const int blk = n_blocks - 1 - static_cast<int>(unit % n_blocks);
      const int t0 = blk * block_tok;
      const int n_tok = std::min(block_tok, n_tokens - t0);
      const int n_rows = n_tok * group;
      const float* rows[kAttnMaxRows];
      bool started[kAttnMaxRows];
      for (int r = 0; r < n_rows; ++r) {
        const int64_t head = static_cast<int64_t>(t0 + r / group) * n_heads + g * group + r % group;
        rows[r] = q + head * head_dim;
        started[r] = false;
      }
      const int n_ranges = chunk_ranges(segments, q_pos + t0, n_tok, window, b.ranges);
      for (int k = 0; k < n_ranges; ++k) {
        chunk_partial(ops, rows, q_pos + t0, n_tok, group, g, head_dim, window, scale, segments,
                      b.ranges[k], b.ranges[k + 1], b, b.part);
        for (int r = 0; r < n_rows; ++r) {
          const float* pr = b.part + r * stride;
          float* rr = b.run + r * stride;
          if (pr[1] == 0.0f) continue;  // row r sees no key of this chunk
          if (started[r]) {
            merge_partial(rr, pr, 1, head_dim);
          } else {
            std::copy(pr, pr + stride, rr);
            started[r] = true;
          }
        }
      }
      for (int r = 0; r < n_rows; ++r) {
        GEM_CHECK(started[r], "query at position %d sees no key", q_pos[t0 + r / group]);
      }
      for (int t = 0; t < n_tok; ++t) {
        finish_partial(b.run + static_cast<int64_t>(t) * group * stride, group, head_dim,
                       out + (static_cast<int64_t>(t0 + t) * n_heads + g * group) * head_dim);
      }
    }
  });
}

void rms_norm_fast(const float* x, const float* w, int64_t n_rows, int n_cols, float eps, float* y,
                   ThreadPool& pool, Isa isa) {
  const OpsKernels& ops = ops_kernels(isa);
  pool.parallel_for(n_rows, [&](int64_t begin, int64_t end, int) {
    for (int64_t r = begin; r < end; ++r) {
      const float* xr = x + r * n_cols;
      float* yr = y + r * n_cols;
      const float inv_rms = 1.0f / std::sqrt(ops.dot_f32(xr, xr, n_cols) / n_cols + eps);
      if (w != nullptr) {
        for (int i = 0; i < n_cols; ++i) yr[i] = xr[i] * inv_rms * w[i];
      } else {
        for (int i = 0; i < n_cols; ++i) yr[i] = xr[i] * inv_rms;
      }
    }
  });
}

void gelu_tanh_mul_fast(float* gate, const float* up, int64_t n, ThreadPool& pool, Isa isa) {
  const OpsKernels& ops = ops_kernels(isa);
  pool.parallel_for(n, [&](int64_t begin, int64_t end, int) {
    ops.gelu_tanh_mul(gate + begin, up + begin, end - begin);
  });
}

}  // namespace gem::cpu
