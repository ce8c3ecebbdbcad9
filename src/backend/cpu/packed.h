// The kernel-friendly weight layout of the fast path, derived at load from the GGUF's Q4_0 and
// Q8_0 matrices (the file's own bytes stay mapped and untouched: get_row and the reference
// read them; GEM_CPU_REPACK=0 runs the fast kernels on the file's layout instead).
//
// Layout ("16-row interleaved"): rows in groups of 16; for group g and 32-value block b,
//   d  [(g·nb + b)·16 + r]        fp16 scale of row 16g + r, block b (32 bytes per group-block)
//   qs [(g·nb + b)·C·64 + 64k + 4r + i]  byte 4k + i of row 16g + r's block b quants,
// C = 4 chunks (Q4_0: 16 nibble bytes; chunk k holds elements 4k..4k+3 in its low nibbles and
// 16+4k..16+4k+3 in its high ones) or 8 (Q8_0: 32 signed bytes, elements 4k..4k+3). So one
// 64-byte load is one 4-element slice of 16 rows: a 512-bit register whose 32-bit lane r is
// row r, which vpdpbusd multiplies with the token's 4 activations broadcast to every lane, and
// 16 rows finish as one register of 16 floats (AVX2 uses the two 32-byte halves as 8 rows each).
// The same bytes as the file (18 or 34 per block per row), so decode streams the same amount.
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>

#include "backend/cpu/thread_pool.h"
#include "model/model.h"

namespace gem::cpu {

constexpr int64_t kPackRows = 16;

struct PackedMatrix {
  DType type = DType::kF32;  // kQ4_0 or kQ8_0
  int64_t rows = 0;          // a multiple of kPackRows
  int64_t cols = 0;          // a multiple of 32
  const uint8_t* qs = nullptr;
  const uint16_t* d = nullptr;
  int64_t n_blocks() const { return cols / 32; }
  // Quant bytes of one (group, block): 256 (Q4_0) or 512 (Q8_0).
  int64_t group_block_bytes() const { return type == DType::kQ4_0 ? 256 : 512; }
};

// True for the matrices the layout covers: Q4_0 or Q8_0 with rows % 16 == 0.
bool packable(const model::TensorView& w);
// Bytes of the packed copy: quants plus scales (the size of the tensor in the file).
uint64_t packed_bytes(const model::TensorView& w);
// Writes w's packed form into qs (packed_bytes - 32·groups·nb bytes) and d; groups split over
// the pool. Returns the view.
PackedMatrix pack_matrix(const model::TensorView& w, uint8_t* qs, uint16_t* d, ThreadPool& pool);

// One packed copy with its own storage (tests, benchmarks).
struct OwnedPacked {
  std::unique_ptr<uint8_t[]> storage;
  PackedMatrix view;
};
OwnedPacked pack_owned(const model::TensorView& w, ThreadPool& pool);

// Packed copies of every packable matrix of a model (layer matrices and the tied head) in one
// allocation (2 MiB aligned, transparent huge pages advised), looked up by the file pointer.
class PackedWeights {
 public:
  PackedWeights(const model::Model& model, ThreadPool& pool);
  ~PackedWeights();
  PackedWeights(const PackedWeights&) = delete;
  PackedWeights& operator=(const PackedWeights&) = delete;
  // The packed copy of w, or null when w is not packed.
  const PackedMatrix* find(const model::TensorView& w) const;
  uint64_t bytes() const { return bytes_; }
  int count() const { return static_cast<int>(map_.size()); }

 private:
  uint8_t* buf_ = nullptr;
  uint64_t bytes_ = 0;
  std::unordered_map<const uint8_t*, PackedMatrix> map_;
};

// Whether the fast path packs at load: on where an x86 SIMD path is active, unless
// GEM_CPU_REPACK=0 (memory short: the copy is the size of the model's Q4_0/Q8_0 matrices).
bool repack_enabled();

}  // namespace gem::cpu
