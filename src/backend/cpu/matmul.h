// Matrix products of the CPU backend: y = W·x for a batch of token rows, W a weight view in
// F32, Q4_0, Q8_0 or Q6_K. matmul_ref is the specification (dequantise a row, dot with double
// accumulation); matmul is the fast path (SIMD, threads), which rounds x to 8 bits in blocks as
// llama.cpp's CPU backend does (numerics below; the tests bound that error).
//
// Fast-path numerics (what is quantised):
//   F32 weights:  x is used as is; float FMA dot products (8 or 16 partial sums).
//   Q4_0, Q8_0:   x is rounded per 32-value block, Q8_0-style: d = amax/127, q = round-to-
//                 nearest-even(x·127/amax) in [-127, 127], and d itself rounded to fp16 (as
//                 llama.cpp's quantize_row_q8_0). Each block's integer dot Σ q_w·q_x is exact;
//                 y = Σ_blocks d_w·d_x·isum in float.
//   Q6_K:         x is rounded per 256-value block, Q8_K-style: m = the value of largest |x|,
//                 q = round-to-nearest-even(x·(-127/m)), d = 1/(-127/m) kept in f32 (as
//                 llama.cpp's quantize_row_q8_K). Integer dot with the 16 sub-block scales is
//                 exact; y = Σ_superblocks d_w·d_x·isum in float.
// So the fast path corresponds to llama.cpp's quantised-activation numerics (fixture tags
// `tiny-q4_0`, `tiny256-q6_k`), not to the `.exact` tags; its error against matmul_ref is at most
// Σ_blocks Σ|w|·d_x/2 plus fp16/f32 rounding (derivation in tests/kernels_cpu/matmul_test.cc).
// round_activations gives exactly the x that the fast path multiplies with, so
// matmul_ref(w, round_activations(x)) agrees with matmul to float-accumulation accuracy.
#pragma once

#include <cstdint>
#include <string_view>

#include "backend/cpu/isa.h"
#include "backend/cpu/packed.h"
#include "backend/cpu/thread_pool.h"
#include "model/model.h"

namespace gem::cpu {

// w: [rows, cols] (TensorView rows = out features, cols = in features).
// x: [n_tokens, w.cols] row-major f32.   y: [n_tokens, w.rows] row-major f32 (overwritten).
void matmul_ref(const model::TensorView& w, const float* x, int n_tokens, float* y);
// packed: w's copy in the 16-row layout (packed.h), or null; the x86 paths then run their
// packed kernels (same numerics: the same rounded x, exact integer block dots).
void matmul(const model::TensorView& w, const float* x, int n_tokens, float* y, ThreadPool& pool,
            const PackedMatrix* packed = nullptr);
// matmul on a given path (isa.h; must be supported): the tests run every path the host has.
void matmul_on(Isa isa, const model::TensorView& w, const float* x, int n_tokens, float* y,
               ThreadPool& pool, const PackedMatrix* packed);

// Row `row` of w dequantised into out[w.cols] (embedding lookup). Bit-exact: value = d·(q-8)
// (Q4_0), d·q (Q8_0), d·sc·(q-32) (Q6_K) in f32; F32 rows are copied; F16/BF16 converted.
void get_row(const model::TensorView& w, int64_t row, float* out);

// True when `isa` has a kernel for the packed layout of type t (Q4_0, Q8_0 and Q6_K on the x86
// SIMD paths; none elsewhere): what PackedWeights packs.
bool has_packed_kernel(Isa isa, DType t);

// True for the weight types matmul and matmul_ref accept (F32, Q4_0, Q8_0, Q6_K).
bool matmul_supports(DType t);

// The fast path's activation rounding for weights of type `weight_type`: out[cols] is the value
// each x[i] is replaced with (q·d). F32 weights: a copy. cols must be a multiple of the block.
void round_activations(DType weight_type, const float* x, int64_t cols, float* out);
// One 32-value block as the fast path rounds it for Q4_0/Q8_0 weights: q[32] =
// round-to-nearest-even(x·127/amax) in [-127, 127]; returns d = amax/127 rounded to fp16.
float round_block_q8(const float* x, int8_t* q);
// The same through the rounding code matmul runs (SIMD where built); equal to round_activations
// bit for bit (the test of the vector rounding).
void round_activations_simd(DType weight_type, const float* x, int64_t cols, float* out);

// The path matmul runs (isa.h's active_isa): "avx512", "avx2", "neon" or "scalar".
std::string_view matmul_isa();

// The portable path (matmul_on(Isa::kScalar, ...)): same activation rounding and integer dot
// products as matmul, in plain C++ with no SIMD intrinsics.
void matmul_scalar(const model::TensorView& w, const float* x, int n_tokens, float* y,
                   ThreadPool& pool);

}  // namespace gem::cpu
