// The multi-query split attention: each warp owns one (query, head) and runs an online softmax
// over its split's keys from the cache and the tile's own K/V; the merge writes the output.
#include <cuda_fp16.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "backend/cuda/attention_parts.cuh"
#include "backend/cuda/attention_split.cuh"
#include "backend/cuda/cuda_common.cuh"

namespace gem::cuda {
namespace {

// Block = hpb heads of one KV group × qpb queries (≤ 8 warps); grid.x = (kv head, split, head
// sub-group), grid.y = query group.
template <int D, typename T>
__global__ void __launch_bounds__(256) attention_kernel(AttnArgs a, int qpb, int hpb) {
  pdl_trigger();
  pdl_wait();
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
  chunk = chunk < kSplitMinKeys ? kSplitMinKeys : chunk;
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
  float* part =
      a.part + ((static_cast<int64_t>(tq) * a.n_heads + j) * a.n_splits + split) * part_stride(D);
  if (lane == 0) {
    part[0] = m;
    part[1] = l;
  }
#pragma unroll
  for (int i = 0; i < kPL; ++i) part[kPartHead + lane + 32 * i] = acc[i];
}

template <int D>
void launch_attention(const AttnArgs& a, dim3 grid, int threads, int qpb, int hpb, cudaStream_t s) {
  if (a.f16) {
    launch(attention_kernel<D, __half>, grid, threads, 0, s, a, qpb, hpb);
  } else {
    launch(attention_kernel<D, float>, grid, threads, 0, s, a, qpb, hpb);
  }
}

}  // namespace

void launch_attention_split(const AttnArgs& a, cudaStream_t s) {
  const int r = a.n_heads / a.n_kv;
  int hpb = r <= 8 ? r : 8;
  while (r % hpb != 0) --hpb;  // heads per block: a divisor of r, at most 8
  int qpb = 8 / hpb;
  qpb = qpb > a.n ? a.n : qpb;
  const dim3 grid(a.n_kv * a.n_splits * (r / hpb), (a.n + qpb - 1) / qpb);
  const int threads = 32 * hpb * qpb;
  switch (a.head_dim) {
    case 32: launch_attention<32>(a, grid, threads, qpb, hpb, s); break;
    case 64: launch_attention<64>(a, grid, threads, qpb, hpb, s); break;
    case 128: launch_attention<128>(a, grid, threads, qpb, hpb, s); break;
    case 256: launch_attention<256>(a, grid, threads, qpb, hpb, s); break;
    case 512: launch_attention<512>(a, grid, threads, qpb, hpb, s); break;
    default:
      std::fprintf(stderr, "attention: head_dim %d not supported (32..512, powers of 2)\n",
                   a.head_dim);
      std::abort();
  }
}

}  // namespace gem::cuda
