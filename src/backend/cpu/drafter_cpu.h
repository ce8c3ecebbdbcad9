// The MTP assistant's forward on the CPU (spec §7.4–7.6): one draft step from (token c, target-
// space h, position P) through the assistant's layers, each cross-attending to the target's
// cached K/V of layer N−2 (sliding) or N−1 (full), to raw logits and h_next. Reads the cache,
// writes none. Two flavours as ForwardCpu: reference (ops_ref, matmul_ref) and fast (matmul,
// ops_fast). The Backend-level Drafter (backend.h) of the CPU backend wraps one of these.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/cpu/kv_cache.h"
#include "backend/cpu/ops_fast.h"
#include "backend/cpu/thread_pool.h"
#include "model/assistant.h"
#include "model/model.h"

namespace gem::cpu {

class DrafterCpu {
 public:
  // The target and assistant must be paired (model::check_pairing) and outlive this. n_ctx: the
  // target cache's context (sizes the fast attention scratch).
  DrafterCpu(const model::Model& target, const model::Assistant& assistant, int n_ctx, bool reference,
             ThreadPool& pool);

  // One step at position pos over `kv`, which holds the target sequence's positions < pos
  // (pos >= 1). h: [target n_embd]. logits: [n_vocab] raw (no soft-cap). h_next: [target n_embd].
  void step(int32_t token, const float* h, int pos, const KvCache& kv, float* logits, float* h_next);

 private:
  void linear(const model::TensorView& w, const float* x, float* y);
  void norm(const float* x, const float* w, int64_t n_rows, int n_cols, float* y);

  const model::Model& target_;
  const model::Assistant& asst_;
  bool reference_;
  ThreadPool& pool_;
  std::vector<int> target_layer_;              // [n_layers] target layer whose cache layer i reads
  std::vector<std::vector<double>> inv_freq_;  // [n_layers][head_dim/2] RoPE inverse frequencies
  // Scratch of one step (STYLE.md §3), E = assistant width, Et = target width, D = larger head.
  std::vector<float> in_;     // [2*Et] concat(E_target[c]·√Et, h)
  std::vector<float> z_;      // [E] residual stream
  std::vector<float> a_;      // [E] normed input of a sub-block; the final y
  std::vector<float> q_;      // [n_heads*D]
  std::vector<float> attn_;   // [n_heads*D]
  std::vector<float> proj_;   // [E]
  std::vector<float> gate_;   // [n_ff]
  std::vector<float> up_;     // [n_ff]
  AttentionScratch attn_scratch_;  // fast path only
};

}  // namespace gem::cpu
