// Fast variants of the ops in ops_ref.h for the CPU fast path: float accumulation, parallel over
// (token, head) or rows through the pool, inner loops on a SIMD path chosen at run time
// (isa.h: AVX-512 or AVX2 kernels where the CPU has them, else plain loops; ops_kernels.h). Same
// parameters in the same order as the reference, plus the pool and scratch, and last the path
// (active_isa() unless a test or benchmark names another supported one).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backend/cpu/isa.h"
#include "backend/cpu/ops_ref.h"
#include "backend/cpu/thread_pool.h"

namespace gem::cpu {

// Float helpers (vectorised): Σ a[i]·b[i]; the same with b stored as IEEE half; y += s·x.
float dot_f32(const float* a, const float* b, int n, Isa isa = active_isa());
float dot_f16(const float* a, const uint16_t* b, int n, Isa isa = active_isa());
void axpy_f32(float s, const float* x, float* y, int n, Isa isa = active_isa());
void axpy_f16(float s, const uint16_t* x, float* y, int n, Isa isa = active_isa());

// x[i] <- f16(x[i]): rounds values to what an f16 cache will hand back.
void round_to_f16(float* x, int64_t n, Isa isa = active_isa());

// Attention works on chunks of kAttnChunk absolute positions: each chunk's visible keys give a
// partial softmax (max, sum, weighted V) for every query head of a KV group (K and V read once
// per group), and the partials are merged in position order. The chunking depends only on
// positions, so the result does not depend on tiling or on how the work is spread over threads.
constexpr int kAttnChunk = 256;
// Prompt tiles: query rows (tokens × the query heads of one KV head) per task, so that each K
// and V row loaded serves that many rows — up to kAttnBlockRows, fewer when a short tile would
// leave the pool fewer than 4 tasks per thread. kAttnMaxRows bounds the rows of one task (and so
// the query heads per KV head). 64 rows rather than 16: 12B full layers at depth 4096 (one KV
// head, every task reads 9 MB of K/V) 1.3× fewer CPU-seconds on AVX-512, sliding layers the
// same (bench/results/cpu.md).
constexpr int kAttnBlockRows = 64;
constexpr int kAttnMaxRows = 64;

// Scratch of attention_fast, sized once for the largest layer and context.
struct AttentionScratch {
  int n_threads = 0;
  int max_group = 0;       // query heads per KV head
  int max_rows = 0;        // query rows of one task: max(max_group, kAttnBlockRows)
  int max_head_dim = 0;
  int max_ranges = 0;      // chunks one query can span
  int max_kv_heads = 0;
  int64_t thread_floats = 0;
  std::vector<float> floats;        // [n_threads, thread_floats]: scores, chunk and running partials
  std::vector<const void*> k_ptr;   // [n_threads, kAttnChunk] K rows of the current chunk
  std::vector<const void*> v_ptr;   // [n_threads, kAttnChunk] V rows of the current chunk
  std::vector<int32_t> k_pos;       // [n_threads, kAttnChunk] their positions
  std::vector<uint8_t> v_f16;       // [n_threads, kAttnChunk] their storage (1 = f16)
  std::vector<int32_t> ranges;      // [n_threads, max_ranges + 1] chunk starts (visit indices)
  std::vector<float> partials;      // [max_kv_heads, max_ranges, max_group, 2 + head_dim] (decode)
  void init(int threads, int n_heads, int n_kv_heads_min, int n_kv_heads_max, int head_dim_max,
            int max_keys);
  uint64_t bytes() const;
};

// attention() of ops_ref.h in float. One token: parallel over (KV head, chunk); several tokens:
// over (KV head, block of tokens), register tiles of query rows × keys. Bit-identical either way
// on one path: a row's arithmetic does not depend on the rows it is computed with.
void attention_fast(const float* q, const int32_t* q_pos, int n_tokens, int n_heads,
                    int n_kv_heads, int head_dim, int window, float scale,
                    std::span<const KvSegment> segments, float* out, ThreadPool& pool,
                    AttentionScratch& scratch, Isa isa = active_isa());

// rms_norm() of ops_ref.h in float, rows split over the pool.
void rms_norm_fast(const float* x, const float* w, int64_t n_rows, int n_cols, float eps, float* y,
                   ThreadPool& pool, Isa isa = active_isa());

// gelu_tanh_mul() of ops_ref.h in float, as u / (1 + e^(-2z)) (no cancellation for negative u;
// a vector e^x on the SIMD paths), split over the pool; no element's value depends on the split.
void gelu_tanh_mul_fast(float* gate, const float* up, int64_t n, ThreadPool& pool,
                        Isa isa = active_isa());

}  // namespace gem::cpu
