// Shared by the loaders of gem's two GGUF kinds (model.cc: the Gemma 4 target; assistant.cc: the
// MTP assistant): a tensor's view, and one manifest entry's checks against the file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "base/status.h"
#include "gguf/gguf.h"
#include "model/model.h"

namespace gem::model {

// "[3840, 262144]": a shape as the messages print it.
std::string shape_str(const uint64_t* ne, size_t n);

// The tensor's bytes and shape as the backends read them.
TensorView view_of(const gguf::TensorInfo& t);

// Entry e's tensor t (present) has e's shape, an accepted dtype (dtype_ok; `accepted` names the
// accepted ones in the message) and whole blocks per row.
Status check_entry(const gguf::TensorInfo& t, const ManifestEntry& e, bool dtype_ok,
                   std::string_view accepted);

// Layer il's plan from a config with Gemma 4's per-kind fields (Config, AssistantConfig): its
// kind, heads, head width, window, RoPE, and V from K on full layers; `active_full_pairs` is
// the full layers' count of turning RoPE pairs (rope_freqs). kv_slot is left to the caller.
template <class Cfg>
LayerPlan plan_layer(const Cfg& c, int il, int active_full_pairs) {
  const bool sliding = c.sliding[static_cast<size_t>(il)];
  LayerPlan p;
  p.layer = il;
  p.kind = sliding ? AttnKind::kSliding : AttnKind::kFull;
  p.n_heads = c.n_heads;
  p.n_kv_heads = sliding ? c.n_kv_heads_sliding : c.n_kv_heads_full;
  p.head_dim = sliding ? c.head_dim_sliding : c.head_dim_full;
  p.window = sliding ? c.sliding_window : 0;
  p.rope_theta = sliding ? c.rope_theta_sliding : c.rope_theta_full;
  p.n_rot = sliding ? c.n_rot_sliding : c.n_rot_full;
  p.n_rot_pairs_active = sliding ? c.n_rot_sliding / 2 : active_full_pairs;
  p.v_from_k = !sliding;
  return p;
}

}  // namespace gem::model
