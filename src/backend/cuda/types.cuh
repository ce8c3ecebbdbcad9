// The device-side types the launchers share: weight matrices in their device layout, q8
// activations, the per-step parameters a captured decode graph reads. Host and device code.
#pragma once

#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "backend/cuda/tuning.h"

// cuBLAS failures are programming errors (bad shapes or handles), like launch errors: abort with
// the place.
#define GEM_CUBLAS_CHECK(expr)                                                         \
  do {                                                                                 \
    cublasStatus_t gem_st_ = (expr);                                                   \
    if (gem_st_ != CUBLAS_STATUS_SUCCESS) {                                            \
      std::fprintf(stderr, "%s:%d: cuBLAS error %d: %s\n", __FILE__, __LINE__,          \
                   static_cast<int>(gem_st_), #expr);                                  \
      std::abort();                                                                    \
    }                                                                                  \
  } while (0)

namespace gem::cuda {

// A weight matrix on the device, [rows, cols] (rows = out features). Q4_0 and Q8_0 are stored
// repacked ("split" layout, derived at load from the GGUF blocks): the quant bytes of every row
// contiguous and 16-byte aligned (Q4_0: 16 bytes per block in GGUF nibble order; Q8_0: 32 int8
// per block), the fp16 block scales in a separate [rows, cols/32] array. Q6_K and F32 keep the
// GGUF bytes as they are (`raw`).
enum class WType { kF32, kQ4_0, kQ8_0, kQ6_K };
struct DevMatrix {
  WType type = WType::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  uint8_t* qs = nullptr;   // Q4_0: [rows, cols/2]; Q8_0: [rows, cols]
  __half* d = nullptr;     // Q4_0/Q8_0: [rows, cols/32]
  uint8_t* raw = nullptr;  // F32: [rows, cols] floats; Q6_K: GGUF super-blocks
};

// A q8 block's scale and the sum of its quants. s has at most 22 significant bits, so that s times
// the integer sums' bias (block_terms.cuh: 1.5·2^23 = 3·2^22) is exact; qsum brings Q4_0's −8
// offset into the integer sum (Σ (nib − 8)·q = Σ nib·q − 8·qsum).
struct alignas(8) Q8Ds {
  float s;
  int32_t qsum;
};

// Activations quantised for the integer dot products of the decode matrix-vector kernels,
// llama.cpp's q8_1 idea: per 32 values one scale s ≈ max|x|/127 (Q8Ds), q = round(x·127/max|x|).
// q: [n, cols] int8.   ds: [n, cols/32].
struct Q8Act {
  int8_t* q = nullptr;
  Q8Ds* ds = nullptr;
};

// Per-eval values the captured decode graph reads from device memory, so one graph serves
// every position.
struct StepParams {
  int32_t pos0;  // position of the tile's first token (= n_past before the eval)
};

// One row of a rows pass (batch_cuda.cu): a token of sequence slot `slot` at position `pos0`,
// computed as that slot's decode step would compute it. pos0 comes first, so &rows[i] serves as
// the row's StepParams. `row`: the row's index in the pass (its q, output and logits rows).
struct RowParams {
  int32_t pos0;
  int32_t slot;
  int32_t row;
  int32_t pad;
};

}  // namespace gem::cuda
