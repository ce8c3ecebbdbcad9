// Launchers of the norms and epilogues: the RMS norm, the residual epilogues that end each half
// of a layer (residual add, the post norm, the next norm and the q8 copy the next product reads),
// and the q8 quantisation of activations.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "backend/cuda/types.cuh"

namespace gem::cuda {

// y = rms_norm(x, w) row-wise (w may be null); optional q8 copy of y (cols % 32 == 0).
// One-row launches run as clusters of t.res_cluster blocks (every launcher below but the last).
// decode_form: each of the n rows computed as a one-row (decode) launch computes it (the rows
// pass), bit for bit; otherwise prompt tiles' rows may take another reduction order.
void rms_norm(const float* x, const float* w, int n, int cols, float eps, float* y, Q8Act yq,
              cudaStream_t s, const CudaTuning& t = kDefaultTuning, bool decode_form = false);
// After attention: x += rms_norm(a, w_post); h = rms_norm(x, w_next); hq = q8(h) if hq.q.
void residual_norm(float* x, const float* a, const float* w_post, const float* w_next, int n,
                   int cols, float eps, float* h, Q8Act hq, cudaStream_t s,
                   const CudaTuning& t = kDefaultTuning, bool decode_form = false);
// After the FFN: x = (x + rms_norm(f, w_post)) · out_scale[0]; then h = rms_norm(x, w_next)
// and its q8 copy when w_next is given (the next layer's attn_norm or the final output_norm).
void residual_norm_scale(float* x, const float* f, const float* w_post, const float* out_scale,
                         const float* w_next, int n, int cols, float eps, float* h, Q8Act hq,
                         cudaStream_t s, const CudaTuning& t = kDefaultTuning,
                         bool decode_form = false);
// q8 copy of x ([n, cols], cols % 32 == 0) for the decode products.
void quantize_q8(const float* x, int n, int cols, Q8Act xq, cudaStream_t s);

}  // namespace gem::cuda
