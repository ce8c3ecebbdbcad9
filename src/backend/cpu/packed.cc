// Packing Q4_0, Q8_0 and Q6_K matrices into the 16-row interleaved layout (packed.h).
#include "backend/cpu/packed.h"

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include "backend/cpu/isa.h"
#include "backend/cpu/matmul.h"
#include "base/check.h"
#include "base/quant.h"

namespace gem::cpu {

bool packable(const model::TensorView& w) {
  const int64_t blk = w.type == DType::kQ6_K ? 256 : 32;
  return (w.type == DType::kQ4_0 || w.type == DType::kQ8_0 || w.type == DType::kQ6_K) &&
         w.rows > 0 && w.rows % kPackRows == 0 && w.cols % blk == 0 && w.present();
}

uint64_t packed_bytes(const model::TensorView& w) {
  const PackedParts p = packed_parts(w);
  return p.qs + p.d + p.sc;
}

PackedParts packed_parts(const model::TensorView& w) {
  const uint64_t rows = static_cast<uint64_t>(w.rows);
  PackedParts p;
  if (w.type == DType::kQ6_K) {
    const uint64_t sb = rows * static_cast<uint64_t>(w.cols / 256);  // super-blocks
    p.qs = sb * 192;
    p.sc = sb * 16;
    p.d = sb * 2;
  } else {
    const uint64_t blocks = rows * static_cast<uint64_t>(w.cols / 32);
    p.qs = blocks * (w.type == DType::kQ4_0 ? 16 : 32);
    p.d = blocks * 2;
  }
  return p;
}

namespace {

// Q4_0/Q8_0: each block's quant bytes go 4 at a time to the slices (packed.h).
void pack_q32(const model::TensorView& w, const PackedMatrix& p, uint8_t* qs, uint16_t* d,
              ThreadPool& pool) {
  const bool q4 = w.type == DType::kQ4_0;
  const int64_t nb = p.n_blocks();
  const int64_t bb = q4 ? sizeof(BlockQ4_0) : sizeof(BlockQ8_0);  // file block bytes
  const int64_t qbytes = q4 ? 16 : 32;                              // quant bytes per block
  const int64_t gbb = p.group_block_bytes();
  const uint64_t rb = w.row_bytes();
  pool.parallel_for(w.rows / kPackRows, [&](int64_t g0, int64_t g1, int) {
    for (int64_t g = g0; g < g1; ++g) {
      for (int64_t b = 0; b < nb; ++b) {
        uint8_t* dq = qs + (g * nb + b) * gbb;
        uint16_t* dd = d + (g * nb + b) * kPackRows;
        for (int64_t r = 0; r < kPackRows; ++r) {
          const uint8_t* blk = w.data + (g * kPackRows + r) * rb + b * bb;
          std::memcpy(dd + r, blk, 2);
          for (int64_t k = 0; k < qbytes / 4; ++k) std::memcpy(dq + 64 * k + 4 * r, blk + 2 + 4 * k, 4);
        }
      }
    }
  });
}

// Q6_K: codes regrouped into the nibble and high-bit slices, scales and d by (group, row).
void pack_q6_k(const model::TensorView& w, const PackedMatrix& p, uint8_t* qs, uint16_t* d,
               int8_t* sc, ThreadPool& pool) {
  const int64_t ns = p.n_blocks();
  const uint64_t rb = w.row_bytes();
  pool.parallel_for(w.rows / kPackRows, [&](int64_t g0, int64_t g1, int) {
    for (int64_t g = g0; g < g1; ++g) {
      for (int64_t s = 0; s < ns; ++s) {
        const int64_t gs = g * ns + s;
        uint8_t* dq = qs + gs * 3072;
        for (int64_t r = 0; r < kPackRows; ++r) {
          BlockQ6_K blk;
          std::memcpy(&blk, w.data + (g * kPackRows + r) * rb + s * sizeof(BlockQ6_K), sizeof(blk));
          d[gs * kPackRows + r] = blk.d;
          for (int j = 0; j < 16; ++j) sc[gs * 256 + 16 * j + r] = blk.scales[j];
          for (int b = 0; b < 8; ++b) {
            uint8_t* o = dq + 384 * b + 4 * r;
            for (int k = 0; k < 4; ++k) {
              for (int i = 0; i < 4; ++i) {
                const int lo = q6k_code(blk, 32 * b + 4 * k + i);
                const int hi = q6k_code(blk, 32 * b + 16 + 4 * k + i);
                o[64 * k + i] = static_cast<uint8_t>((lo & 15) | (hi & 15) << 4);
              }
            }
            for (int m = 0; m < 2; ++m) {
              for (int i = 0; i < 4; ++i) {
                int bits = 0;
                for (int c = 0; c < 2; ++c) {
                  const int k = 2 * m + c;
                  bits |= (q6k_code(blk, 32 * b + 4 * k + i) >> 4) << (4 * c);
                  bits |= (q6k_code(blk, 32 * b + 16 + 4 * k + i) >> 4) << (4 * c + 2);
                }
                o[256 + 64 * m + i] = static_cast<uint8_t>(bits);
              }
            }
          }
        }
      }
    }
  });
}

}  // namespace

PackedMatrix pack_matrix(const model::TensorView& w, uint8_t* qs, uint16_t* d, int8_t* sc,
                         ThreadPool& pool) {
  GEM_CHECK(packable(w), "pack_matrix(%.*s): not a Q4_0/Q8_0/Q6_K matrix with rows %% 16 == 0",
            static_cast<int>(w.name.size()), w.name.data());
  PackedMatrix p;
  p.type = w.type;
  p.rows = w.rows;
  p.cols = w.cols;
  p.qs = qs;
  p.d = d;
  if (w.type == DType::kQ6_K) {
    GEM_CHECK(sc != nullptr, "pack_matrix(%.*s): Q6_K needs its scale storage",
              static_cast<int>(w.name.size()), w.name.data());
    p.sc = sc;
    pack_q6_k(w, p, qs, d, sc, pool);
  } else {
    pack_q32(w, p, qs, d, pool);
  }
  return p;
}

namespace {
constexpr uint64_t kAlign = 64;
uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }
// The three parts of one packed matrix, each 64-byte aligned, in that order.
uint64_t aligned_bytes(const PackedParts& p) {
  return align_up(p.qs, kAlign) + align_up(p.d, kAlign) + align_up(p.sc, kAlign);
}
PackedMatrix pack_into(const model::TensorView& w, uint8_t* base, ThreadPool& pool) {
  const PackedParts parts = packed_parts(w);
  uint8_t* qs = base;
  uint16_t* d = reinterpret_cast<uint16_t*>(base + align_up(parts.qs, kAlign));
  int8_t* sc = parts.sc == 0 ? nullptr
                             : reinterpret_cast<int8_t*>(base + align_up(parts.qs, kAlign) +
                                                         align_up(parts.d, kAlign));
  return pack_matrix(w, qs, d, sc, pool);
}
}  // namespace

OwnedPacked pack_owned(const model::TensorView& w, ThreadPool& pool) {
  OwnedPacked o;
  o.storage.reset(new uint8_t[aligned_bytes(packed_parts(w)) + kAlign]);
  uint8_t* base = reinterpret_cast<uint8_t*>(
      align_up(reinterpret_cast<uintptr_t>(o.storage.get()), kAlign));
  o.view = pack_into(w, base, pool);
  return o;
}

PackedWeights::PackedWeights(const model::Model& model, ThreadPool& pool) {
  // Only what the active path has a packed kernel for (the rest would be a copy never read).
  const Isa isa = active_isa();
  auto wanted = [&](const model::TensorView& t) { return packable(t) && has_packed_kernel(isa, t.type); };
  std::vector<const model::TensorView*> list;
  for (const model::LayerWeights& l : model.weights.layers) {
    for (const model::TensorView* t : {&l.attn_q, &l.attn_k, &l.attn_v, &l.attn_output,
                                       &l.ffn_gate, &l.ffn_up, &l.ffn_down}) {
      if (wanted(*t)) list.push_back(t);
    }
  }
  if (wanted(model.weights.token_embd)) list.push_back(&model.weights.token_embd);
  uint64_t total = 0;
  for (const model::TensorView* t : list) total += aligned_bytes(packed_parts(*t));
  if (total == 0) return;
  constexpr uint64_t kHuge = 2ull << 20;
  bytes_ = align_up(total, kHuge);
  buf_ = static_cast<uint8_t*>(std::aligned_alloc(kHuge, bytes_));
  GEM_CHECK(buf_ != nullptr, "cpu: cannot allocate %.2f GB for the packed weights "
            "(GEM_CPU_REPACK=0 runs on the file's layout)", static_cast<double>(bytes_) / 1e9);
#ifdef MADV_HUGEPAGE
  madvise(buf_, bytes_, MADV_HUGEPAGE);  // 2 MiB pages: fewer TLB misses while streaming
#endif
  uint8_t* p = buf_;
  for (const model::TensorView* t : list) {
    map_.emplace(t->data, pack_into(*t, p, pool));
    p += aligned_bytes(packed_parts(*t));
  }
}

PackedWeights::~PackedWeights() { std::free(buf_); }

const PackedMatrix* PackedWeights::find(const model::TensorView& w) const {
  const auto it = map_.find(w.data);
  if (it == map_.end()) return nullptr;
  const PackedMatrix& p = it->second;
  return p.rows == w.rows && p.cols == w.cols && p.type == w.type ? &p : nullptr;
}

bool repack_enabled() {
  static const bool on = [] {
    const Isa isa = active_isa();
    if (isa != Isa::kAvx2 && isa != Isa::kAvxVnni && isa != Isa::kAvx512 && isa != Isa::kAmx) {
      return false;
    }
    const char* env = std::getenv("GEM_CPU_REPACK");
    return env == nullptr || std::strcmp(env, "0") != 0;
  }();
  return on;
}

}  // namespace gem::cpu
