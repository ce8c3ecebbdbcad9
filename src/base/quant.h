// Block quantisation formats gem computes with (Q4_0, Q8_0, Q6_K; spec §1): bit-exact row
// decoders to float32, and round-to-nearest reference quantisers used by `gem synth` and tests.
// The decoders are the CPU reference; fast kernels are checked against them.
#pragma once

#include <cstdint>

#include "base/dtype.h"

namespace gem {

// Decode n values (n a multiple of the block size) from consecutive blocks. Every product in
// these formats is exact in float32, so the output is bit-identical to llama.cpp's decoders,
// signs of zero included: each value is computed as d * q (Q8_0), d * (nibble - 8) (Q4_0) and
// d * sc * (code - 32) (Q6_K), never as a rewritten sum.
void dequantize_row_q4_0(const void* blocks, float* out, int64_t n);
void dequantize_row_q8_0(const void* blocks, float* out, int64_t n);
void dequantize_row_q6_k(const void* blocks, float* out, int64_t n);

// True for the types dequantize_row decodes: F32, F16, BF16, Q4_0, Q8_0, Q6_K.
bool can_dequantize(DType type);
// Decodes n values of `type` (n a multiple of its block size); aborts on other types, since
// the loader rejects them before any row is decoded.
void dequantize_row(DType type, const void* data, float* out, int64_t n);

// Round-to-nearest quantisers. q8_0 and q4_0 match shared/tools/gguf_synth.py quant_q8_0 /
// quant_q4_0 byte for byte (float32 arithmetic in the same order, ties to even for Q8_0).
void quantize_row_q8_0(const float* x, void* blocks, int64_t n);
void quantize_row_q4_0(const float* x, void* blocks, int64_t n);
// Q6_K: per 16-value group a scale found by a small weighted least-squares search, int8
// sub-scales relative to an fp16 super-block scale, codes re-rounded with the stored scales;
// the same bytes as llama-quantize's reference Q6_K quantiser (no importance matrix).
void quantize_row_q6_k(const float* x, void* blocks, int64_t n);
// F32/F16/BF16/Q4_0/Q8_0/Q6_K; aborts on other types.
void quantize_row(DType type, const float* x, void* data, int64_t n);

}  // namespace gem
