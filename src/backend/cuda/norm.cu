// The norms and epilogues of the forward: the RMS norm, the residual epilogues (residual add,
// post norm, the next norm and its q8 copy from one reduction, in one block or a cluster of
// blocks per row), and the q8 quantisation of activations.
#include <cooperative_groups.h>
#include <cuda_fp16.h>

#include <cstdio>
#include <cstdlib>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/norm.cuh"

namespace gem::cuda {
namespace {

__global__ void rms_norm_kernel(const float* x, const float* w, int cols, float eps, float* y,
                                Q8Act yq) {
  pdl_trigger();
  pdl_wait();
  __shared__ float red[32];
  const int t = blockIdx.x, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int n_warps = blockDim.x >> 5;
  const float* xr = x + static_cast<int64_t>(t) * cols;
  float ss = 0.0f;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) ss += xr[c] * xr[c];
  ss = block_sum(ss, red);
  const float inv = rsqrtf(ss / cols + eps);
  float* yr = y + static_cast<int64_t>(t) * cols;
  for (int b = warp; b < cols / 32; b += n_warps) {
    const int c = b * 32 + lane;
    const float v = xr[c] * inv * (w ? w[c] : 1.0f);
    yr[c] = v;
    if (yq.q) {
      q8_block_out(v, yq.q + static_cast<int64_t>(t) * cols + b * 32,
               yq.ds + static_cast<int64_t>(t) * (cols / 32) + b, lane);
    }
  }
}

// Σ s[i] (i < N) over the row of this block's token: the block's sums, and with kCluster the
// sums of every block of the cluster (each block holds a slice of the row), exchanged through
// distributed shared memory: block b's totals in cl[0..N) of block b, added up by each warp in
// rank order, so every block gets the same bits. Every thread gets the results. red holds N·32
// floats. With kArrive (kCluster) every thread has also arrived at the cluster barrier on
// return, done with the other blocks' cl, and must wait for it before its block leaves.
template <bool kCluster, int N, bool kArrive = false>
__device__ __forceinline__ void row_sums(float (&s)[N], float* red, float* cl) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
  auto warp_sums = [&]() {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
#pragma unroll
      for (int i = 0; i < N; ++i) s[i] += __shfl_xor_sync(0xffffffffu, s[i], o);
    }
  };
  warp_sums();
  __syncthreads();  // red may still be read by an earlier call
  if (lane == 0) {
#pragma unroll
    for (int i = 0; i < N; ++i) red[i * 32 + warp] = s[i];
  }
  __syncthreads();
#pragma unroll
  for (int i = 0; i < N; ++i) s[i] = lane < n_warps ? red[i * 32 + lane] : 0.0f;
  warp_sums();
  if constexpr (kCluster) {
    namespace cg = cooperative_groups;
    const cg::cluster_group cluster = cg::this_cluster();
    if (threadIdx.x == 0) {
#pragma unroll
      for (int i = 0; i < N; ++i) cl[i] = s[i];
    }
    cluster.sync();
    const bool in = static_cast<unsigned>(lane) < cluster.num_blocks();
#pragma unroll
    for (int i = 0; i < N; ++i) s[i] = in ? *cluster.map_shared_rank(cl + i, lane) : 0.0f;
    warp_sums();
    // Done with the other blocks' cl: arrive now and wait only before leaving, so that the
    // barrier that keeps cl alive costs no latency of its own.
    if constexpr (kArrive) cluster.barrier_arrive();
  }
}

// x = (x + rms_norm(a, w_post)) · scale; then h = rms_norm(x, w_next) (+ q8) when w_next.
// With a == nullptr only the second half runs: h = rms_norm(x, w_next) (+ q8).
// Thread i owns elements i + k·blockDim (k < kPer) of its block's slice of the row: the whole
// row (one block per token, blockIdx.x), or with kCluster 1/cluster of it (a cluster of blocks
// per token: blockIdx.x = rank, blockIdx.y = token; the reductions span the cluster). Every input
// (a, x and both weights) is loaded into registers up front, so the kernel is one round trip to
// memory plus one reduction: it runs twice per layer in decode and its latency is the step's.
// Both norm factors come from that one reduction: with u = a ⊙ w_post and i_a = 1/rms(a), the
// new row is x' = (x + i_a·u)·scale, so Σx'² = scale²·(Σx² + 2·i_a·Σx·u + i_a²·Σu²); the sums
// Σa², Σx², Σx·u and Σu² are reduced together and the factors combined in double. The same
// values up to rounding unless x' nearly cancels x (|x'| ≪ |x|, which a residual update does
// not do). Each warp's 32 consecutive elements of one k form a q8 block (blockDim % 32 == 0 and
// the slice a multiple of 32).
template <int kPer, bool kCluster>
__global__ void residual_kernel(float* x, const float* a,
                                const float* __restrict__ w_post, const float* out_scale,
                                const float* __restrict__ w_next, int cols, float eps,
                                float* __restrict__ h, Q8Act hq) {
  __shared__ float red[4 * 32];
  __shared__ float cl[4];
  pdl_trigger();
  const int t = kCluster ? blockIdx.y : blockIdx.x, lane = threadIdx.x & 31;
  const int slice = kCluster ? cols / static_cast<int>(gridDim.x) : cols;
  const int col0 = kCluster ? static_cast<int>(blockIdx.x) * slice : 0;  // the slice's first column
  const int64_t off = static_cast<int64_t>(t) * cols + col0;
  const int64_t qoff = (static_cast<int64_t>(t) * cols + col0) / 32;
  const float* wpo = w_post ? w_post + col0 : nullptr;
  const float* wne = w_next ? w_next + col0 : nullptr;
  float wp[kPer], wn[kPer];
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    const int c = threadIdx.x + k * blockDim.x;
    wp[k] = a && c < slice ? __ldg(wpo + c) : 0.0f;
    wn[k] = w_next && c < slice ? __ldg(wne + c) : 0.0f;
  }
  // A weight too: loaded with the others, not after the reduction.
  const float scale = out_scale ? __ldg(out_scale) : 1.0f;
  pdl_wait();
  float av[kPer], xv[kPer];
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    const int c = threadIdx.x + k * blockDim.x;
    av[k] = a && c < slice ? a[off + c] : 0.0f;
    xv[k] = c < slice ? x[off + c] : 0.0f;
  }
  float inv_next = 0.0f;  // 1/rms of the new row
  if (a) {
    float sums[4] = {0.0f, 0.0f, 0.0f, 0.0f};  // Σa², Σx², Σx·u, Σu²
#pragma unroll
    for (int k = 0; k < kPer; ++k) {
      const float u = av[k] * wp[k];
      sums[0] += av[k] * av[k];
      sums[1] += xv[k] * xv[k];
      sums[2] += xv[k] * u;
      sums[3] += u * u;
    }
    row_sums<kCluster, 4, true>(sums, red, cl);
    const float inv_a = rsqrtf(sums[0] / cols + eps);
    const double ia = inv_a, sc = scale;
    const double ss2 = sc * sc * (sums[1] + 2.0 * ia * sums[2] + ia * ia * sums[3]);
    inv_next = rsqrtf(static_cast<float>(ss2 / cols) + eps);
#pragma unroll
    for (int k = 0; k < kPer; ++k) {
      const int c = threadIdx.x + k * blockDim.x;
      xv[k] = (xv[k] + av[k] * inv_a * wp[k]) * scale;
      if (c < slice) x[off + c] = xv[k];
    }
  } else if (w_next) {
    float ss[1] = {0.0f};
#pragma unroll
    for (int k = 0; k < kPer; ++k) ss[0] += xv[k] * xv[k];
    row_sums<kCluster, 1, true>(ss, red, cl);
    inv_next = rsqrtf(ss[0] / cols + eps);
  }
  if (w_next) {
#pragma unroll
    for (int k = 0; k < kPer; ++k) {
      const int base = k * blockDim.x + (threadIdx.x & ~31);  // warp-uniform
      if (base < slice) {
        const int c = base + lane;
        const float v = xv[k] * inv_next * wn[k];
        h[off + c] = v;
        if (hq.q) q8_block_out(v, hq.q + off + base, hq.ds + qoff + base / 32, lane);
      }
    }
  }
  // No block of the cluster leaves while another may still read its cl (row_sums arrived at
  // the barrier after its reads).
  if constexpr (kCluster) {
    if (a || w_next) {
      cooperative_groups::this_cluster().barrier_wait();
    } else {
      cooperative_groups::this_cluster().sync();
    }
  }
}

// Launches residual_kernel over n rows: 4 elements per thread up to 4096 columns of a block's
// slice, else 8. One-row launches (decode) run as a cluster of `cluster` blocks per row
// (CudaTuning::res_cluster), each over 1/cluster of it, when the slices are whole q8 blocks;
// prompt tiles, whose rows fill the GPU already, one block per row; the rows pass's rows as
// decode runs them (decode_form: the cluster's slices sum in another order than one block).
void launch_residual(float* x, const float* a, const float* w_post, const float* out_scale,
                     const float* w_next, int n, int cols, float eps, float* h, Q8Act hq,
                     int cluster, bool decode_form, cudaStream_t s) {
  if ((n != 1 && !decode_form) || cluster < 1 || cols % (32 * cluster) != 0) cluster = 1;
  const int slice = cols / cluster;
  const int per = slice <= 4096 ? 4 : 8;
  const int threads = ((slice + per - 1) / per + 31) / 32 * 32;
  if (threads > 1024 || cols % 32 != 0) {
    std::fprintf(stderr, "residual_norm: %d columns (at most 8192, a multiple of 32)\n", cols);
    std::abort();
  }
  auto go = [&](auto kernel, dim3 grid) {
    launch_clustered(kernel, grid, threads, 0, s, static_cast<unsigned>(cluster), x, a, w_post,
                     out_scale, w_next, cols, eps, h, hq);
  };
  if (cluster > 1) {
    const dim3 grid(static_cast<unsigned>(cluster), static_cast<unsigned>(n));
    per == 4 ? go(residual_kernel<4, true>, grid) : go(residual_kernel<8, true>, grid);
  } else {
    const dim3 grid(static_cast<unsigned>(n));
    per == 4 ? go(residual_kernel<4, false>, grid) : go(residual_kernel<8, false>, grid);
  }
}

// One warp per 32-value block: grid (ceil(blocks / 8), n).
__global__ void quantize_q8_kernel(const float* x, int cols, Q8Act xq) {
  pdl_trigger();
  pdl_wait();
  const int t = blockIdx.y, lane = threadIdx.x & 31;
  const int b = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
  if (b >= cols / 32) return;
  const int64_t off = static_cast<int64_t>(t) * cols;
  q8_block_out(x[off + b * 32 + lane], xq.q + off + b * 32,
           xq.ds + static_cast<int64_t>(t) * (cols / 32) + b, lane);
}

int row_threads(int cols) { return cols >= 4096 ? 1024 : (cols >= 1024 ? 512 : 128); }

}  // namespace

void rms_norm(const float* x, const float* w, int n, int cols, float eps, float* y, Q8Act yq,
              cudaStream_t s, const CudaTuning& t, bool decode_form) {
  if (w && cols % 32 == 0 && cols <= 8192) {
    launch_residual(const_cast<float*>(x), nullptr, nullptr, nullptr, w, n, cols, eps, y, yq,
                    t.res_cluster, decode_form, s);
  } else {
    launch(rms_norm_kernel, n, row_threads(cols), 0, s, x, w, cols, eps, y, yq);
  }
  GEM_CUDA_LAUNCHED();
}

void residual_norm(float* x, const float* a, const float* w_post, const float* w_next, int n,
                   int cols, float eps, float* h, Q8Act hq, cudaStream_t s,
                   const CudaTuning& t, bool decode_form) {
  launch_residual(x, a, w_post, nullptr, w_next, n, cols, eps, h, hq, t.res_cluster, decode_form,
                  s);
  GEM_CUDA_LAUNCHED();
}

void residual_norm_scale(float* x, const float* f, const float* w_post, const float* out_scale,
                         const float* w_next, int n, int cols, float eps, float* h, Q8Act hq,
                         cudaStream_t s, const CudaTuning& t, bool decode_form) {
  launch_residual(x, f, w_post, out_scale, w_next, n, cols, eps, h, hq, t.res_cluster, decode_form,
                  s);
  GEM_CUDA_LAUNCHED();
}

void quantize_q8(const float* x, int n, int cols, Q8Act xq, cudaStream_t s) {
  launch(quantize_q8_kernel, dim3((cols / 32 + 7) / 8, n), 256, 0, s, x, cols, xq);
  GEM_CUDA_LAUNCHED();
}

}  // namespace gem::cuda
