// The merge of the attention splits: the output (and its q8 copy) from every split's online
// softmax state.
#pragma once

#include <cuda_runtime.h>

#include "backend/cuda/attention.cuh"

namespace gem::cuda {

// The most splits a merge takes.
constexpr int kMaxSplits = 1024;
// Merges the splits of n queries (chunk size: CudaTuning::merge_chunk or its rule).
void launch_attention_merge(const AttnArgs& a, int n, const CudaTuning& t, cudaStream_t s);

}  // namespace gem::cuda
