// The multi-query split attention (prompt tiles under 16 tokens, decode forms the decode kernels
// do not take): one warp per (query, head) over its split's keys; the merge follows.
#pragma once

#include <cuda_runtime.h>

#include "backend/cuda/attention.cuh"

namespace gem::cuda {

void launch_attention_split(const AttnArgs& a, cudaStream_t s);

}  // namespace gem::cuda
