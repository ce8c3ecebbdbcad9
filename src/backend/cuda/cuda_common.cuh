// Small device helpers shared by the kernels of this folder: warp/block reductions, the error
// check used by every launcher, and the tanh GELU.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

namespace gem::cuda {

// Launch errors are programming errors (bad shapes), not bad input: abort with the place.
#define GEM_CUDA_CHECK(expr)                                                              \
  do {                                                                                    \
    cudaError_t gem_err_ = (expr);                                                        \
    if (gem_err_ != cudaSuccess) {                                                        \
      std::fprintf(stderr, "%s:%d: CUDA error %s: %s\n", __FILE__, __LINE__, #expr,       \
                   cudaGetErrorString(gem_err_));                                         \
      std::abort();                                                                       \
    }                                                                                     \
  } while (0)
#define GEM_CUDA_LAUNCHED() GEM_CUDA_CHECK(cudaGetLastError())

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, ≤ 1024); every thread gets the result.
// `red` is __shared__ float[32]. Starts with a barrier so it can be called back to back.
__device__ __forceinline__ float block_sum(float v, float* red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) red[warp] = v;
  __syncthreads();
  v = lane < n_warps ? red[lane] : 0.0f;
  return warp_sum(v);
}

__device__ __forceinline__ float gelu_tanh(float u) {
  const float k = 0.7978845608028654f;  // sqrt(2/pi)
  return 0.5f * u * (1.0f + tanhf(k * (u + 0.044715f * u * u * u)));
}

}  // namespace gem::cuda
