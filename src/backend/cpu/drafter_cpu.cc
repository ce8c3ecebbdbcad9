// DrafterCpu::step: spec §7.4 on the page, in its order. The layer loop mirrors
// ForwardCpu::forward_layer without K/V projections: the keys and values are the target's.
#include "backend/cpu/drafter_cpu.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/cpu/matmul.h"
#include "backend/cpu/ops_ref.h"
#include "base/check.h"

namespace gem::cpu {

DrafterCpu::DrafterCpu(const model::Model& target, const model::Assistant& assistant, int n_ctx,
                       bool reference, ThreadPool& pool)
    : target_(target), asst_(assistant), reference_(reference), pool_(pool) {
  const model::AssistantConfig& c = assistant.config;
  int max_head_dim = 0, max_keys = 0;
  int min_kv = 1 << 30, max_kv = 0;
  inv_freq_.resize(assistant.plan.size());
  for (const model::LayerPlan& p : assistant.plan) {
    const bool sliding = p.kind == model::AttnKind::kSliding;
    target_layer_.push_back(model::assistant_target_layer(sliding, target.config.n_layers));
    max_head_dim = std::max(max_head_dim, p.head_dim);
    min_kv = std::min(min_kv, p.n_kv_heads);
    max_kv = std::max(max_kv, p.n_kv_heads);
    max_keys = std::max(max_keys, sliding ? model::kv_ring_slots(p.window) : n_ctx);
    // The assistant's own rope_freqs (equal to the target's pattern): proportional RoPE on the
    // full layer, as llama.cpp's gemma4-assistant graph applies it.
    const float* factors = sliding ? nullptr : assistant.weights.rope_freqs.f32();
    inv_freq_[p.layer].resize(p.head_dim / 2);
    rope_inv_freq(p.head_dim, p.rope_theta, factors, inv_freq_[p.layer].data());
  }
  in_.resize(2 * static_cast<size_t>(c.n_embd_out));
  z_.resize(c.n_embd);
  a_.resize(c.n_embd);
  q_.resize(static_cast<size_t>(c.n_heads) * max_head_dim);
  attn_.resize(q_.size());
  proj_.resize(c.n_embd);
  gate_.resize(c.n_ff);
  up_.resize(c.n_ff);
  if (!reference_) attn_scratch_.init(pool.size(), c.n_heads, min_kv, max_kv, max_head_dim, max_keys);
}

void DrafterCpu::linear(const model::TensorView& w, const float* x, float* y) {
  if (reference_) {
    matmul_ref(w, x, 1, y);
  } else {
    matmul(w, x, 1, y, pool_);
  }
}

void DrafterCpu::norm(const float* x, const float* w, int64_t n_rows, int n_cols, float* y) {
  const float eps = asst_.config.rms_eps;
  if (reference_) {
    rms_norm(x, w, n_rows, n_cols, eps, y);
  } else {
    rms_norm_fast(x, w, n_rows, n_cols, eps, y, pool_);
  }
}

void DrafterCpu::step(int32_t token, const float* h, int pos, const KvCache& kv, float* logits,
                      float* h_next) {
  const model::AssistantConfig& c = asst_.config;
  const model::AssistantWeights& w = asst_.weights;
  const int n_embd = c.n_embd;
  const int n_out = c.n_embd_out;
  GEM_CHECK(pos >= 1, "draft position %d: the target cache must hold at least one position", pos);
  GEM_CHECK(token >= 0 && token < c.n_vocab, "draft token %d outside [0, %d)", token, c.n_vocab);

  // Input: the TARGET's embedding of c at the target's input scale (f32, as forward_rows), then h.
  float* in = in_.data();
  get_row(target_.weights.token_embd, token, in);
  const float embd_scale = std::sqrt(static_cast<float>(n_out));
  for (int i = 0; i < n_out; ++i) in[i] *= embd_scale;
  std::memcpy(in + n_out, h, sizeof(float) * n_out);
  float* z = z_.data();
  linear(w.pre_projection, in, z);

  const int32_t q_pos[1] = {pos};
  for (size_t il = 0; il < asst_.plan.size(); ++il) {
    // This layer's facts, weights and the target cache layer it reads.
    const model::LayerPlan& p = asst_.plan[il];
    const model::AssistantLayerWeights& lw = w.layers[il];
    const KvSegment seg[1] = {kv.segment(target_layer_[il], pos)};
    float* a = a_.data();
    float* q = q_.data();
    float* attn = attn_.data();
    float* proj = proj_.data();

    // Attention over the target's K/V at the constant draft position (scale 1.0, window of the
    // layer kind: a sliding query at P sees P−window+1 .. P−1).
    norm(z, lw.attn_norm.f32(), 1, n_embd, a);
    linear(lw.attn_q, a, q);
    norm(q, lw.attn_q_norm.f32(), p.n_heads, p.head_dim, q);
    rope_neox(q, 1, p.n_heads, p.head_dim, q_pos, inv_freq_[il].data());
    if (reference_) {
      attention(q, q_pos, 1, p.n_heads, p.n_kv_heads, p.head_dim, p.window, 1.0f, seg, attn);
    } else {
      attention_fast(q, q_pos, 1, p.n_heads, p.n_kv_heads, p.head_dim, p.window, 1.0f, seg, attn, pool_,
                     attn_scratch_);
    }
    linear(lw.attn_output, attn, proj);
    norm(proj, lw.post_attention_norm.f32(), 1, n_embd, proj);
    add(z, proj, n_embd);

    // Feed-forward block, then the whole stream scaled (as the target's layers).
    norm(z, lw.ffn_norm.f32(), 1, n_embd, a);
    linear(lw.ffn_gate, a, gate_.data());
    linear(lw.ffn_up, a, up_.data());
    if (reference_) {
      gelu_tanh_mul(gate_.data(), up_.data(), c.n_ff);
    } else {
      gelu_tanh_mul_fast(gate_.data(), up_.data(), c.n_ff, pool_);
    }
    linear(lw.ffn_down, gate_.data(), proj);
    norm(proj, lw.post_ffw_norm.f32(), 1, n_embd, proj);
    add(z, proj, n_embd);
    scale(z, n_embd, lw.layer_output_scale.f32()[0]);
  }

  // y = RMS(z, output_norm); logits from the assistant's own tied table, no soft-cap; h_next back
  // in the target's space.
  float* y = a_.data();
  norm(z, w.output_norm.f32(), 1, n_embd, y);
  linear(w.token_embd, y, logits);
  linear(w.post_projection, y, h_next);
}

}  // namespace gem::cpu
