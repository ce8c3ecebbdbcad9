// Shared by the CUDA tests: they build wherever the CUDA backend does (CI compiles them) and
// skip, with a message, on a machine without a device.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/matvec.cuh"
#include "backend/cuda/types.cuh"
#include "base/dtype.h"

#define REQUIRE_GPU()                                                                   \
  do {                                                                                  \
    if (!::gem::cuda_device_available()) GTEST_SKIP() << "no CUDA device on this machine"; \
  } while (0)

namespace gem::test {

// A device matrix built the way the backend builds it (raw upload + repack).
struct DevWeights {
  cuda::DevMatrix m;
  std::vector<void*> bufs;
  DevWeights(DType type, const std::vector<uint8_t>& raw, int64_t rows, int64_t cols) {
    m.rows = rows;
    m.cols = cols;
    void* staging = nullptr;
    EXPECT_EQ(cudaMalloc(&staging, raw.size()), cudaSuccess);
    bufs.push_back(staging);
    EXPECT_EQ(cudaMemcpy(staging, raw.data(), raw.size(), cudaMemcpyHostToDevice), cudaSuccess);
    if (type == DType::kQ4_0 || type == DType::kQ8_0) {
      const bool q8 = type == DType::kQ8_0;
      m.type = q8 ? cuda::WType::kQ8_0 : cuda::WType::kQ4_0;
      void *qs = nullptr, *d = nullptr;
      EXPECT_EQ(cudaMalloc(&qs, rows * cols / (q8 ? 1 : 2)), cudaSuccess);
      EXPECT_EQ(cudaMalloc(&d, rows * cols / 32 * 2), cudaSuccess);
      bufs.push_back(qs);
      bufs.push_back(d);
      m.qs = static_cast<uint8_t*>(qs);
      m.d = static_cast<__half*>(d);
      cuda::repack_blocks(static_cast<uint8_t*>(staging), rows * cols / 32, q8, m.qs, m.d, nullptr);
      EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    } else {
      m.type = type == DType::kQ6_K ? cuda::WType::kQ6_K : cuda::WType::kF32;
      m.raw = static_cast<uint8_t*>(staging);
    }
  }
  ~DevWeights() {
    for (void* p : bufs) cudaFree(p);
  }
  DevWeights(const DevWeights&) = delete;
  DevWeights& operator=(const DevWeights&) = delete;
};


}  // namespace gem::test
