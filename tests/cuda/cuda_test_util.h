// Shared by the CUDA tests: they build wherever the CUDA backend does (CI compiles them) and
// skip, with a message, on a machine without a device.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
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

// A device buffer of n T, poisoned (all bits set: NaN for floats) so that an unwritten output
// fails the comparison; from a vector, its copy.
template <typename T>
struct Dev {
  T* p = nullptr;
  size_t n = 0;
  explicit Dev(size_t count) : n(count) {
    EXPECT_EQ(cudaMalloc(&p, count * sizeof(T) + 16), cudaSuccess);
    poison();
  }
  Dev(const std::vector<T>& v) : Dev(v.size()) {
    EXPECT_EQ(cudaMemcpy(p, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~Dev() { cudaFree(p); }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  void poison() { EXPECT_EQ(cudaMemset(p, 0xFF, n * sizeof(T)), cudaSuccess); }
  std::vector<T> get() const {
    std::vector<T> v(n);
    EXPECT_EQ(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return v;
  }
};

// The tests' random source: a fresh seed each run (fresh random inputs at real shapes).
inline std::mt19937& rng() {
  static std::mt19937 g(std::random_device{}());
  return g;
}

// n normal values of standard deviation `scale`.
inline std::vector<float> randn(size_t n, float scale = 1.0f) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng());
  return v;
}

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
