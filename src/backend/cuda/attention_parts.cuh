// Device helpers of the attention kernels: the parts (each split's online-softmax state) and
// element loads as float.
#pragma once

#include <cuda_fp16.h>

namespace gem::cuda {

__device__ __forceinline__ float to_f(float v) { return v; }
__device__ __forceinline__ float to_f(__half v) { return __half2float(v); }

// The parts (the attention's per-split state) of one (query, head): part_stride(D) floats per
// split, m and l first, then two unused floats so that the D accumulated values start 16-byte
// aligned (rows from cudaMalloc, D a multiple of 32): the merge reads them as float4.
constexpr int kPartHead = 4;
__host__ __device__ constexpr int part_stride(int D) { return D + kPartHead; }

}  // namespace gem::cuda
