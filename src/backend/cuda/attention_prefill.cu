// Prompt attention on the tensor cores, through cuBLAS: per query sub-tile and KV group,
// S = Q·Kᵀ (a strided batched product over the KV heads, the group's query heads stacked as
// rows), a masked row softmax into P, and O = P·V; the result is written as the f16 rows that
// attn_output's product reads. f16 caches multiply in f16, f32 caches in TF32 (both with f32
// accumulation and f32 scores). Ring layers read their keys from a gathered copy (the ring's
// visible entries, then the tile's own keys), full layers straight from the cache.
#include <cublas_v2.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>

#include "backend/cuda/attention_prefill.cuh"
#include "backend/cuda/cuda_common.cuh"

namespace gem::cuda {
namespace {

__device__ __forceinline__ void store_as(float* p, float v) { *p = v; }
__device__ __forceinline__ void store_as(__half* p, float v) { *p = __float2half_rn(v); }

// Between the [n, H, D] layout (token-major) and [G, n, r, D] (the r heads of a KV group
// adjacent, per token): kToGroups: dst[g][t][j][d] = src[t][g·r + j][d]; else the inverse.
template <bool kToGroups, typename Out>
__global__ void regroup_kernel(const float* src, int n, int n_heads, int n_kv, int D, Out* dst) {
  pdl_trigger();
  pdl_wait();
  const int64_t r = n_heads / n_kv;
  const int64_t total = static_cast<int64_t>(n) * n_heads * D;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t d = i % D, row = i / D;
    int64_t src_row;
    if constexpr (kToGroups) {  // row = (g·n + t)·r + j
      const int64_t j = row % r, t = (row / r) % n, g = row / (r * n);
      src_row = t * n_heads + g * r + j;
    } else {  // row = t·H + h
      const int64_t h = row % n_heads, t = row / n_heads;
      src_row = ((h / r) * n + t) * r + h % r;
    }
    store_as(dst + i, src[src_row * D + d]);
  }
}

// kg[g][k][d], vg[g][k][d] for positions lo + k, k < nk: from the ring below pos0, from the
// tile (f32) from pos0 on.
template <typename T>
__global__ void gather_kv_kernel(const T* kc, const T* vc, const float* kt, const float* vt,
                                 int n_kv, int n_slots, int D, int lo, int pos0, int nk,
                                 int64_t g_stride, T* kg, T* vg) {
  pdl_trigger();
  pdl_wait();
  const int64_t total = static_cast<int64_t>(n_kv) * nk * D;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t d = i % D, k = (i / D) % nk, g = i / (static_cast<int64_t>(D) * nk);
    const int pos = lo + static_cast<int>(k);
    const int64_t dst = g * g_stride + k * D + d;
    if (pos < pos0) {
      const int64_t src = (g * n_slots + pos % n_slots) * D + d;
      kg[dst] = kc[src];
      vg[dst] = vc[src];
    } else {
      const int64_t src = (static_cast<int64_t>(pos - pos0) * n_kv + g) * D + d;
      store_as(kg + dst, kt[src]);
      store_as(vg + dst, vt[src]);
    }
  }
}

// One block per score row (g, i = t_local·r + j): P = softmax over the visible keys, 0 elsewhere.
// Key k of the row is position klo + k; query t sits at position pos0 + t0 + t_local.
template <typename T>
__global__ void softmax_rows_kernel(const float* s, T* p, int rows_per_g, int r, int nk, int ld,
                                    int klo, int qpos0, int window) {
  pdl_trigger();
  pdl_wait();
  __shared__ float red[32];
  const int64_t row = static_cast<int64_t>(blockIdx.y) * rows_per_g + blockIdx.x;
  const float* sr = s + row * ld;
  T* pr = p + row * ld;
  const int qp = qpos0 + static_cast<int>(blockIdx.x) / r;
  const int vlo = std::max(0, (window > 0 ? qp - window + 1 : 0) - klo);
  const int vhi = std::min(nk - 1, qp - klo);  // inclusive
  float mx = -INFINITY;
  for (int k = vlo + threadIdx.x; k <= vhi; k += blockDim.x) mx = fmaxf(mx, sr[k]);
  mx = warp_max(mx);
  __syncthreads();
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = mx;
  __syncthreads();
  mx = -INFINITY;
  for (int w = 0; w < static_cast<int>(blockDim.x >> 5); ++w) mx = fmaxf(mx, red[w]);
  float sum = 0.0f;
  for (int k = vlo + threadIdx.x; k <= vhi; k += blockDim.x) sum += expf(sr[k] - mx);
  sum = block_sum(sum, red);
  const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
  for (int k = threadIdx.x; k < nk; k += blockDim.x) {
    store_as(pr + k, k >= vlo && k <= vhi ? expf(sr[k] - mx) * inv : 0.0f);
  }
}

int grid_of(int64_t count) {
  const int64_t b = (count + 255) / 256;
  return static_cast<int>(std::clamp<int64_t>(b, 1, 8192));
}

int64_t round8(int64_t v) { return (v + 7) / 8 * 8; }


// Bytes of the fixed part of the scratch: qp, o, and the gathered ring keys.
struct Layout {
  size_t qp, o, kg, vg, sp;  // offsets
  size_t fixed;
  int64_t kg_stride;         // elements per KV head in kg/vg
};

Layout layout_of(int max_n, int n_heads, int n_kv, int D, int window, bool f16) {
  const size_t es = f16 ? 2 : 4;
  Layout L{};
  auto align = [](size_t v) { return (v + 255) / 256 * 256; };
  const size_t q_elems = static_cast<size_t>(max_n) * n_heads * D;
  L.kg_stride = round8(static_cast<int64_t>(window > 0 ? window - 1 : 0) + max_n) * D;
  L.qp = 0;
  L.o = align(L.qp + q_elems * es);
  L.kg = align(L.o + q_elems * 4);
  const size_t kv_elems = window > 0 ? static_cast<size_t>(n_kv) * L.kg_stride : 0;
  L.vg = align(L.kg + kv_elems * es);
  L.sp = align(L.vg + kv_elems * es);
  L.fixed = L.sp;
  return L;
}

template <typename T>
void run(const PrefillAttnArgs& a, cublasHandle_t h, cudaStream_t s) {
  constexpr bool kF16 = sizeof(T) == 2;
  const int n = a.n, H = a.n_heads, G = a.n_kv, D = a.head_dim, r = H / G;
  const Layout L = layout_of(a.max_n, H, G, D, a.ring ? a.window : 0, kF16);
  char* base = static_cast<char*>(a.scratch);
  T* qp = reinterpret_cast<T*>(base + L.qp);
  float* o = reinterpret_cast<float*>(base + L.o);
  T* kg = reinterpret_cast<T*>(base + L.kg);
  T* vg = reinterpret_cast<T*>(base + L.vg);
  char* sp_area = base + L.sp;
  const size_t sp_bytes = a.scratch_bytes - L.sp;

  launch(regroup_kernel<true, T>, grid_of(static_cast<int64_t>(n) * H * D), 256, 0, s, a.q, n, H,
         G, D, qp);
  // Keys of the whole tile: [lo_all, pos0 + n).
  const int lo_all = a.window > 0 ? std::max(0, a.pos0 - a.window + 1) : 0;
  const T* kbase;
  const T* vbase;
  int64_t k_stride;
  if (a.ring) {
    const int nk = a.pos0 + n - lo_all;
    launch(gather_kv_kernel<T>, grid_of(static_cast<int64_t>(G) * nk * D), 256, 0, s,
           static_cast<const T*>(a.k_cache), static_cast<const T*>(a.v_cache), a.k_tile, a.v_tile,
           G, a.n_slots, D, lo_all, a.pos0, nk, L.kg_stride, kg, vg);
    kbase = kg;
    vbase = vg;
    k_stride = L.kg_stride;
  } else {
    kbase = static_cast<const T*>(a.k_cache) + static_cast<int64_t>(lo_all) * D;
    vbase = static_cast<const T*>(a.v_cache) + static_cast<int64_t>(lo_all) * D;
    k_stride = static_cast<int64_t>(a.n_slots) * D;
  }
  const cudaDataType_t ab = kF16 ? CUDA_R_16F : CUDA_R_32F;
  const cublasComputeType_t ct = kF16 ? CUBLAS_COMPUTE_32F : CUBLAS_COMPUTE_32F_FAST_TF32;
  const float one = 1.0f, zero = 0.0f;
  // Query sub-tiles sized so that S (f32) and P fit the scratch for the widest key range.
  const int64_t n_max_keys = round8(a.pos0 + n - lo_all);
  const int64_t per_query = static_cast<int64_t>(H) * n_max_keys * (4 + sizeof(T));
  int qc = static_cast<int>(std::min<int64_t>(n, static_cast<int64_t>(sp_bytes) / per_query));
  if (qc < 1) {
    std::fprintf(stderr, "attention_prefill: scratch of %zu bytes holds no query row (%lld)\n",
                 sp_bytes, static_cast<long long>(per_query));
    std::abort();
  }
  for (int t0 = 0; t0 < n; t0 += qc) {
    const int nq = std::min(qc, n - t0);
    const int klo = a.window > 0 ? std::max(0, a.pos0 + t0 - a.window + 1) : 0;
    const int nk = a.pos0 + t0 + nq - klo;
    const int64_t ld = round8(nk);
    const int rows = nq * r;
    float* S = reinterpret_cast<float*>(sp_area);
    T* P = reinterpret_cast<T*>(sp_area + (static_cast<size_t>(G) * rows * ld * 4 + 255) / 256 * 256);
    const T* kb = kbase + static_cast<int64_t>(klo - lo_all) * D;
    const T* vb = vbase + static_cast<int64_t>(klo - lo_all) * D;
    // Sᵀ (nk × rows, column-major) = K (op T of D × nk) · Qpᵀ (D × rows).
    GEM_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
        h, CUBLAS_OP_T, CUBLAS_OP_N, nk, rows, D, &one, kb, ab, D, k_stride,
        qp + static_cast<int64_t>(t0) * r * D, ab, D, static_cast<int64_t>(n) * r * D, &zero, S,
        CUDA_R_32F, static_cast<int>(ld), static_cast<int64_t>(rows) * ld, G, ct,
        CUBLAS_GEMM_DEFAULT));
    launch(softmax_rows_kernel<T>, dim3(rows, G), 256, 0, s, S, P, rows, r, nk,
           static_cast<int>(ld), klo, a.pos0 + t0, a.window);
    // Oᵀ (D × rows) = Vᵀ (D × nk) · Pᵀ (nk × rows).
    GEM_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
        h, CUBLAS_OP_N, CUBLAS_OP_N, D, rows, nk, &one, vb, ab, D, k_stride, P, ab,
        static_cast<int>(ld), static_cast<int64_t>(rows) * ld, &zero,
        o + static_cast<int64_t>(t0) * r * D, CUDA_R_32F, D, static_cast<int64_t>(n) * r * D, G,
        ct, CUBLAS_GEMM_DEFAULT));
  }
  launch(regroup_kernel<false, __half>, grid_of(static_cast<int64_t>(n) * H * D), 256, 0, s, o, n,
         H, G, D, a.out16);
}

}  // namespace

size_t attention_prefill_scratch_bytes(int max_n, int n_heads, int n_kv, int head_dim,
                                       int window, bool f16, size_t score_bytes) {
  return layout_of(max_n, n_heads, n_kv, head_dim, window, f16).fixed + score_bytes;
}

void attention_prefill(const PrefillAttnArgs& a, cublasHandle_t h, cudaStream_t s) {
  if (a.n < 1 || a.n > a.max_n || a.n_kv < 1 || a.n_heads % a.n_kv != 0) {
    std::fprintf(stderr, "attention_prefill: bad shape (n %d of %d, %d heads, %d kv)\n", a.n,
                 a.max_n, a.n_heads, a.n_kv);
    std::abort();
  }
  if (a.f16) {
    run<__half>(a, h, s);
  } else {
    run<float>(a, h, s);
  }
}

}  // namespace gem::cuda
