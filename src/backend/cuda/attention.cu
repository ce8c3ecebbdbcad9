// Attention of one layer over the KV cache plus the tile's own fresh keys (flash decoding):
// the visible key range of a group of queries is cut into n_splits pieces done by separate
// blocks; each warp owns one (query, head) and runs an online softmax over its piece; a second
// kernel merges the pieces and writes the output (and its q8 copy for the next product).
#include <cuda_fp16.h>

#include <cmath>

#include "backend/cuda/cuda_common.cuh"
#include "backend/cuda/kernels.cuh"

namespace gem::cuda {
namespace {

constexpr int kMinChunk = 32;  // fewest keys per split: below this the merge costs more

__device__ __forceinline__ float to_f(float v) { return v; }
__device__ __forceinline__ float to_f(__half v) { return __half2float(v); }

// Block = hpb heads of one KV group × qpb queries (≤ 8 warps); grid.x = (kv head, split, head
// sub-group), grid.y = query group.
template <int D, typename T>
__global__ void __launch_bounds__(256) attention_kernel(AttnArgs a, int qpb, int hpb) {
  constexpr int kPL = D / 32;              // elements per lane
  constexpr int kKG = D <= 256 ? 8 : 4;    // keys loaded together (memory-level parallelism)
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int r = a.n_heads / a.n_kv, n_sub = r / hpb;
  const int g = blockIdx.x / (a.n_splits * n_sub);
  const int split = (blockIdx.x / n_sub) % a.n_splits, sub = blockIdx.x % n_sub;
  const int t0 = blockIdx.y * qpb;
  const int tq = t0 + warp / hpb, j = g * r + sub * hpb + warp % hpb;
  if (tq >= a.n) return;
  const int pos0 = a.sp->pos0;
  const int t_last = min(t0 + qpb, a.n) - 1;
  const int lo = a.window > 0 ? max(0, pos0 + t0 - a.window + 1) : 0;
  const int hi = pos0 + t_last + 1;
  const int len = hi - lo;
  int chunk = (len + a.n_splits - 1) / a.n_splits;
  chunk = chunk < kMinChunk ? kMinChunk : chunk;
  const int k_begin = lo + split * chunk, k_end = min(hi, k_begin + chunk);
  const int p = pos0 + tq;
  const int kb = max(k_begin, a.window > 0 ? max(0, p - a.window + 1) : 0);
  const int ke = min(k_end - 1, p);  // inclusive

  float qv[kPL], acc[kPL];
  const float* qrow = a.q + (static_cast<int64_t>(tq) * a.n_heads + j) * D;
#pragma unroll
  for (int i = 0; i < kPL; ++i) {
    qv[i] = qrow[lane + 32 * i];
    acc[i] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  const T* kc = static_cast<const T*>(a.k_cache) + static_cast<int64_t>(g) * a.n_slots * D;
  const T* vc = static_cast<const T*>(a.v_cache) + static_cast<int64_t>(g) * a.n_slots * D;
  for (int k0 = kb; k0 <= ke; k0 += kKG) {
    float kv[kKG][kPL], vv[kKG][kPL], s[kKG];
#pragma unroll
    for (int u = 0; u < kKG; ++u) {
      const int kp = k0 + u;
      if (kp > ke) {
#pragma unroll
        for (int i = 0; i < kPL; ++i) kv[u][i] = vv[u][i] = 0.0f;
      } else if (kp < pos0) {
        const int64_t slot = a.ring ? kp % a.n_slots : kp;
#pragma unroll
        for (int i = 0; i < kPL; ++i) {
          kv[u][i] = to_f(kc[slot * D + lane + 32 * i]);
          vv[u][i] = to_f(vc[slot * D + lane + 32 * i]);
        }
      } else {
        const int64_t off = (static_cast<int64_t>(kp - pos0) * a.n_kv + g) * D;
#pragma unroll
        for (int i = 0; i < kPL; ++i) {
          kv[u][i] = a.k_tile[off + lane + 32 * i];
          vv[u][i] = a.v_tile[off + lane + 32 * i];
        }
      }
    }
#pragma unroll
    for (int u = 0; u < kKG; ++u) {
      float dot = 0.0f;
#pragma unroll
      for (int i = 0; i < kPL; ++i) dot += qv[i] * kv[u][i];
      s[u] = dot;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
#pragma unroll
      for (int u = 0; u < kKG; ++u) s[u] += __shfl_xor_sync(0xffffffffu, s[u], o);
    }
    float mg = m;
#pragma unroll
    for (int u = 0; u < kKG; ++u) {
      if (k0 + u <= ke) mg = fmaxf(mg, s[u]);
    }
    const float corr = expf(m - mg);
    l *= corr;
#pragma unroll
    for (int i = 0; i < kPL; ++i) acc[i] *= corr;
#pragma unroll
    for (int u = 0; u < kKG; ++u) {
      const float pu = k0 + u <= ke ? expf(s[u] - mg) : 0.0f;
      l += pu;
#pragma unroll
      for (int i = 0; i < kPL; ++i) acc[i] += pu * vv[u][i];
    }
    m = mg;
  }
  float* part = a.part + ((static_cast<int64_t>(tq) * a.n_heads + j) * a.n_splits + split) * (D + 2);
  if (lane == 0) {
    part[0] = m;
    part[1] = l;
  }
#pragma unroll
  for (int i = 0; i < kPL; ++i) part[2 + lane + 32 * i] = acc[i];
}

// Merges the splits of one (query, head): block of D threads, thread d owns output element d.
// The split weights are computed once, in parallel, into shared memory; the weighted sum then
// skips empty splits and keeps several loads in flight.
constexpr int kMaxSplits = 1024;
__global__ void attention_merge_kernel(AttnArgs a) {
  __shared__ float w[kMaxSplits];
  __shared__ float red[32];
  const int t = blockIdx.x, j = blockIdx.y, d = threadIdx.x, D = a.head_dim;
  const int ns = a.n_splits;
  const float* part = a.part + (static_cast<int64_t>(t) * a.n_heads + j) * ns * (D + 2);
  float mx = -INFINITY;
  for (int sp = d; sp < ns; sp += blockDim.x) {
    if (part[sp * (D + 2) + 1] > 0.0f) mx = fmaxf(mx, part[sp * (D + 2)]);
  }
  // Block max (through the sum helper's pattern).
  mx = warp_max(mx);
  if ((d & 31) == 0) red[d >> 5] = mx;
  __syncthreads();
  mx = -INFINITY;
  for (int k = 0; k < (static_cast<int>(blockDim.x) >> 5); ++k) mx = fmaxf(mx, red[k]);
  float lsum = 0.0f;
  for (int sp = d; sp < ns; sp += blockDim.x) {
    const float l = part[sp * (D + 2) + 1];
    const float ws = l > 0.0f ? expf(part[sp * (D + 2)] - mx) : 0.0f;
    w[sp] = ws;
    lsum += l * ws;
  }
  const float l = block_sum(lsum, red);  // starts with a barrier: w[] is complete after it
  float o[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  int sp = 0;
  for (; sp + 4 <= ns; sp += 4) {
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      if (w[sp + u] != 0.0f) o[u] += w[sp + u] * part[(sp + u) * (D + 2) + 2 + d];
    }
  }
  for (; sp < ns; ++sp) {
    if (w[sp] != 0.0f) o[0] += w[sp] * part[sp * (D + 2) + 2 + d];
  }
  const float v = (o[0] + o[1] + o[2] + o[3]) / l;
  const int64_t row = static_cast<int64_t>(t) * a.n_heads * D;
  a.out[row + j * D + d] = v;
  if (a.outq.q) {
    const int lane = d & 31;
    const float amax = warp_max(fabsf(v));
    const float s = amax / 127.0f;
    const int qi = s > 0.0f ? __float2int_rn(v / s) : 0;
    a.outq.q[row + j * D + d] = static_cast<int8_t>(qi);
    const float qsum = warp_sum(static_cast<float>(qi));
    if (lane == 0) a.outq.ds[row / 32 + (j * D + d) / 32] = make_float2(s, s * qsum);
  }
}

template <int D>
void launch(const AttnArgs& a, dim3 grid, int threads, int qpb, int hpb, cudaStream_t s) {
  if (a.f16) {
    attention_kernel<D, __half><<<grid, threads, 0, s>>>(a, qpb, hpb);
  } else {
    attention_kernel<D, float><<<grid, threads, 0, s>>>(a, qpb, hpb);
  }
}

}  // namespace

size_t attention_part_floats(int n, int n_heads, int head_dim, int n_splits) {
  return static_cast<size_t>(n) * n_heads * n_splits * (head_dim + 2);
}

void attention(const AttnArgs& a, cudaStream_t s) {
  const int r = a.n_heads / a.n_kv;
  int hpb = r <= 8 ? r : 8;
  while (r % hpb != 0) --hpb;  // heads per block: a divisor of r, at most 8
  int qpb = 8 / hpb;
  qpb = qpb > a.n ? a.n : qpb;
  const dim3 grid(a.n_kv * a.n_splits * (r / hpb), (a.n + qpb - 1) / qpb);
  const int threads = 32 * hpb * qpb;
  switch (a.head_dim) {
    case 32: launch<32>(a, grid, threads, qpb, hpb, s); break;
    case 64: launch<64>(a, grid, threads, qpb, hpb, s); break;
    case 128: launch<128>(a, grid, threads, qpb, hpb, s); break;
    case 256: launch<256>(a, grid, threads, qpb, hpb, s); break;
    case 512: launch<512>(a, grid, threads, qpb, hpb, s); break;
    default:
      std::fprintf(stderr, "attention: head_dim %d not supported (32..512, powers of 2)\n",
                   a.head_dim);
      std::abort();
  }
  GEM_CUDA_LAUNCHED();
  if (a.n_splits > kMaxSplits) {
    std::fprintf(stderr, "attention: %d splits exceed %d\n", a.n_splits, kMaxSplits);
    std::abort();
  }
  attention_merge_kernel<<<dim3(a.n, a.n_heads), a.head_dim, 0, s>>>(a);
  GEM_CUDA_LAUNCHED();
}

}  // namespace gem::cuda
