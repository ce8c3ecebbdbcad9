// The CPU backend's KV cache of one sequence: sliding layers keep a ring of
// model::kv_ring_slots(window) slots (with the position held in each slot, for the mask), full
// layers a linear array of n_ctx slots.
// Storage per layer is f32 or f16 (model::KvType). A checkpoint journals the old contents of
// every ring slot overwritten after it, so restore() puts the cache back exactly.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "backend/cpu/ops_ref.h"
#include "model/model.h"

namespace gem::cpu {

class KvCache {
 public:
  KvCache(const std::vector<model::LayerPlan>& plan, int n_ctx, model::KvType kv_type);

  // One layer's storage. K and V: [n_kv_heads, n_slots, head_dim], f32 or f16 (`f16`).
  struct Layer {
    bool ring = false;            // sliding layer: slot = pos % n_slots
    bool f16 = false;
    int n_slots = 0;              // kv_ring_slots(window) (ring) or n_ctx (full)
    int n_kv_heads = 0;
    int head_dim = 0;
    std::unique_ptr<uint8_t[]> k;
    std::unique_ptr<uint8_t[]> v;
    std::vector<int32_t> pos;     // ring only: [n_slots] position held, -1 = empty
    // Journal (ring only, allocated at the first checkpoint): the slots' contents at the
    // checkpoint, copied the first time each slot is overwritten after it.
    std::unique_ptr<uint8_t[]> saved_k;
    std::unique_ptr<uint8_t[]> saved_v;
    std::vector<int32_t> saved_pos;
    std::vector<uint8_t> saved;   // [n_slots] 1 = slot journaled since the checkpoint
    uint64_t elem_bytes() const { return f16 ? 2 : 4; }
    uint64_t slot_elems() const { return static_cast<uint64_t>(head_dim); }
    uint64_t tensor_bytes() const {
      return static_cast<uint64_t>(n_kv_heads) * n_slots * head_dim * elem_bytes();
    }
  };

  int n_ctx() const { return n_ctx_; }
  int n_layers() const { return static_cast<int>(layers_.size()); }
  const Layer& layer(int i) const { return layers_[i]; }
  // Bytes of K+V storage (equals model::kv_cache_bytes for the same plan, n_ctx and type).
  uint64_t bytes() const;

  // The cached keys/values of layer `i` at positions < n_past as one attention segment
  // (a ring: every slot, its positions in the mask; a full layer: slots 0..n_past-1).
  KvSegment segment(int i, int n_past) const;

  // Writes K/V of positions pos0 .. pos0+n_tokens-1 into layer i. k, v: [n_tokens, n_kv_heads,
  // head_dim] f32 (rounded to f16 when the layer stores f16). On a ring only the last
  // n_slots positions land; each overwritten slot is journaled first while a checkpoint is open.
  void write(int i, int pos0, int n_tokens, const float* k, const float* v);

  // Starts a journal at the current contents; restore() puts every journaled slot back.
  void checkpoint();
  void restore();
  // Empties every ring (positions -1) and closes the journal.
  void reset();
  // Forgets positions >= n_past: ring slots holding them are emptied (journaled first, so a
  // restore() still returns to the checkpoint); full layers need nothing, since they are read
  // only below n_past.
  void truncate(int n_past);
  // Makes this cache hold src's positions < n_past (same plan and type): full layers copy those
  // slots, rings every slot with later positions emptied. Closes the journal.
  void copy_from(const KvCache& src, int n_past);

 private:
  void journal_slot(Layer& l, int slot);

  int n_ctx_ = 0;
  bool journaling_ = false;
  std::vector<Layer> layers_;
};

}  // namespace gem::cpu
