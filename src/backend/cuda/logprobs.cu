// logprobs on the device: lse = log Σ exp(l_i) over one logits row, then l_token - lse and the
// top n (id, l_i - lse) in the order of the host reference (backend.cc row_logprobs: larger logit
// first, lower id on ties). Also CudaBackend::token_logprobs, which runs it on the last row.
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstring>

#include "backend/cuda/cuda_backend_impl.cuh"
#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/logprobs.cuh"
#include "backend/cuda/sample.cuh"
#include "base/check.h"

namespace gem::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxBlocks = 256;        // the merge runs one thread per block of the first pass
constexpr int kPerBlock = 4 * kThreads;

// (v, id) comes before (v2, id2): larger logit, then lower id (the host's order).
__device__ __forceinline__ bool ahead(float v, int id, float v2, int id2) {
  return v > v2 || (v == v2 && id < id2);
}

// The block's first (v, id) by `ahead` (every thread passes its own; exhausted ones pass
// (-inf, INT_MAX)), returned to every thread.
__device__ void block_first(float& v, int& id, float* sv, int* si) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float v2 = __shfl_xor_sync(0xffffffffu, v, o);
    const int id2 = __shfl_xor_sync(0xffffffffu, id, o);
    if (ahead(v2, id2, v, id)) {
      v = v2;
      id = id2;
    }
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();  // sv/si of the previous call are read
  if (lane == 0) {
    sv[warp] = v;
    si[warp] = id;
  }
  __syncthreads();
  v = sv[0];
  id = si[0];
  for (int w = 1; w < (blockDim.x >> 5); ++w) {
    if (ahead(sv[w], si[w], v, id)) {
      v = sv[w];
      id = si[w];
    }
  }
}

// A thread's candidates: its best k so far, kept sorted by `ahead`.
struct TopList {
  float v[kMaxRowLogprobTop];
  int id[kMaxRowLogprobTop];
  int n = 0;
  __device__ void offer(float x, int i, int k) {
    if (n == k && !ahead(x, i, v[n - 1], id[n - 1])) return;
    int j = n < k ? n++ : k - 1;  // the slot freed (the last one when full)
    while (j > 0 && ahead(x, i, v[j - 1], id[j - 1])) {
      v[j] = v[j - 1];
      id[j] = id[j - 1];
      --j;
    }
    v[j] = x;
    id[j] = i;
  }
};

// The block's k best of the threads' sorted lists, by k rounds of block_first: the thread whose
// head won moves on to its next. Written to out_v/out_id[0..k) by thread 0.
__device__ void block_top(const TopList& t, int k, float* sv, int* si, float* out_v, int* out_id) {
  int head = 0;
  for (int r = 0; r < k; ++r) {
    float v = head < t.n ? t.v[head] : -INFINITY;
    int id = head < t.n ? t.id[head] : INT_MAX;
    block_first(v, id, sv, si);
    if (head < t.n && t.id[head] == id) ++head;
    if (threadIdx.x == 0) {
      out_v[r] = v;
      out_id[r] = id;
    }
  }
}

// Pass 1, per block: max m_b, s_b = Σ exp(l - m_b) (f32) and the block's top k, over the ids
// blockIdx.x·blockDim.x + threadIdx.x + j·gridDim.x·blockDim.x.
__global__ void __launch_bounds__(kThreads)
    logprobs_partial_kernel(const float* logits, int n, int k, float* bmax, float* bsum,
                            float* cand_v, int* cand_id) {
  __shared__ float sv[32];
  __shared__ int si[32];
  __shared__ float red[32];
  const int stride = gridDim.x * blockDim.x;
  TopList top;
  float m = -INFINITY;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float x = logits[i];
    m = fmaxf(m, x);
    if (k > 0) top.offer(x, i, k);
  }
  // The block's max, then each thread's sum against it.
  float bm = m;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) bm = fmaxf(bm, __shfl_xor_sync(0xffffffffu, bm, o));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
  if (lane == 0) red[warp] = bm;
  __syncthreads();
  bm = red[0];
  for (int w = 1; w < n_warps; ++w) bm = fmaxf(bm, red[w]);
  float s = 0.0f;
  if (bm != -INFINITY) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) s += expf(logits[i] - bm);
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  __syncthreads();  // red's maxima are read
  if (lane == 0) red[warp] = s;
  __syncthreads();
  if (threadIdx.x == 0) {
    float total = 0.0f;
    for (int w = 0; w < n_warps; ++w) total += red[w];
    bmax[blockIdx.x] = bm;
    bsum[blockIdx.x] = total;
  }
  if (k > 0) {
    block_top(top, k, sv, si, cand_v + static_cast<int64_t>(blockIdx.x) * k,
              cand_id + static_cast<int64_t>(blockIdx.x) * k);
  }
}

// Pass 2, one block: lse = M + log Σ s_b·exp(m_b - M) (double), the token's logprob and the top
// k of the blocks' sorted candidate lists (thread b reads block b's).
__global__ void __launch_bounds__(kMaxBlocks)
    logprobs_final_kernel(const float* logits, int32_t token, int n_blocks, int k,
                          const float* bmax, const float* bsum, const float* cand_v,
                          const int* cand_id, RowLogprobs* out) {
  __shared__ float sv[32];
  __shared__ int si[32];
  __shared__ double lse_s;
  if (threadIdx.x == 0) {
    float big = -INFINITY;
    for (int b = 0; b < n_blocks; ++b) big = fmaxf(big, bmax[b]);
    double sum = 0.0;
    for (int b = 0; b < n_blocks; ++b) {
      if (bmax[b] != -INFINITY) sum += static_cast<double>(bsum[b]) * exp(static_cast<double>(bmax[b]) - big);
    }
    lse_s = static_cast<double>(big) + log(sum);
    out->lse = static_cast<float>(lse_s);
    out->token_logprob = static_cast<float>(static_cast<double>(logits[token]) - lse_s);
  }
  if (k == 0) return;
  TopList t;
  if (threadIdx.x < n_blocks) {
    for (int j = 0; j < k; ++j) {
      const int64_t c = static_cast<int64_t>(threadIdx.x) * k + j;
      if (cand_id[c] == INT_MAX) break;  // a block with fewer than k ids
      t.v[t.n] = cand_v[c];
      t.id[t.n] = cand_id[c];
      t.n++;
    }
  }
  __shared__ float top_v[kMaxRowLogprobTop];
  __shared__ int top_id[kMaxRowLogprobTop];
  block_top(t, k, sv, si, top_v, top_id);
  __syncthreads();
  if (threadIdx.x < k) {
    out->ids[threadIdx.x] = top_id[threadIdx.x];
    out->logprobs[threadIdx.x] = static_cast<float>(static_cast<double>(top_v[threadIdx.x]) - lse_s);
  }
}

int blocks_for(int n_vocab) {
  const int b = (n_vocab + kPerBlock - 1) / kPerBlock;
  return b < 1 ? 1 : (b > kMaxBlocks ? kMaxBlocks : b);
}

}  // namespace

int row_logprobs_scratch_floats(int n_vocab) {
  return blocks_for(n_vocab) * (2 + 2 * kMaxRowLogprobTop);
}

void row_logprobs(const float* logits, int n_vocab, int32_t token, int top_n, float* scratch,
                  RowLogprobs* out, cudaStream_t s) {
  const int nb = blocks_for(n_vocab);
  int k = top_n < 0 ? 0 : top_n;
  if (k > kMaxRowLogprobTop) k = kMaxRowLogprobTop;
  if (k > n_vocab) k = n_vocab;
  float* bmax = scratch;
  float* bsum = bmax + nb;
  float* cand_v = bsum + nb;
  int* cand_id = reinterpret_cast<int*>(cand_v + nb * kMaxRowLogprobTop);
  logprobs_partial_kernel<<<nb, kThreads, 0, s>>>(logits, n_vocab, k, bmax, bsum, cand_v, cand_id);
  GEM_CUDA_LAUNCHED();
  logprobs_final_kernel<<<1, kMaxBlocks, 0, s>>>(logits, token, nb, k, bmax, bsum, cand_v,
                                                 cand_id, out);
  GEM_CUDA_LAUNCHED();
}

TokenLogprobs CudaBackend::token_logprobs(int32_t token, int top_n) {
  // A row already on the host (read by logits(), or an all-logits eval) is read there.
  if (logits_rows_ != 1 || !logits_pending_) return Backend::token_logprobs(token, top_n);
  const int V = cfg_.n_vocab;
  GEM_CHECK(token >= 0 && token < V, "token_logprobs: token %d outside the vocabulary [0, %d)",
            token, V);
  // The sampling scratch (at least n_vocab floats): the result first, then the partials.
  static_assert(sizeof(cuda::RowLogprobs) % sizeof(float) == 0);
  constexpr int kOutFloats = sizeof(cuda::RowLogprobs) / sizeof(float);
  GEM_CHECK(kOutFloats + cuda::row_logprobs_scratch_floats(V) <= cuda::argmax_scratch_floats(V),
            "token_logprobs: the sampling scratch is too small");
  auto* out_dev = reinterpret_cast<cuda::RowLogprobs*>(sample_scratch_);
  cuda::row_logprobs(logits_last_dev_, V, token, top_n, sample_scratch_ + kOutFloats, out_dev, stream_);
  static_assert(sizeof(cuda::RowLogprobs) <= 257 * sizeof(int32_t));  // pinned_small_
  GEM_CUDA_CHECK(cudaMemcpyAsync(pinned_small_, out_dev, sizeof(cuda::RowLogprobs),
                                 cudaMemcpyDeviceToHost, stream_));
  GEM_CUDA_CHECK(cudaStreamSynchronize(stream_));
  cuda::RowLogprobs r;
  std::memcpy(&r, pinned_small_, sizeof(r));
  TokenLogprobs lp;
  lp.logprob = r.token_logprob;
  const int k = std::min({std::max(top_n, 0), cuda::kMaxRowLogprobTop, V});
  for (int i = 0; i < k; ++i) lp.top.emplace_back(r.ids[i], r.logprobs[i]);
  return lp;
}

}  // namespace gem::cuda
