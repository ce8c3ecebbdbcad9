// KV cache of the CPU backend (see kv_cache.h): rings for sliding layers, linear arrays for
// full layers, a slot journal for checkpoint/restore.
#include "backend/cpu/kv_cache.h"

#include <algorithm>
#include <cstring>

#include "base/check.h"
#include "base/dtype.h"

namespace gem::cpu {

KvCache::KvCache(const std::vector<model::LayerPlan>& plan, int n_ctx, model::KvType kv_type)
    : n_ctx_(n_ctx) {
  layers_.resize(plan.size());
  for (size_t i = 0; i < plan.size(); ++i) {
    const model::LayerPlan& p = plan[i];
    Layer& l = layers_[i];
    l.ring = p.kind == model::AttnKind::kSliding;
    l.f16 = kv_type == model::KvType::kF16 || (kv_type == model::KvType::kF16Full && !l.ring);
    l.n_slots = l.ring ? model::kv_ring_slots(p.window) : n_ctx;
    l.n_kv_heads = p.n_kv_heads;
    l.head_dim = p.head_dim;
    // Uninitialised on purpose: pages of a large context are committed only when written.
    l.k.reset(new uint8_t[l.tensor_bytes()]);
    l.v.reset(new uint8_t[l.tensor_bytes()]);
    if (l.ring) l.pos.assign(l.n_slots, -1);
  }
}

uint64_t KvCache::bytes() const {
  uint64_t total = 0;
  for (const Layer& l : layers_) total += 2 * l.tensor_bytes();
  return total;
}

KvSegment KvCache::segment(int i, int n_past) const {
  const Layer& l = layers_[i];
  KvSegment seg;
  seg.k = l.k.get();
  seg.v = l.v.get();
  seg.f16 = l.f16;
  seg.head_stride = static_cast<int64_t>(l.n_slots) * l.head_dim;
  seg.slot_stride = l.head_dim;
  if (l.ring) {
    seg.pos = l.pos.data();
    seg.n_slots = l.n_slots;
    seg.first_slot = n_past % l.n_slots;  // the oldest slot: positions ascend from here
  } else {
    seg.pos_base = 0;
    seg.n_slots = n_past;
  }
  return seg;
}

void KvCache::journal_slot(Layer& l, int slot) {
  if (!journaling_ || l.saved[slot]) return;
  const uint64_t slot_bytes = l.head_dim * l.elem_bytes();
  for (int g = 0; g < l.n_kv_heads; ++g) {
    const uint64_t off = (static_cast<uint64_t>(g) * l.n_slots + slot) * slot_bytes;
    std::memcpy(l.saved_k.get() + off, l.k.get() + off, slot_bytes);
    std::memcpy(l.saved_v.get() + off, l.v.get() + off, slot_bytes);
  }
  l.saved_pos[slot] = l.pos[slot];
  l.saved[slot] = 1;
}

void KvCache::write(int i, int pos0, int n_tokens, const float* k, const float* v) {
  Layer& l = layers_[i];
  const int row = l.n_kv_heads * l.head_dim;
  // A ring keeps only the last n_slots positions: earlier ones of this batch would be
  // overwritten within the same call.
  const int first = l.ring ? std::max(0, n_tokens - l.n_slots) : 0;
  for (int t = first; t < n_tokens; ++t) {
    const int pos = pos0 + t;
    const int slot = l.ring ? pos % l.n_slots : pos;
    GEM_CHECK(slot < l.n_slots, "layer %d: position %d beyond %d slots", i, pos, l.n_slots);
    if (l.ring) {
      journal_slot(l, slot);
      l.pos[slot] = pos;
    }
    for (int g = 0; g < l.n_kv_heads; ++g) {
      const float* ks = k + static_cast<int64_t>(t) * row + g * l.head_dim;
      const float* vs = v + static_cast<int64_t>(t) * row + g * l.head_dim;
      const uint64_t off = (static_cast<uint64_t>(g) * l.n_slots + slot) * l.head_dim;
      if (l.f16) {
        uint16_t* kd = reinterpret_cast<uint16_t*>(l.k.get()) + off;
        uint16_t* vd = reinterpret_cast<uint16_t*>(l.v.get()) + off;
        for (int d = 0; d < l.head_dim; ++d) {
          kd[d] = f32_to_fp16(ks[d]);
          vd[d] = f32_to_fp16(vs[d]);
        }
      } else {
        std::memcpy(reinterpret_cast<float*>(l.k.get()) + off, ks, l.head_dim * sizeof(float));
        std::memcpy(reinterpret_cast<float*>(l.v.get()) + off, vs, l.head_dim * sizeof(float));
      }
    }
  }
}

void KvCache::checkpoint() {
  journaling_ = true;
  for (Layer& l : layers_) {
    if (!l.ring) continue;
    if (!l.saved_k) {
      // One journal per ring, allocated once: a slot is journaled at most once per checkpoint.
      l.saved_k.reset(new uint8_t[l.tensor_bytes()]);
      l.saved_v.reset(new uint8_t[l.tensor_bytes()]);
      l.saved_pos.assign(l.n_slots, -1);
    }
    l.saved.assign(l.n_slots, 0);
  }
}

void KvCache::restore() {
  if (!journaling_) return;
  for (Layer& l : layers_) {
    if (!l.ring) continue;
    const uint64_t slot_bytes = l.head_dim * l.elem_bytes();
    for (int slot = 0; slot < l.n_slots; ++slot) {
      if (!l.saved[slot]) continue;
      for (int g = 0; g < l.n_kv_heads; ++g) {
        const uint64_t off = (static_cast<uint64_t>(g) * l.n_slots + slot) * slot_bytes;
        std::memcpy(l.k.get() + off, l.saved_k.get() + off, slot_bytes);
        std::memcpy(l.v.get() + off, l.saved_v.get() + off, slot_bytes);
      }
      l.pos[slot] = l.saved_pos[slot];
      l.saved[slot] = 0;  // the journal stays open: restore() may be called again
    }
  }
}

void KvCache::reset() {
  journaling_ = false;
  for (Layer& l : layers_) {
    if (l.ring) std::fill(l.pos.begin(), l.pos.end(), -1);
  }
}

void KvCache::truncate(int n_past) {
  for (Layer& l : layers_) {
    if (!l.ring) continue;
    for (int slot = 0; slot < l.n_slots; ++slot) {
      if (l.pos[slot] < n_past) continue;
      journal_slot(l, slot);
      l.pos[slot] = -1;
    }
  }
}

void KvCache::copy_from(const KvCache& src, int n_past) {
  GEM_CHECK(src.layers_.size() == layers_.size(), "kv copy: %zu layers into %zu",
            src.layers_.size(), layers_.size());
  journaling_ = false;
  for (size_t i = 0; i < layers_.size(); ++i) {
    Layer& l = layers_[i];
    const Layer& s = src.layers_[i];
    GEM_CHECK(s.n_slots == l.n_slots && s.f16 == l.f16 && s.head_dim == l.head_dim &&
                  s.n_kv_heads == l.n_kv_heads,
              "kv copy: layer %zu differs in shape", i);
    const uint64_t slot_bytes = l.head_dim * l.elem_bytes();
    const int n = l.ring ? l.n_slots : n_past;
    for (int g = 0; g < l.n_kv_heads; ++g) {
      const uint64_t off = static_cast<uint64_t>(g) * l.n_slots * slot_bytes;
      std::memcpy(l.k.get() + off, s.k.get() + off, n * slot_bytes);
      std::memcpy(l.v.get() + off, s.v.get() + off, n * slot_bytes);
    }
    if (l.ring) {
      for (int slot = 0; slot < l.n_slots; ++slot) {
        l.pos[slot] = s.pos[slot] < n_past ? s.pos[slot] : -1;
      }
    }
  }
}

}  // namespace gem::cpu
