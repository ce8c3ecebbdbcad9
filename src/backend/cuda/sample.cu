// Token choice on the device, so a decode step moves 4 bytes to the host instead of the
// logits: llama.cpp's penalties (as sampler/sampler.cc applies them) on a copy of the logits,
// then the arg-max (lowest id on ties), or the host sampler's chain for top-k <= 256: top-k by
// rounds of 1024-wide block sorts, then top-p, min-p, temperature and the draw in the order and
// precision of sampler/sampler.cc.
#include <cuda_runtime.h>

#include <cfloat>
#include <climits>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/sample.cuh"

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

// Block j: the pick of row j from its n_part partials (pv, pi + j·n_part) and, with a history,
// its penalised values.
__global__ void argmax_final_kernel(const float* pen_x, PenaltyArgs pen, const float* pv,
                                    const int* pi, int n_part, int32_t* out) {
  __shared__ float sv[32];
  __shared__ int si[32];
  __shared__ float rv;
  __shared__ int ri;
  float v = -FLT_MAX;
  int id = 0x7fffffff;
  pv += blockIdx.x * n_part;
  pi += blockIdx.x * n_part;
  out += blockIdx.x;
  for (int i = threadIdx.x; i < n_part; i += blockDim.x) better(v, id, pv[i], pi[i]);
  const int n_hist = pen.n_hist < kMaxHist ? pen.n_hist : kMaxHist;
  for (int k = threadIdx.x; k < n_hist; k += blockDim.x) better(v, id, pen_x[pen.hist[k]], pen.hist[k]);
  block_argmax(v, id, sv, si, &rv, &ri);
  __syncthreads();
  if (threadIdx.x == 0) *out = ri;
}

// The arg-max of n rows at once (no penalties): blockIdx.y = row j of logits + rows[j]·n_vocab,
// blockIdx.x one of kRowBlocks slices of it; then argmax_final_kernel, a block a row. The picks
// equal argmax_penalized's with no history: the same total order (larger value, then lower id).
constexpr int kRowBlocks = 32;
__global__ void argmax_rows_partial_kernel(const float* logits, int n_vocab, const int32_t* rows,
                                           float* pv, int* pi) {
  __shared__ float sv[32];
  __shared__ int si[32];
  const float* x = logits + static_cast<int64_t>(rows[blockIdx.y]) * n_vocab;
  float v = -FLT_MAX;
  int id = 0x7fffffff;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n_vocab; i += gridDim.x * blockDim.x) {
    better(v, id, x[i], i);
  }
  const int k = blockIdx.y * gridDim.x + blockIdx.x;
  block_argmax(v, id, sv, si, &pv[k], &pi[k]);
}

constexpr int kSortWidth = 1024;  // candidates one block sorts in shared memory

// (v, id) is ahead of (v2, id2) in the sampler's order: larger logit, then lower id.
__device__ __forceinline__ bool ahead(float v, int id, float v2, int id2) {
  return v > v2 || (v == v2 && id < id2);
}

// Rows of a batched top-k round (blockIdx.y = row y; all zero for one row): the first round reads
// row y at in_v + rows[y]·in_stride (ids implicit), later ones its candidates at y·in_stride; its
// survivors go to y·out_stride, its draw uses draws[y] and writes out[y].
struct TopkRows {
  const int32_t* rows = nullptr;
  int64_t in_stride = 0;
  int64_t out_stride = 0;
  const DrawArgs* draws = nullptr;
};

// Each block sorts its kSortWidth inputs (ids implicit = index when in_id is null) by the
// sampler's order (bitonic, in shared memory) and keeps the first k, at out[blockIdx.x·k]. With
// a single block and `draw` set, thread 0 then runs the rest of the chain on the k survivors.
__global__ void __launch_bounds__(kSortWidth / 2)
    topk_round_kernel(const float* in_v, const int* in_id, int n, int k, float* out_v,
                      int* out_id, bool draw, DrawArgs d_one, int32_t* out, TopkRows tr) {
  __shared__ float sv[kSortWidth];
  __shared__ int si[kSortWidth];
  const int y = blockIdx.y;
  if (tr.rows != nullptr) {
    in_v += static_cast<int64_t>(tr.rows[y]) * tr.in_stride;
  } else {
    in_v += y * tr.in_stride;
    if (in_id != nullptr) in_id += y * tr.in_stride;
  }
  out_v += y * tr.out_stride;
  out_id += y * tr.out_stride;
  out += y;
  const DrawArgs d = tr.draws != nullptr ? tr.draws[y] : d_one;
  const int64_t base = static_cast<int64_t>(blockIdx.x) * kSortWidth;
  for (int i = threadIdx.x; i < kSortWidth; i += blockDim.x) {
    const int64_t j = base + i;
    sv[i] = j < n ? in_v[j] : -FLT_MAX;
    si[i] = j < n ? (in_id ? in_id[j] : static_cast<int>(j)) : INT_MAX;
    if (j < n && sv[i] != sv[i]) sv[i] = -FLT_MAX;  // NaN sorts last
  }
  for (int size = 2; size <= kSortWidth; size <<= 1) {
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      __syncthreads();
      for (int t = threadIdx.x; t < kSortWidth / 2; t += blockDim.x) {
        const int i = 2 * t - (t & (stride - 1));
        const int j = i + stride;
        // Blocks with (i & size) == 0 end up in the sampler's order, the others reversed.
        const bool swap = (i & size) == 0 ? ahead(sv[j], si[j], sv[i], si[i])
                                          : ahead(sv[i], si[i], sv[j], si[j]);
        if (swap) {
          const float tv = sv[i];
          sv[i] = sv[j];
          sv[j] = tv;
          const int ti = si[i];
          si[i] = si[j];
          si[j] = ti;
        }
      }
    }
  }
  __syncthreads();
  const int64_t valid = n - base < kSortWidth ? n - base : kSortWidth;
  const int keep = static_cast<int>(valid < k ? valid : k);
  if (!draw) {
    for (int i = threadIdx.x; i < k; i += blockDim.x) {
      out_v[static_cast<int64_t>(blockIdx.x) * k + i] = i < keep ? sv[i] : -FLT_MAX;
      out_id[static_cast<int64_t>(blockIdx.x) * k + i] = i < keep ? si[i] : INT_MAX;
    }
    return;
  }
  if (threadIdx.x != 0) return;
  // sampler.cc's sampling_distribution + sample_token, serially in the same order and types.
  int m = 0;
  while (m < keep && si[m] != INT_MAX) ++m;  // padding from earlier rounds
  if (m == 0) {
    *out = -1;
    return;
  }
  const double top = sv[0];
  if (d.top_p < 1.0f) {
    double sum = 0.0;
    for (int i = 0; i < m; ++i) sum += exp(static_cast<double>(sv[i]) - top);
    double cum = 0.0;
    int cut = 0;
    while (cut < m) {
      cum += exp(static_cast<double>(sv[cut]) - top) / sum;
      ++cut;
      if (cum >= d.top_p) break;
    }
    m = cut > 1 ? cut : 1;
  }
  if (d.min_p > 0.0f) {
    const double floor = top + static_cast<double>(logf(d.min_p));  // std::log(float) there
    int cut = 1;
    while (cut < m && static_cast<double>(sv[cut]) >= floor) ++cut;
    m = cut;
  }
  const double inv_temp = 1.0 / static_cast<double>(d.temperature);
  double sum = 0.0;
  for (int i = 0; i < m; ++i) sum += exp((static_cast<double>(sv[i]) - top) * inv_temp);
  double total = 0.0;
  for (int i = 0; i < m; ++i) {
    total += static_cast<double>(static_cast<float>(exp((static_cast<double>(sv[i]) - top) * inv_temp) / sum));
  }
  const double target = d.coin * total;
  double cum = 0.0;
  for (int i = 0; i < m; ++i) {
    cum += static_cast<double>(static_cast<float>(exp((static_cast<double>(sv[i]) - top) * inv_temp) / sum));
    if (target < cum) {
      *out = si[i];
      return;
    }
  }
  *out = si[m - 1];
}

int cand_capacity(int n_vocab) { return (n_vocab + kSortWidth - 1) / kSortWidth * kMaxTopK; }

}  // namespace

void sample_top_k(const float* logits, int n_vocab, const PenaltyArgs& pen, const DrawArgs& d,
                  int32_t* out, float* scratch, cudaStream_t s) {
  float* pen_x = scratch + 2 * kArgmaxBlocks;  // [n_vocab]: the penalised copy of the logits
  const int cap = cand_capacity(n_vocab);
  float* cv[2] = {pen_x + n_vocab, pen_x + n_vocab + cap};
  int* ci[2] = {reinterpret_cast<int*>(pen_x + n_vocab + 2 * cap),
                reinterpret_cast<int*>(pen_x + n_vocab + 3 * cap)};
  const float* in_v = logits;
  if (pen.n_hist > 0) {
    GEM_CUDA_CHECK(cudaMemcpyAsync(pen_x, logits, sizeof(float) * n_vocab,
                                   cudaMemcpyDeviceToDevice, s));
    penalize_kernel<<<1, kThreads, 0, s>>>(logits, pen, pen_x);
    GEM_CUDA_LAUNCHED();
    in_v = pen_x;
  }
  const int* in_id = nullptr;
  int n = n_vocab, buf = 0;
  for (;;) {
    const int blocks = (n + kSortWidth - 1) / kSortWidth;
    const bool last = blocks == 1;
    topk_round_kernel<<<blocks, kSortWidth / 2, 0, s>>>(in_v, in_id, n, d.top_k, cv[buf], ci[buf],
                                                        last, d, out, TopkRows{});
    GEM_CUDA_LAUNCHED();
    if (last) return;
    in_v = cv[buf];
    in_id = ci[buf];
    n = blocks * d.top_k;
    buf ^= 1;
  }
}

void sample_top_k_rows(const float* logits, int n_vocab, const int32_t* rows, int n_rows, int top_k,
                       const DrawArgs* draws, int32_t* out, float* scratch, cudaStream_t s) {
  if (n_rows <= 0) return;
  const int64_t cap = cand_capacity(n_vocab);
  const int64_t buf_floats = static_cast<int64_t>(n_rows) * cap;
  float* cv[2] = {scratch, scratch + buf_floats};
  int* ci[2] = {reinterpret_cast<int*>(scratch + 2 * buf_floats),
                reinterpret_cast<int*>(scratch + 3 * buf_floats)};
  TopkRows tr{rows, n_vocab, cap, draws};
  const float* in_v = logits;
  const int* in_id = nullptr;
  int n = n_vocab, buf = 0;
  for (;;) {
    const int blocks = (n + kSortWidth - 1) / kSortWidth;
    const bool last = blocks == 1;
    topk_round_kernel<<<dim3(blocks, n_rows), kSortWidth / 2, 0, s>>>(
        in_v, in_id, n, top_k, cv[buf], ci[buf], last, DrawArgs{}, out, tr);
    GEM_CUDA_LAUNCHED();
    if (last) return;
    in_v = cv[buf];
    in_id = ci[buf];
    tr = TopkRows{nullptr, cap, cap, draws};
    n = blocks * top_k;
    buf ^= 1;
  }
}

int64_t top_k_rows_scratch_floats(int n_vocab, int n_rows) {
  return 4 * static_cast<int64_t>(n_rows) * cand_capacity(n_vocab);
}

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

void argmax_rows(const float* logits, int n_vocab, const int32_t* rows, int n, int32_t* out,
                 float* scratch, cudaStream_t s) {
  if (n <= 0) return;
  float* pv = scratch;
  int* pi = reinterpret_cast<int*>(scratch + static_cast<size_t>(n) * kRowBlocks);
  argmax_rows_partial_kernel<<<dim3(kRowBlocks, n), kThreads, 0, s>>>(logits, n_vocab, rows, pv, pi);
  GEM_CUDA_LAUNCHED();
  argmax_final_kernel<<<n, kThreads, 0, s>>>(nullptr, PenaltyArgs{}, pv, pi, kRowBlocks, out);
  GEM_CUDA_LAUNCHED();
}

int argmax_rows_max(int n_vocab) { return argmax_scratch_floats(n_vocab) / (2 * kRowBlocks); }

int argmax_scratch_floats(int n_vocab) {
  return 2 * kArgmaxBlocks + n_vocab + 4 * cand_capacity(n_vocab);
}

}  // namespace gem::cuda
