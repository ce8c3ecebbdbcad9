// Fast variants of the ops in ops_ref.h for the CPU fast path: float accumulation, AVX2/F16C
// dot products where the build has them, parallel over (token, head) or rows through the pool.
// Same parameters in the same order as the reference, plus the pool and scratch.
#pragma once

#include <cstdint>
#include <span>

#include "backend/cpu/ops_ref.h"
#include "backend/cpu/thread_pool.h"

namespace gem::cpu {

// Float helpers (vectorised): Σ a[i]·b[i]; the same with b stored as IEEE half; y += s·x.
float dot_f32(const float* a, const float* b, int n);
float dot_f16(const float* a, const uint16_t* b, int n);
void axpy_f32(float s, const float* x, float* y, int n);
void axpy_f16(float s, const uint16_t* x, float* y, int n);

// x[i] <- f16(x[i]): rounds values to what an f16 cache will hand back.
void round_to_f16(float* x, int64_t n);

// attention() of ops_ref.h in float, one (token, query head) per task. scratch holds
// pool.size() blocks of `scratch_per_thread` floats, each at least (Σ segment slots + head_dim).
void attention_fast(const float* q, const int32_t* q_pos, int n_tokens, int n_heads,
                    int n_kv_heads, int head_dim, int window, float scale,
                    std::span<const KvSegment> segments, float* out, ThreadPool& pool,
                    float* scratch, int64_t scratch_per_thread);

// rms_norm() of ops_ref.h in float, rows split over the pool.
void rms_norm_fast(const float* x, const float* w, int64_t n_rows, int n_cols, float eps, float* y,
                   ThreadPool& pool);

// gelu_tanh_mul() of ops_ref.h with tanhf, split over the pool.
void gelu_tanh_mul_fast(float* gate, const float* up, int64_t n, ThreadPool& pool);

}  // namespace gem::cpu
