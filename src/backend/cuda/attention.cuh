// Attention of one layer over the KV cache plus the tile's own keys, split over key ranges
// (flash decoding): the arguments, the dispatcher, and the parts' size. The decode kernels
// (attention_decode.cu), the multi-query split kernel (attention_split.cu) and the merge of the
// splits (attention_merge.cu) are behind it; eval tiles of 4 rows or more take the tensor-core
// path of attention_prefill.cuh instead (CudaBackend::attention_tile; short evals over an f32
// cache excepted).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "backend/cuda/types.cuh"

namespace gem::cuda {

// The fewest keys of an attention split (decode and prompt kernels), the rule the backend's
// split counts follow too. Measured on the H200: 64 (fewer, longer splits for the sliding
// layers) was slower; 16 with 4 or 8 sliding-layer splits per SM no faster.
constexpr int kSplitMinKeys = 32;

// One attention of a layer for the tile's n queries at positions sp->pos0 + t. Keys at
// positions < pos0 come from the cache ([n_kv, n_slots, D], f32 or f16; ring: slot = pos %
// n_slots), keys of the tile itself from k/v ([n, n_kv, D] f32). Visible: causal, and within
// `window` on sliding layers (0 = unlimited). Scale 1.0. out: [n, n_heads, D] f32, plus its
// q8 copy when outq.q. `part` is scratch of attention_part_floats() floats.
struct AttnArgs {
  const float* q;
  const float* k_tile;
  const float* v_tile;
  const void* k_cache;
  const void* v_cache;
  bool f16;
  bool ring;
  int n_slots;
  int n;
  int n_heads;
  int n_kv;
  int head_dim;
  int window;
  int n_splits;  // key ranges per (query, head) done by separate blocks (flash decoding)
  const StepParams* sp;
  float* part;
  float* out;
  Q8Act outq;
  // n = 1 only: the query's own K/V were already stored in the cache (qkv_prologue's KvDest),
  // so every key comes from the cache: the decode kernel (K/V tiles shared by a group's heads).
  bool tile_in_cache = false;
  // The most keys this launch can see (a decode graph's bucket; 0: unknown): long ranges take
  // the split tensor-core form (CudaTuning::attn_split_min_keys).
  int64_t max_keys = 0;
  // Set by attention() from CudaTuning::attn_early_kv: decode blocks whose key range does not
  // hold the token's position issue their first K/V copies before pdl_wait.
  bool early_kv = false;
  // Full layers whose V is the raw K projection and whose RoPE turns only the pairs below D/8
  // (Gemma 4's proportional RoPE): the K norm's weight w_k, with which K = V ⊙ w_k on the dims
  // that do not rotate. The split tensor-core decode then reads only K's rotated quarter besides
  // V (attention_decode.cu, shared_kv_rotated). nullptr: K is read whole.
  const float* k_shared_w = nullptr;
  // A rows pass (decode kernels only): n_rows decode queries, blockIdx.z = z being rows[z] — its
  // position, its q/out row rows[z].row, its sequence slot's cache at rows[z].slot·slot_bytes from
  // k_cache and v_cache — each computed exactly as that slot's decode step computes it; its
  // parts at z·n_heads·n_splits·part_stride(D) in `part`. nullptr: one query at sp->pos0.
  const RowParams* rows = nullptr;
  int n_rows = 1;
  size_t slot_bytes = 0;
};
size_t attention_part_floats(int n, int n_heads, int head_dim, int n_splits);
void attention(const AttnArgs& a, cudaStream_t s, const CudaTuning& t = kDefaultTuning);

}  // namespace gem::cuda
