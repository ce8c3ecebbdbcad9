// The decode attention (one query per head, its own K/V already in the cache): which form a
// launch takes, its one-time setup, and its launcher (attention() calls it).
#pragma once

#include <cuda_runtime.h>

#include "backend/cuda/attention.cuh"

namespace gem::cuda {

// Whether attention() takes the decode kernel for these arguments (n = 1, tile_in_cache, a
// group of 1, 2, 4, 8 or 16 heads per KV head).
bool attention_decode_supported(const AttnArgs& a);
// Whether that decode takes a tensor-core form (f16 cache, 8 or 16 heads per KV head, D 256 or
// 512; t.attn_form = 0 turns them off).
bool attention_decode_uses_mma(const AttnArgs& a, const CudaTuning& t = kDefaultTuning);
// Whether that decode reads only K's rotated dims besides V (the split tensor-core form with
// AttnArgs::k_shared_w set).
bool attention_decode_shares_kv(const AttnArgs& a, const CudaTuning& t = kDefaultTuning);
// One-time kernel attributes (the tensor-core decode's shared memory); call outside graph capture.
void attention_setup();
// Launches the decode kernel of `a` (attention_decode_supported(a)); the merge follows.
void launch_attention_decode(const AttnArgs& a, const CudaTuning& t, cudaStream_t s);

}  // namespace gem::cuda
