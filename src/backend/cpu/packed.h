// The kernel-friendly weight layout of the fast path, derived at load from the GGUF's Q4_0, Q8_0
// and Q6_K matrices (the file's own bytes stay mapped and untouched: get_row and the reference
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
//
// Q6_K, per group g and 256-value super-block s (ns = cols/256 of them), codes c = q6k_code
// (base/dtype.h, 0..63) split into their low 4 bits lo(c) and high 2 bits hi(c):
//   d  [(g·ns + s)·16 + r]        fp16 super-block scale of row 16g + r
//   sc [(g·ns + s)·256 + 16j + r] int8 scale of row 16g + r's 16-value group j (j = 0..15)
//   qs [(g·ns + s)·3072 + 384b + ...] the super-block's 32-value block b (b = 0..7, elements
//      e = 32b..32b+31) as 6 slices of 64 bytes, byte 4r + i of each for row 16g + r:
//      slice k = 0..3 (ql): lo(c[32b + 4k + i]) | lo(c[32b + 16 + 4k + i]) << 4, Q4_0's order;
//      slice 4 + m, m = 0..1 (qh): hi of the 4 elements that slices k = 2m (bits 0..1: its low
//      nibble's element, 2..3: its high nibble's) and k = 2m + 1 (bits 4..5, 6..7) hold.
// So a block's low-nibble codes (group 2b) and high-nibble codes (group 2b + 1) are each one
// int8 scale per row away from the block's two int32 sums (AVX-512: vpdpbusd then vpmulld; AVX2,
// on 8-row halves: vpmaddubsw then vpmaddwd; AMX runs the AVX-512 kernel for Q6_K).
// Every packed matrix holds the same bytes as the file (18, 34 or 210 per block per row), so
// decode streams the same amount.
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>

#include "backend/cpu/thread_pool.h"
#include "model/model.h"

namespace gem::cpu {

constexpr int64_t kPackRows = 16;

struct PackedMatrix {
  DType type = DType::kF32;  // kQ4_0, kQ8_0 or kQ6_K
  int64_t rows = 0;          // a multiple of kPackRows
  int64_t cols = 0;          // a multiple of the block (32; Q6_K 256)
  const uint8_t* qs = nullptr;
  const uint16_t* d = nullptr;
  const int8_t* sc = nullptr;  // Q6_K's group scales; else null
  // Blocks of a row: 32-value blocks, Q6_K's 256-value super-blocks.
  int64_t n_blocks() const { return cols / (type == DType::kQ6_K ? 256 : 32); }
  // Quant bytes of one (group, block): 256 (Q4_0), 512 (Q8_0) or 3072 (Q6_K).
  int64_t group_block_bytes() const {
    return type == DType::kQ4_0 ? 256 : type == DType::kQ8_0 ? 512 : 3072;
  }
};

// True for the matrices the layout covers: Q4_0, Q8_0 or Q6_K with rows % 16 == 0.
bool packable(const model::TensorView& w);
// Bytes of the packed copy: quants plus scales (the size of the tensor in the file).
uint64_t packed_bytes(const model::TensorView& w);
// Writes w's packed form into qs, d and (Q6_K) sc, sized as packed_parts says; groups split over
// the pool. Returns the view.
struct PackedParts {
  uint64_t qs = 0, d = 0, sc = 0;  // bytes
};
PackedParts packed_parts(const model::TensorView& w);
PackedMatrix pack_matrix(const model::TensorView& w, uint8_t* qs, uint16_t* d, int8_t* sc,
                         ThreadPool& pool);

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
// GEM_CPU_REPACK=0 (memory short: the copy is the size of the model's packable matrices).
bool repack_enabled();

}  // namespace gem::cpu
