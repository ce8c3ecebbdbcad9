// Packing Q4_0/Q8_0 matrices into the 16-row interleaved layout (packed.h).
#include "backend/cpu/packed.h"

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <vector>

#include "backend/cpu/isa.h"
#include "base/check.h"
#include "base/quant.h"

namespace gem::cpu {

bool packable(const model::TensorView& w) {
  return (w.type == DType::kQ4_0 || w.type == DType::kQ8_0) && w.rows > 0 &&
         w.rows % kPackRows == 0 && w.cols % 32 == 0 && w.present();
}

uint64_t packed_bytes(const model::TensorView& w) {
  const uint64_t blocks = static_cast<uint64_t>(w.rows) * static_cast<uint64_t>(w.cols / 32);
  return blocks * (w.type == DType::kQ4_0 ? sizeof(BlockQ4_0) : sizeof(BlockQ8_0));
}

PackedMatrix pack_matrix(const model::TensorView& w, uint8_t* qs, uint16_t* d, ThreadPool& pool) {
  GEM_CHECK(packable(w), "pack_matrix(%.*s): not a Q4_0/Q8_0 matrix with rows %% 16 == 0",
            static_cast<int>(w.name.size()), w.name.data());
  PackedMatrix p;
  p.type = w.type;
  p.rows = w.rows;
  p.cols = w.cols;
  p.qs = qs;
  p.d = d;
  const bool q4 = w.type == DType::kQ4_0;
  const int64_t nb = w.cols / 32;
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
  return p;
}

namespace {
uint64_t quant_bytes(const model::TensorView& w) {
  return static_cast<uint64_t>(w.rows) * static_cast<uint64_t>(w.cols / 32) *
         (w.type == DType::kQ4_0 ? 16 : 32);
}
uint64_t scale_bytes(const model::TensorView& w) {
  return static_cast<uint64_t>(w.rows) * static_cast<uint64_t>(w.cols / 32) * 2;
}
constexpr uint64_t kAlign = 64;
uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }
}  // namespace

OwnedPacked pack_owned(const model::TensorView& w, ThreadPool& pool) {
  OwnedPacked o;
  const uint64_t qb = align_up(quant_bytes(w), kAlign);
  o.storage.reset(new uint8_t[qb + scale_bytes(w) + kAlign]);
  uint8_t* base = reinterpret_cast<uint8_t*>(
      align_up(reinterpret_cast<uintptr_t>(o.storage.get()), kAlign));
  o.view = pack_matrix(w, base, reinterpret_cast<uint16_t*>(base + qb), pool);
  return o;
}

PackedWeights::PackedWeights(const model::Model& model, ThreadPool& pool) {
  std::vector<const model::TensorView*> list;
  for (const model::LayerWeights& l : model.weights.layers) {
    for (const model::TensorView* t : {&l.attn_q, &l.attn_k, &l.attn_v, &l.attn_output,
                                       &l.ffn_gate, &l.ffn_up, &l.ffn_down}) {
      if (packable(*t)) list.push_back(t);
    }
  }
  if (packable(model.weights.token_embd)) list.push_back(&model.weights.token_embd);
  uint64_t total = 0;
  for (const model::TensorView* t : list) {
    total += align_up(quant_bytes(*t), kAlign) + align_up(scale_bytes(*t), kAlign);
  }
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
    uint8_t* qs = p;
    p += align_up(quant_bytes(*t), kAlign);
    uint16_t* d = reinterpret_cast<uint16_t*>(p);
    p += align_up(scale_bytes(*t), kAlign);
    map_.emplace(t->data, pack_matrix(*t, qs, d, pool));
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
    if (isa != Isa::kAvx2 && isa != Isa::kAvx512 && isa != Isa::kAmx) return false;
    const char* env = std::getenv("GEM_CPU_REPACK");
    return env == nullptr || std::strcmp(env, "0") != 0;
  }();
  return on;
}

}  // namespace gem::cpu
