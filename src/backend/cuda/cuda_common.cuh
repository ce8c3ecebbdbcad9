// Small device helpers shared by the kernels of this folder: warp/block reductions, the error
// check used by every launcher, and the tanh GELU.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <utility>

#include "backend/cuda/types.cuh"

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

// Programmatic dependent launch (PDL). Every kernel of this folder that `launch` starts calls
// pdl_wait() before it reads anything an earlier kernel wrote or writes anything at all, and
// pdl_trigger() early, so that the next kernel of the stream is launched while this one runs:
// its blocks take the slots this grid frees and do their independent prologue (weight loads)
// before their own pdl_wait(). Without the launch attribute both are no-ops. What an earlier
// kernel wrote is read with plain loads, never __ldg or a const __restrict__ pointer: the
// compiler treats a non-coherent load as reading read-only memory and may hoist it above
// pdl_wait() (it did once, and decode went wrong on the tiny fixtures).
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}

// Asynchronous 16-byte copies global → shared (cp.async.cg: through L2, so after pdl_wait they
// see the previous kernel's writes), their commit groups, and the wait for all but N groups.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;" ::: "memory");
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

// Whether launches of this thread carry the PDL attribute (on until set_pdl says otherwise):
// the backend sets it per tile from CudaTuning::pdl.
bool pdl_enabled();
void set_pdl(bool on);

// Launches `kernel` on `s` in clusters of `cluster` blocks along x (1: no cluster attribute),
// with the PDL attribute when pdl_enabled().
template <typename... KArgs, typename... Args>
void launch_clustered(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem,
                      cudaStream_t s, unsigned cluster, Args&&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cudaLaunchAttribute attr[2];
  unsigned n_attr = 0;
  if (pdl_enabled()) {
    attr[n_attr].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[n_attr].val.programmaticStreamSerializationAllowed = 1;
    ++n_attr;
  }
  if (cluster > 1) {
    attr[n_attr].id = cudaLaunchAttributeClusterDimension;
    attr[n_attr].val.clusterDim.x = cluster;
    attr[n_attr].val.clusterDim.y = 1;
    attr[n_attr].val.clusterDim.z = 1;
    ++n_attr;
  }
  cfg.attrs = n_attr > 0 ? attr : nullptr;
  cfg.numAttrs = n_attr;
  GEM_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
}

// Launches `kernel` on `s`, with the PDL attribute when pdl_enabled().
template <typename... KArgs, typename... Args>
void launch(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t s,
            Args&&... args) {
  launch_clustered(kernel, grid, block, smem, s, 1, std::forward<Args>(args)...);
}

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

// Quantises one 32-value block held one value per lane (the whole warp calls it): the q8 form
// of types.cuh's Q8Act, q = round-to-nearest-even(v·(127/max|v|)) — the CPU reference's
// formula (backend/cpu/matmul.cc), so both sides give the same q for the same v — with
// s = max|v|/127 (as max|v|·(1/127): one division per lane, not two) rounded to 22 significant
// bits (Q8Ds; 2^-21 relative at most, all told; q does not depend on s), ds = (s, Σq).
// The max and the sum are single warp reductions (redux.sync) rather than shuffle trees: for
// non-negative floats the bit patterns order as unsigned integers, and Σq is an integer, so the
// results are the same bits (these run once per activation value in the latency-bound decode
// epilogues, where the shuffles were most of the issued instructions).
__device__ __forceinline__ void q8_block_out(float v, int8_t* q, Q8Ds* ds, int lane) {
  const float amax = __uint_as_float(__reduce_max_sync(0xffffffffu, __float_as_uint(fabsf(v))));
  // Rounded to nearest on the two low bits of the significand (a carry moves into the exponent).
  const float s = __uint_as_float((__float_as_uint(amax * (1.0f / 127.0f)) + 2u) & ~3u);
  const float id = amax > 0.0f ? 127.0f / amax : 0.0f;
  // Clamped like the CPU's: a block whose max is subnormal makes 127/max infinite.
  const int qi = max(-127, min(127, __float2int_rn(v * id)));
  q[lane] = static_cast<int8_t>(qi);
  const int qsum = __reduce_add_sync(0xffffffffu, qi);
  if (lane == 0) *ds = Q8Ds{s, qsum};
}

__device__ __forceinline__ float gelu_tanh(float u) {
  const float k = 0.7978845608028654f;  // sqrt(2/pi)
  return 0.5f * u * (1.0f + tanhf(k * (u + 0.044715f * u * u * u)));
}

}  // namespace gem::cuda
