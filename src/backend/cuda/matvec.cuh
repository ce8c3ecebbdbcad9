// Launchers of the products: decode matrix-vector products (Q4_0/Q8_0/Q6_K against q8
// activations, F32 against f32), the fused gate|up GELU product, and the weights' repack and f16
// dequantisation.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "backend/cuda/types.cuh"

namespace gem::cuda {

// Whether matvec reads a matrix's input as q8 (xq: Q4_0, Q8_0, Q6_K) rather than f32 (x: F32).
inline bool matvec_reads_q8(WType t) { return t != WType::kF32; }

// y[t, r] = Σ_c W[r, c]·x[t, c] for n ≤ a few rows; Q4_0/Q8_0/Q6_K take xq (q8), F32 takes x.
// With cap > 0 the result is soft-capped (the output head). The weights' load policy:
// t.mv_evict_first, t.mv_preload.
void matvec(const DevMatrix& w, const float* x, Q8Act xq, int n, float* y, float cap,
            cudaStream_t s, const CudaTuning& t = kDefaultTuning);
// Fused FFN for decode: g[t, i] = gelu_tanh(gate[i]·x) · (up[i]·x), gate/up Q4_0.
void matvec_gated(const DevMatrix& gate, const DevMatrix& up, Q8Act xq, int n, float* g,
                  cudaStream_t s, const CudaTuning& t = kDefaultTuning);
// GGUF blocks (Q4_0 when !q8, Q8_0 when q8) → split layout: qs [n_blocks, 16|32], d [n_blocks].
void repack_blocks(const uint8_t* raw, int64_t n_blocks, bool q8, uint8_t* qs, __half* d,
                   cudaStream_t s);
// Dequantises rows [r0, r0+nr) of w into f16 [nr, cols] (prefill products).
void dequant_f16(const DevMatrix& w, int64_t r0, int64_t nr, __half* out, cudaStream_t s);

}  // namespace gem::cuda
