// The merge of the attention splits: per (query, head), the splits' online-softmax states
// combined into the output and its q8 copy.
#include <cuda_fp16.h>

#include <cmath>

#include "backend/cuda/attention_merge.cuh"
#include "backend/cuda/attention_parts.cuh"
#include "backend/cuda/cuda_common.cuh"

namespace gem::cuda {
namespace {

// Merges the splits of one (query, head) for a chunk of dchunk output elements (blockIdx.z):
// thread (c, sg) owns the 4 elements 4c .. 4c+3 of the chunk (one float4 per split) over the
// splits sg, sg + n_sg, ... with eight loads in flight, and the n_sg partial sums meet in shared
// memory. (One thread per element over every split was a chain of ~n_splits/4 dependent loads:
// tens of µs at 264 splits; one element a thread over 4 split groups kept a quarter of these
// loads in flight and was 0.7-0.8 % slower.) The split weights are computed once per block into
// shared memory; empty splits are never read (a rows pass's past the visible keys not even their
// l).
constexpr int kMergeThreads = 256;
constexpr int kMergeLoads = 8;  // loads in flight per thread
// A rows pass (kRows): block x is row z of the pass (row_view: its parts and output row).
template <bool kRows>
__global__ void __launch_bounds__(kMergeThreads) attention_merge_kernel(AttnArgs a_in) {
  const AttnArgs a = kRows ? row_view(a_in, blockIdx.x) : a_in;
  pdl_trigger();
  pdl_wait();
  __shared__ float w[kMaxSplits];
  __shared__ float red[32];
  __shared__ __align__(16) float sums[kMergeThreads * 4];
  const int t = kRows ? 0 : blockIdx.x, j = blockIdx.y, D = a.head_dim, stride = part_stride(D);
  const int dchunk = D / static_cast<int>(gridDim.z), nc = dchunk / 4, n_sg = kMergeThreads / nc;
  const int c = threadIdx.x % nc, sg = threadIdx.x / nc;
  const int d0 = blockIdx.z * dchunk;
  const int ns = a.n_splits;
  const float* part = a.part + (static_cast<int64_t>(t) * a.n_heads + j) * ns * stride;
  // A rows pass's splits from decode_busy_splits on are empty and wrote no part: l = 0, as their
  // parts had.
  [[maybe_unused]] const int busy = kRows ? decode_busy_splits(a) : ns;
  auto part_l = [&](int sp) {
    if constexpr (kRows) {
      if (sp >= busy) return 0.0f;
    }
    return part[sp * stride + 1];
  };
  float mx = -INFINITY;
  for (int sp = threadIdx.x; sp < ns; sp += blockDim.x) {
    if (part_l(sp) > 0.0f) mx = fmaxf(mx, part[sp * stride]);
  }
  mx = warp_max(mx);
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = mx;
  __syncthreads();
  mx = -INFINITY;
  for (int k = 0; k < (static_cast<int>(blockDim.x) >> 5); ++k) mx = fmaxf(mx, red[k]);
  float lsum = 0.0f;
  for (int sp = threadIdx.x; sp < ns; sp += blockDim.x) {
    const float l = part_l(sp);
    const float ws = l > 0.0f ? expf(part[sp * stride] - mx) : 0.0f;
    w[sp] = ws;
    lsum += l * ws;
  }
  const float l = block_sum(lsum, red);  // starts with a barrier: w[] is complete after it
  // 16-byte aligned: part_stride(D), kPartHead, d0 and 4c are multiples of 4.
  const float* col = part + kPartHead + d0 + 4 * c;
  auto load = [&](int q) {
    return *reinterpret_cast<const float4*>(col + static_cast<int64_t>(q) * stride);
  };
  float4 o = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  auto add = [&](float ws, const float4& v) {
    o.x += ws * v.x;
    o.y += ws * v.y;
    o.z += ws * v.z;
    o.w += ws * v.w;
  };
  int sp = sg;
  for (; sp + (kMergeLoads - 1) * n_sg < ns; sp += kMergeLoads * n_sg) {
    float4 v[kMergeLoads];
#pragma unroll
    for (int u = 0; u < kMergeLoads; ++u) {
      const int q = sp + u * n_sg;
      v[u] = w[q] != 0.0f ? load(q) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
#pragma unroll
    for (int u = 0; u < kMergeLoads; ++u) add(w[sp + u * n_sg], v[u]);
  }
  for (; sp < ns; sp += n_sg) {
    if (w[sp] != 0.0f) add(w[sp], load(sp));
  }
  reinterpret_cast<float4*>(sums)[sg * nc + c] = o;  // sums[sg][4c .. 4c+3]
  __syncthreads();
  const int dl = threadIdx.x;  // threads 0 .. dchunk-1 (whole warps): one element each
  if (dl >= dchunk) return;
  float v = 0.0f;
  for (int k = 0; k < n_sg; ++k) v += sums[k * dchunk + dl];
  v /= l;
  const int d = d0 + dl;
  const int64_t row = static_cast<int64_t>(t) * a.n_heads * D;
  a.out[row + j * D + d] = v;
  if (a.outq.q) {  // whole warps of 32 consecutive elements
    q8_block_out(v, a.outq.q + row + j * D + (d & ~31), a.outq.ds + row / 32 + (j * D + d) / 32,
                 d & 31);
  }
}

}  // namespace

// Output elements per merge block: 32 when 64-element chunks would leave a thread more than one
// round of loads (more than kMergeLoads · 16 splits: the 12B's full layers at 264), else 64 (32
// everywhere was 2 % faster on the 12B at depth, 0.5 % slower on the 31B's 66 splits); the whole
// head when it is narrower (at least 32, so that the q8 copy's blocks stay whole).
// CudaTuning::merge_chunk = 32 or 64 forces a size.
void launch_attention_merge(const AttnArgs& a, int n, const CudaTuning& t, cudaStream_t s) {
  const int rule = a.n_splits > kMergeLoads * (kMergeThreads / (64 / 4)) ? 32 : 64;
  const int want = t.merge_chunk == 32 || t.merge_chunk == 64 ? t.merge_chunk : rule;
  const int dchunk = a.head_dim < want ? a.head_dim : want;
  if (a.rows) {
    launch(attention_merge_kernel<true>, dim3(a.n_rows, a.n_heads, a.head_dim / dchunk),
           kMergeThreads, 0, s, a);
  } else {
    launch(attention_merge_kernel<false>, dim3(n, a.n_heads, a.head_dim / dchunk), kMergeThreads,
           0, s, a);
  }
}

}  // namespace gem::cuda
