// The attention dispatcher: the decode kernels for one query per head with its K/V in the cache,
// else the multi-query split kernel; then the merge of the splits.
#include <cstdio>
#include <cstdlib>

#include "backend/cuda/attention.cuh"
#include "backend/cuda/attention_decode.cuh"
#include "backend/cuda/attention_merge.cuh"
#include "backend/cuda/attention_parts.cuh"
#include "backend/cuda/attention_split.cuh"
#include "backend/cuda/cuda_common.cuh"

namespace gem::cuda {

size_t attention_part_floats(int n, int n_heads, int head_dim, int n_splits) {
  return static_cast<size_t>(n) * n_heads * n_splits * part_stride(head_dim);
}

void attention(const AttnArgs& args, cudaStream_t s, const CudaTuning& t) {
  AttnArgs a = args;
  // Early K/V copies (before pdl_wait) are safe when the previous kernel wrote only the query's
  // own key; a rows pass's prologue writes the keys of every row of a slot, which the slot's
  // later rows read: they wait.
  a.early_kv = t.attn_early_kv && a.rows == nullptr;
  if (a.n_splits > kMaxSplits) {
    std::fprintf(stderr, "attention: %d splits exceed %d\n", a.n_splits, kMaxSplits);
    std::abort();
  }
  if (attention_decode_supported(a)) {
    launch_attention_decode(a, t, s);
    GEM_CUDA_LAUNCHED();
    launch_attention_merge(a, 1, t, s);
    GEM_CUDA_LAUNCHED();
    return;
  }
  if (a.tile_in_cache) {
    std::fprintf(stderr, "attention: tile_in_cache needs n = 1 and 1-16 heads per KV head\n");
    std::abort();
  }
  launch_attention_split(a, s);
  GEM_CUDA_LAUNCHED();
  launch_attention_merge(a, a.n, t, s);
  GEM_CUDA_LAUNCHED();
}

}  // namespace gem::cuda
