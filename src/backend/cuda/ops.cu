// Element-wise and row-wise ops of the forward: embedding lookup, RMS norms fused with the
// residual epilogues, the attention prologue (per-head norms, RoPE), KV-cache stores, q8
// quantisation of activations, GELU gating and the soft-cap.
#include <cooperative_groups.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <type_traits>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/kernels.cuh"

namespace gem::cuda {
namespace {

// Value (without the super-block scale d) of weight j of one Q6_K super-block (spec §1).
__device__ __forceinline__ float q6k_value(const uint8_t* sb, int j) {
  const uint8_t* ql = sb;
  const uint8_t* qh = sb + 128;
  const int8_t* sc = reinterpret_cast<const int8_t*>(sb + 192);
  const int h = j >> 7, jj = j & 127, quarter = jj >> 5, l = jj & 31, s = l >> 4;
  ql += 64 * h;
  qh += 32 * h;
  sc += 8 * h;
  int q;
  switch (quarter) {
    case 0: q = (ql[l] & 15) | (((qh[l] >> 0) & 3) << 4); break;
    case 1: q = (ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4); break;
    case 2: q = (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4); break;
    default: q = (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4); break;
  }
  return static_cast<float>(sc[s + 2 * quarter]) * static_cast<float>(q - 32);
}

__device__ __forceinline__ float q6k_scale(const uint8_t* sb) {
  return __half2float(*reinterpret_cast<const __half*>(sb + 208));
}

__global__ void embed_kernel(DevMatrix emb, const int32_t* tokens, float scale, float* x) {
  pdl_trigger();
  pdl_wait();
  const int t = blockIdx.x;
  const int64_t row = tokens[t];
  const int64_t cols = emb.cols;
  float* out = x + t * cols;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    float v;
    if (emb.type == WType::kQ8_0) {
      v = static_cast<float>(reinterpret_cast<const int8_t*>(emb.qs)[row * cols + c]) *
          __half2float(emb.d[row * (cols / 32) + c / 32]);
    } else if (emb.type == WType::kQ4_0) {
      const uint8_t b = emb.qs[row * (cols / 2) + (c / 32) * 16 + (c % 16)];
      const int nib = (c % 32) < 16 ? (b & 15) : (b >> 4);
      v = static_cast<float>(nib - 8) * __half2float(emb.d[row * (cols / 32) + c / 32]);
    } else if (emb.type == WType::kQ6_K) {
      const uint8_t* sb = emb.raw + (row * (cols / 256) + c / 256) * 210;
      v = q6k_scale(sb) * q6k_value(sb, static_cast<int>(c % 256));
    } else {
      v = reinterpret_cast<const float*>(emb.raw)[row * cols + c];
    }
    out[c] = v * scale;
  }
}


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
// prompt tiles, whose rows fill the GPU already, one block per row.
void launch_residual(float* x, const float* a, const float* w_post, const float* out_scale,
                     const float* w_next, int n, int cols, float eps, float* h, Q8Act hq,
                     int cluster, cudaStream_t s) {
  if (n != 1 || cluster < 1 || cols % (32 * cluster) != 0) cluster = 1;
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

// The pair (i, i + D/2) of one head, (a0, a1), after the head's RMS norm (inv = 1/rms, weights
// w0 = w[i], w1 = w[i + D/2]) and the rotation by pos·freq (freq = inv_freq[i]; the angle in
// double, as the CPU reference computes it).
__device__ __forceinline__ float2 norm_rope_pair(float a0, float a1, float inv, float w0,
                                                 float w1, double freq, int pos) {
  double sn, cs;
  sincos(static_cast<double>(pos) * freq, &sn, &cs);
  a0 = a0 * inv * w0;
  a1 = a1 * inv * w1;
  const float c = static_cast<float>(cs), s = static_cast<float>(sn);
  return make_float2(a0 * c - a1 * s, a0 * s + a1 * c);
}

// Elements i and i + D/2 of kv head g at position pos into a cache (f32 or f16).
__device__ __forceinline__ void store_cache(const KvDest& c, void* base, int g, int pos, int D,
                                            int i, float a, float b) {
  const int slot = c.ring ? pos % c.n_slots : pos;
  const int64_t off = (static_cast<int64_t>(g) * c.n_slots + slot) * D;
  if (c.f16) {
    static_cast<__half*>(base)[off + i] = __float2half_rn(a);
    static_cast<__half*>(base)[off + i + D / 2] = __float2half_rn(b);
  } else {
    static_cast<float*>(base)[off + i] = a;
    static_cast<float*>(base)[off + i + D / 2] = b;
  }
}

// One block per (token, head); thread i owns elements i and i + D/2 (the NeoX pair).
__global__ void qkv_prologue_kernel(const float* qkv, int n_heads, int n_kv, int D, bool v_from_k,
                                    const float* q_norm, const float* k_norm, float eps,
                                    const double* inv_freq, const StepParams* sp, float* q,
                                    float* k, float* v, KvDest cache) {
  pdl_trigger();
  pdl_wait();
  __shared__ float red[32];
  const int t = blockIdx.x, head = blockIdx.y, i = threadIdx.x, half = D / 2;
  const int qkv_cols = (n_heads + (v_from_k ? 1 : 2) * n_kv) * D;
  const float* row = qkv + static_cast<int64_t>(t) * qkv_cols;
  const bool is_q = head < n_heads;
  const int g = head - n_heads;
  const float* src = is_q ? row + head * D : row + (n_heads + g) * D;
  const bool act = i < half;
  const float a0 = act ? src[i] : 0.0f, a1 = act ? src[i + half] : 0.0f;
  if (!is_q) {
    // V first: RMS₀ of the raw V projection (full layers: the raw K projection).
    const float* vsrc = v_from_k ? src : row + (n_heads + n_kv + g) * D;
    const float b0 = act ? vsrc[i] : 0.0f, b1 = act ? vsrc[i + half] : 0.0f;
    const float ssv = block_sum(b0 * b0 + b1 * b1, red);
    const float invv = rsqrtf(ssv / D + eps);
    if (act) {
      float* vo = v + (static_cast<int64_t>(t) * n_kv + g) * D;
      vo[i] = b0 * invv;
      vo[i + half] = b1 * invv;
      if (cache.v) store_cache(cache, cache.v, g, sp->pos0 + t, D, i, b0 * invv, b1 * invv);
    }
  }
  const float ss = block_sum(a0 * a0 + a1 * a1, red);
  const float inv = rsqrtf(ss / D + eps);
  if (!act) return;
  const float* w = is_q ? q_norm : k_norm;
  const float2 o = norm_rope_pair(a0, a1, inv, w[i], w[i + half], inv_freq[i], sp->pos0 + t);
  const float r0 = o.x, r1 = o.y;
  float* dst = is_q ? q + (static_cast<int64_t>(t) * n_heads + head) * D
                    : k + (static_cast<int64_t>(t) * n_kv + g) * D;
  dst[i] = r0;
  dst[i + half] = r1;
  if (!is_q && cache.k) store_cache(cache, cache.k, g, sp->pos0 + t, D, i, r0, r1);
}

__global__ void kv_store_kernel(const float* k, const float* v, int n, int n_kv, int D, bool f16,
                                bool ring, int n_slots, const StepParams* sp, void* kc, void* vc) {
  pdl_trigger();
  pdl_wait();
  const int t = blockIdx.x, g = blockIdx.y;
  if (ring && t < n - n_slots) return;  // overwritten within this very tile
  const int pos = sp->pos0 + t;
  const int slot = ring ? pos % n_slots : pos;
  const int64_t src = (static_cast<int64_t>(t) * n_kv + g) * D;
  const int64_t dst = (static_cast<int64_t>(g) * n_slots + slot) * D;
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    if (f16) {
      static_cast<__half*>(kc)[dst + d] = __float2half_rn(k[src + d]);
      static_cast<__half*>(vc)[dst + d] = __float2half_rn(v[src + d]);
    } else {
      static_cast<float*>(kc)[dst + d] = k[src + d];
      static_cast<float*>(vc)[dst + d] = v[src + d];
    }
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

__global__ void to_f16_kernel(const float* x, int64_t count, __half* y) {
  pdl_trigger();
  pdl_wait();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    y[i] = __float2half_rn(x[i]);
  }
}

__global__ void gelu_mul_kernel(const float* gu, int n, int F, float* g) {
  pdl_trigger();
  pdl_wait();
  const int64_t count = static_cast<int64_t>(n) * F;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / F, c = i % F;
    g[i] = gelu_tanh(gu[t * 2 * F + c]) * gu[t * 2 * F + F + c];
  }
}

__global__ void softcap_kernel(float* x, int64_t count, float cap) {
  pdl_trigger();
  pdl_wait();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    x[i] = cap * tanhf(x[i] / cap);
  }
}

int grid_for(int64_t count, int threads) {
  const int64_t blocks = (count + threads - 1) / threads;
  return static_cast<int>(blocks < 4096 ? (blocks > 0 ? blocks : 1) : 4096);
}

int row_threads(int cols) { return cols >= 4096 ? 1024 : (cols >= 1024 ? 512 : 128); }


}  // namespace

namespace {
thread_local bool pdl_on = true;
}  // namespace

bool pdl_enabled() { return pdl_on; }
void set_pdl(bool on) { pdl_on = on; }

void embed(const DevMatrix& emb, const int32_t* tokens, int n, float scale, float* x,
           cudaStream_t s) {
  launch(embed_kernel, n, 256, 0, s, emb, tokens, scale, x);
  GEM_CUDA_LAUNCHED();
}

void rms_norm(const float* x, const float* w, int n, int cols, float eps, float* y, Q8Act yq,
              cudaStream_t s, const CudaTuning& t) {
  if (w && cols % 32 == 0 && cols <= 8192) {
    launch_residual(const_cast<float*>(x), nullptr, nullptr, nullptr, w, n, cols, eps, y, yq,
                    t.res_cluster, s);
  } else {
    launch(rms_norm_kernel, n, row_threads(cols), 0, s, x, w, cols, eps, y, yq);
  }
  GEM_CUDA_LAUNCHED();
}

void residual_norm(float* x, const float* a, const float* w_post, const float* w_next, int n,
                   int cols, float eps, float* h, Q8Act hq, cudaStream_t s,
                   const CudaTuning& t) {
  launch_residual(x, a, w_post, nullptr, w_next, n, cols, eps, h, hq, t.res_cluster, s);
  GEM_CUDA_LAUNCHED();
}

void residual_norm_scale(float* x, const float* f, const float* w_post, const float* out_scale,
                         const float* w_next, int n, int cols, float eps, float* h, Q8Act hq,
                         cudaStream_t s, const CudaTuning& t) {
  launch_residual(x, f, w_post, out_scale, w_next, n, cols, eps, h, hq, t.res_cluster, s);
  GEM_CUDA_LAUNCHED();
}

void qkv_prologue(const float* qkv, int n, int n_heads, int n_kv, int head_dim, bool v_from_k,
                  const float* q_norm, const float* k_norm, float eps, const double* inv_freq,
                  const StepParams* sp, float* q, float* k, float* v, KvDest cache,
                  cudaStream_t s) {
  const int threads = head_dim / 2 < 32 ? 32 : head_dim / 2;
  launch(qkv_prologue_kernel, dim3(n, n_heads + n_kv), threads, 0, s, qkv, n_heads, n_kv,
         head_dim, v_from_k, q_norm, k_norm, eps, inv_freq, sp, q, k, v, cache);
  GEM_CUDA_LAUNCHED();
}

void kv_store(const float* k, const float* v, int n, int n_kv, int head_dim, bool f16, bool ring,
              int n_slots, const StepParams* sp, void* k_cache, void* v_cache, cudaStream_t s) {
  launch(kv_store_kernel, dim3(n, n_kv), (head_dim < 256 ? head_dim : 256), 0, s,
         k, v, n, n_kv, head_dim, f16, ring, n_slots, sp, k_cache, v_cache);
  GEM_CUDA_LAUNCHED();
}

void quantize_q8(const float* x, int n, int cols, Q8Act xq, cudaStream_t s) {
  launch(quantize_q8_kernel, dim3((cols / 32 + 7) / 8, n), 256, 0, s, x, cols, xq);
  GEM_CUDA_LAUNCHED();
}

void to_f16(const float* x, int64_t count, __half* y, cudaStream_t s) {
  launch(to_f16_kernel, grid_for(count, 256), 256, 0, s, x, count, y);
  GEM_CUDA_LAUNCHED();
}

void gelu_mul(const float* gu, int n, int F, float* g, cudaStream_t s) {
  launch(gelu_mul_kernel, grid_for(static_cast<int64_t>(n) * F, 256), 256, 0, s, gu, n, F, g);
  GEM_CUDA_LAUNCHED();
}

void softcap(float* x, int64_t count, float cap, cudaStream_t s) {
  launch(softcap_kernel, grid_for(count, 256), 256, 0, s, x, count, cap);
  GEM_CUDA_LAUNCHED();
}

}  // namespace gem::cuda
