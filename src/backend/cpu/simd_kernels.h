// Internal to the CPU matmul: the rounded-activation layout shared by every kernel, and the
// per-ISA tile functions (matmul.cc: scalar; matmul_avx2.cc: AVX2/AVX-512; matmul_neon.cc).
#pragma once

#include <cstdint>

#include "model/model.h"

#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define GEM_CPU_AVX2 1
#endif
#if defined(__aarch64__) && defined(__ARM_NEON)
#define GEM_CPU_NEON 1
#endif

namespace gem::cpu::detail {

// x after the fast path's rounding (see matmul.h), n_tokens rows of `cols`.
//   F32 weights:        only xf is set.
//   Q4_0/Q8_0 weights:  qs [n_tokens, cols] int8; d [n_tokens, cols/32] f32 (fp16-rounded).
//   Q6_K weights:       qs [n_tokens, cols] int8; d [n_tokens, cols/256] f32;
//                       bsums [n_tokens, cols/16] int16 (sum of qs over each 16-value group).
struct QuantizedX {
  int64_t cols = 0;
  int64_t n_blocks = 0;  // d entries per token
  const float* xf = nullptr;
  const int8_t* qs = nullptr;
  const float* d = nullptr;
  const int16_t* bsums = nullptr;
};

// y[t * ldy + r] = (W x_t)[r] for rows r in [r0, r1) and tokens t in [t0, t1).
using TileFn = void (*)(const model::TensorView& w, const QuantizedX& x, int64_t r0, int64_t r1,
                        int t0, int t1, float* y, int64_t ldy);

TileFn scalar_tile_fn(DType t);  // never null for the supported types
#ifdef GEM_CPU_AVX2
TileFn avx2_tile_fn(DType t);  // AVX-512 kernels where the target has them, else AVX2
const char* avx2_isa();
#endif
#ifdef GEM_CPU_NEON
TileFn neon_tile_fn(DType t);
#endif

}  // namespace gem::cpu::detail
