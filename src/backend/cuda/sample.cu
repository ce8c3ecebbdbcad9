// Token choice on the device, so a decode step moves 4 bytes to the host instead of the
// logits: llama.cpp's penalties (as sampler/sampler.cc applies them) on a copy of the logits,
// then the arg-max (lowest id on ties).
#include <cuda_runtime.h>

#include <cfloat>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/kernels.cuh"

namespace gem::cuda {
namespace {

constexpr int kArgmaxBlocks = 264;
constexpr int kThreads = 256;
constexpr int kMaxHist = 256;  // history entries the device pick looks at (repeat_last_n)

// One thread per history entry; the first occurrence of each id applies that id's penalty.
__global__ void penalize_kernel(const float* logits, PenaltyArgs pen, float* out) {
  for (int i = threadIdx.x; i < pen.n_hist; i += blockDim.x) {
    const int32_t id = pen.hist[i];
    bool first = true;
    int count = 0;
    for (int k = 0; k < pen.n_hist; ++k) {
      if (pen.hist[k] == id) {
        if (k < i) first = false;
        ++count;
      }
    }
    if (!first) continue;
    float v = logits[id];
    if (pen.repeat_penalty != 1.0f) v = v <= 0.0f ? v * pen.repeat_penalty : v / pen.repeat_penalty;
    v -= static_cast<float>(count) * pen.frequency_penalty + pen.presence_penalty;
    out[id] = v;
  }
}

__device__ __forceinline__ void better(float& v, int& id, float v2, int id2) {
  if (v2 > v || (v2 == v && id2 < id)) {
    v = v2;
    id = id2;
  }
}

__device__ void block_argmax(float v, int id, float* sv, int* si, float* out_v, int* out_id) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    better(v, id, __shfl_xor_sync(0xffffffffu, v, o), __shfl_xor_sync(0xffffffffu, id, o));
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) {
    sv[warp] = v;
    si[warp] = id;
  }
  __syncthreads();
  if (warp == 0) {
    v = lane < (blockDim.x >> 5) ? sv[lane] : -FLT_MAX;
    id = lane < (blockDim.x >> 5) ? si[lane] : 0x7fffffff;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      better(v, id, __shfl_xor_sync(0xffffffffu, v, o), __shfl_xor_sync(0xffffffffu, id, o));
    }
    if (lane == 0) {
      *out_v = v;
      *out_id = id;
    }
  }
}

// Per block: the arg-max over ids that are not in the history (history ids compete in the
// final pass with their penalised values).
__global__ void argmax_partial_kernel(const float* x, PenaltyArgs pen, int n, float* pv, int* pi) {
  __shared__ float sv[32];
  __shared__ int si[32];
  __shared__ int hist[kMaxHist];
  const int n_hist = pen.n_hist < kMaxHist ? pen.n_hist : kMaxHist;
  for (int k = threadIdx.x; k < n_hist; k += blockDim.x) hist[k] = pen.hist[k];
  __syncthreads();
  float v = -FLT_MAX;
  int id = 0x7fffffff;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    bool in_hist = false;
    for (int k = 0; k < n_hist; ++k) in_hist |= hist[k] == i;
    if (!in_hist) better(v, id, x[i], i);
  }
  block_argmax(v, id, sv, si, &pv[blockIdx.x], &pi[blockIdx.x]);
}

__global__ void argmax_final_kernel(const float* pen_x, PenaltyArgs pen, const float* pv,
                                    const int* pi, int n_part, int32_t* out) {
  __shared__ float sv[32];
  __shared__ int si[32];
  __shared__ float rv;
  __shared__ int ri;
  float v = -FLT_MAX;
  int id = 0x7fffffff;
  for (int i = threadIdx.x; i < n_part; i += blockDim.x) better(v, id, pv[i], pi[i]);
  const int n_hist = pen.n_hist < kMaxHist ? pen.n_hist : kMaxHist;
  for (int k = threadIdx.x; k < n_hist; k += blockDim.x) better(v, id, pen_x[pen.hist[k]], pen.hist[k]);
  block_argmax(v, id, sv, si, &rv, &ri);
  __syncthreads();
  if (threadIdx.x == 0) *out = ri;
}

}  // namespace

void argmax_penalized(const float* logits, int n_vocab, const PenaltyArgs& pen, int32_t* out,
                      float* scratch, cudaStream_t s) {
  float* pv = scratch;
  int* pi = reinterpret_cast<int*>(scratch + kArgmaxBlocks);
  float* pen_x = scratch + 2 * kArgmaxBlocks;  // [n_vocab]: penalised values of history ids
  if (pen.n_hist > 0) {
    penalize_kernel<<<1, kThreads, 0, s>>>(logits, pen, pen_x);
    GEM_CUDA_LAUNCHED();
  }
  argmax_partial_kernel<<<kArgmaxBlocks, kThreads, 0, s>>>(logits, pen, n_vocab, pv, pi);
  GEM_CUDA_LAUNCHED();
  argmax_final_kernel<<<1, kThreads, 0, s>>>(pen_x, pen, pv, pi, kArgmaxBlocks, out);
  GEM_CUDA_LAUNCHED();
}

int argmax_scratch_floats(int n_vocab) { return 2 * kArgmaxBlocks + n_vocab; }

}  // namespace gem::cuda
