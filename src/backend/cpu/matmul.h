// Matrix products of the CPU backend: y = W·x for a batch of token rows, W a weight view in
// F32, Q4_0, Q8_0 or Q6_K. matmul_ref is the specification (dequantise a row, float dot with
// double accumulation); matmul is the fast path (SIMD, threads; it may round x to 8 bits in
// blocks as llama.cpp does — the tests bound that error).
#pragma once

#include <cstdint>

#include "backend/cpu/thread_pool.h"
#include "model/model.h"

namespace gem::cpu {

// w: [rows, cols] (TensorView rows = out features, cols = in features).
// x: [n_tokens, w.cols] row-major f32.   y: [n_tokens, w.rows] row-major f32 (overwritten).
void matmul_ref(const model::TensorView& w, const float* x, int n_tokens, float* y);
void matmul(const model::TensorView& w, const float* x, int n_tokens, float* y, ThreadPool& pool);

// Row `row` of w dequantised into out[w.cols] (embedding lookup).
void get_row(const model::TensorView& w, int64_t row, float* out);

}  // namespace gem::cpu
