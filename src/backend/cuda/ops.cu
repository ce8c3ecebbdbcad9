// Element-wise ops of the forward: embedding lookup, the attention prologue (per-head norms,
// RoPE, KV-cache stores), f16 conversion, GELU gating and the soft-cap; and the launches' PDL
// setting.
#include <cuda_fp16.h>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/ops.cuh"

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
  const int t = blockIdx.y;
  const int64_t row = tokens[t];
  const int64_t cols = emb.cols;
  float* out = x + t * cols;
  for (int64_t c = blockIdx.x * blockDim.x + threadIdx.x; c < cols;
       c += static_cast<int64_t>(gridDim.x) * blockDim.x) {
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
  const int pos = cache.rows ? cache.rows[t].pos0 : sp->pos0 + t;
  const size_t slot_off = cache.rows ? static_cast<size_t>(cache.rows[t].slot) * cache.slot_bytes : 0;
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
      if (cache.v) {
        store_cache(cache, static_cast<char*>(cache.v) + slot_off, g, pos, D, i, b0 * invv,
                    b1 * invv);
      }
    }
  }
  const float ss = block_sum(a0 * a0 + a1 * a1, red);
  const float inv = rsqrtf(ss / D + eps);
  if (!act) return;
  const float* w = is_q ? q_norm : k_norm;
  const float2 o = norm_rope_pair(a0, a1, inv, w[i], w[i + half], inv_freq[i], pos);
  const float r0 = o.x, r1 = o.y;
  float* dst = is_q ? q + (static_cast<int64_t>(t) * n_heads + head) * D
                    : k + (static_cast<int64_t>(t) * n_kv + g) * D;
  dst[i] = r0;
  dst[i + half] = r1;
  if (!is_q && cache.k) store_cache(cache, static_cast<char*>(cache.k) + slot_off, g, pos, D, i, r0, r1);
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

// y[i] = x[i] converted (f32 → f16 rounding to nearest, f16 → f32 exact).
__device__ __forceinline__ __half convert_to(float v, __half*) { return __float2half_rn(v); }
__device__ __forceinline__ float convert_to(__half v, float*) { return __half2float(v); }
template <typename In, typename Out>
__global__ void convert_kernel(const In* x, int64_t count, Out* y) {
  pdl_trigger();
  pdl_wait();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    y[i] = convert_to(x[i], static_cast<Out*>(nullptr));
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

thread_local bool pdl_on = true;

}  // namespace

bool pdl_enabled() { return pdl_on; }
void set_pdl(bool on) { pdl_on = on; }

void embed(const DevMatrix& emb, const int32_t* tokens, int n, float scale, float* x,
           cudaStream_t s) {
  // A block per 256 columns: with one block a row, each thread walked 15 load-store rounds of a
  // 3,840-wide row, 8-9 µs on the H100 (ncu) for the first kernel of a decode or draft step.
  const auto blocks = static_cast<unsigned>((emb.cols + 255) / 256);
  launch(embed_kernel, dim3(blocks, static_cast<unsigned>(n)), 256, 0, s, emb, tokens, scale, x);
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

void to_f16(const float* x, int64_t count, __half* y, cudaStream_t s) {
  launch(convert_kernel<float, __half>, grid_for(count, 256), 256, 0, s, x, count, y);
  GEM_CUDA_LAUNCHED();
}

void to_f32(const __half* x, int64_t count, float* y, cudaStream_t s) {
  launch(convert_kernel<__half, float>, grid_for(count, 256), 256, 0, s, x, count, y);
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
