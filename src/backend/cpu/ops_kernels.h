// Internal to the fast ops (ops_fast.cc): the SIMD kernels of one path (isa.h) as a table. The
// scalar table lives in ops_fast.cc; ops_avx2.cc and ops_avx512.cc are compiled with their own
// target flags (src/backend/cpu/CMakeLists.txt) and reached only through ops_kernels(), after
// isa.cc has checked CPUID, so they define nothing else outside anonymous namespaces (the
// isa_objects test checks their symbols).
//
// Within one table every kernel computes each output element by a fixed sequence of
// operations that does not depend on which other rows, keys or lanes it is computed with; that
// is what keeps a prompt tile bit-identical to token-by-token decoding (ops_fast.h).
#pragma once

#include <cstdint>

#include "backend/cpu/simd_kernels.h"  // GEM_CPU_X86

namespace gem::cpu::detail {

// Row stride of the attention score buffers (ops_fast.h's kAttnChunk).
inline constexpr int kScoreStride = 256;

struct OpsKernels {
  float (*dot_f32)(const float* a, const float* b, int n);
  float (*dot_f16)(const float* a, const uint16_t* b, int n);
  void (*axpy_f32)(float s, const float* x, float* y, int n);
  void (*axpy_f16)(float s, const uint16_t* x, float* y, int n);
  void (*round_to_f16)(float* x, int64_t n);
  // gate[i] = gelu_tanh(gate[i]) · up[i], i in [0, n).
  void (*gelu_tanh_mul)(float* gate, const float* up, int64_t n);
  // One softmax row of a chunk: m = max of s[i] over the keys a query at q_pos sees
  // (attention_visible of k_pos[i]; -inf when none), then s[i] = e^(s[i] - m) for those keys and
  // 0 for the others, i in [0, n), n <= kScoreStride. Returns m. May write s[n .. round_up(n, 16)).
  float (*softmax_exp)(float* s, const int32_t* k_pos, int n, int32_t q_pos, int window);
  // Attention chunk tiles for head_dim % 16 == 0, or null (then the plain loops over dot/axpy):
  //   scores[r·kScoreStride + j] = scale · q_r·k_j            r < n_rows, j < n_keys
  //   acc_r[d] += Σ_j e[r·kScoreStride + j] · v_j[d]          one FMA per key, in key order
  // k/v rows are f16 (uint16_t) when f16, else f32.
  void (*chunk_scores)(const float* const* q, int n_rows, const void* const* k, bool f16,
                       int n_keys, int head_dim, float scale, float* scores);
  void (*chunk_pv)(const float* e, int n_rows, const void* const* v, bool f16, int n_keys,
                   int head_dim, float* const* acc);
};

#ifdef GEM_CPU_X86
const OpsKernels& avx2_ops();
// Only the kernels with an AVX-512 form; the null entries are the AVX2 table's (an AVX-512
// host runs both: isa.cc requires AVX2 for the avx512 path).
const OpsKernels& avx512_ops();
#endif

}  // namespace gem::cpu::detail
