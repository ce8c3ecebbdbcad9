// Reference ops of the Gemma 4 forward pass: scalar loops, float activations, double for long
// sums, no SIMD, no threads. They are the specification: the CPU fast path and the CUDA kernels
// are tested against them. Every function works on plain row-major arrays; shapes are given
// outermost first.
#pragma once

#include <cstdint>
#include <span>

namespace gem::cpu {

// y[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * w      (w == nullptr: no weight, RMS₀)
// x, y: [n_rows, n_cols] f32 (y may alias x).   w: [n_cols] f32 or nullptr.
// Per-head norms view a [n_tokens, n_heads * head_dim] tensor as [n_tokens * n_heads, head_dim].
void rms_norm(const float* x, const float* w, int64_t n_rows, int n_cols, float eps, float* y);

// Inverse frequencies of NeoX RoPE for a head of width head_dim (all of it rotates):
// inv_freq[i] = theta^(-2i/head_dim) / freq_factors[i], i < head_dim/2 (freq_factors may be
// nullptr = all 1). A factor of 1e30 makes pair i (almost exactly) the identity, which is how
// Gemma 4's proportional RoPE is stored (rope_freqs: 1.0 then 1e30). out: [head_dim/2].
void rope_inv_freq(int head_dim, float theta, const float* freq_factors, double* out);

// NeoX rotation in place: for each row t, head h and pair i < head_dim/2, with a = pos[t]·inv_freq[i]:
//   x[i]            <- x[i]·cos a − x[i + head_dim/2]·sin a
//   x[i + head_dim/2] <- x[i]·sin a + x[i + head_dim/2]·cos a
// x: [n_tokens, n_heads, head_dim] f32.   pos: [n_tokens].   inv_freq: [head_dim/2].
void rope_neox(float* x, int64_t n_tokens, int n_heads, int head_dim, const int32_t* pos,
               const double* inv_freq);

// One stretch of cached keys and values. Element (kv head g, slot s, dim d) of K lives at
// k[g*head_stride + s*slot_stride + d] (same for V), stored as f32 or IEEE half. pos[s] is the
// token position held in slot s (-1 = empty); pos == nullptr means slot s holds position
// pos_base + s. A cache ring and the current tile's fresh K/V are two segments of one attention.
// Slots are visited from first_slot on, wrapping: a ring starts at its oldest slot, so keys are
// always summed in position order and a tiled prompt gives the same bits as token-by-token.
struct KvSegment {
  const void* k = nullptr;
  const void* v = nullptr;
  bool f16 = false;
  int64_t head_stride = 0;
  int64_t slot_stride = 0;
  const int32_t* pos = nullptr;
  int32_t pos_base = 0;
  int n_slots = 0;
  int first_slot = 0;
  int32_t slot_pos(int s) const { return pos != nullptr ? pos[s] : pos_base + s; }
  // The slot visited i-th.
  int slot_at(int i) const {
    const int s = first_slot + i;
    return s < n_slots ? s : s - n_slots;
  }
};

// True when a query at q_pos sees a key at k_pos: causal, and on sliding layers
// (window > 0) only the last `window` positions including the query's own.
inline bool attention_visible(int32_t q_pos, int32_t k_pos, int window) {
  return k_pos >= 0 && k_pos <= q_pos && (window <= 0 || q_pos - k_pos < window);
}

// Grouped-query attention with the given scale (Gemma 4: 1.0, no soft-cap):
//   out[t, j, :] = Σ_s softmax_s(scale · q[t, j, :]·K[g, s, :] | visible) · V[g, s, :],
//   g = j / (n_heads / n_kv_heads), s over the slots of every segment.
// q: [n_tokens, n_heads, head_dim] f32.   q_pos: [n_tokens].   out: [n_tokens, n_heads, head_dim].
// Scores, softmax and the weighted sum in double. Every query must see at least one key.
void attention(const float* q, const int32_t* q_pos, int n_tokens, int n_heads, int n_kv_heads,
               int head_dim, int window, float scale, std::span<const KvSegment> segments,
               float* out);

// gelu_tanh(u) = 0.5·u·(1 + tanh(sqrt(2/π)·(u + 0.044715·u³)))  (PyTorch gelu 'tanh').
float gelu_tanh(float u);

// gate[i] <- gelu_tanh(gate[i]) · up[i], i < n (the Gemma FFN's inner product).
void gelu_tanh_mul(float* gate, const float* up, int64_t n);

// x[i] <- cap · tanh(x[i] / cap), i < n (final logit soft-cap; cap > 0).
void softcap(float* x, int64_t n, float cap);

// y[i] <- y[i] + x[i], i < n.
void add(float* y, const float* x, int64_t n);

// x[i] <- x[i] · s, i < n.
void scale(float* x, int64_t n, float s);

}  // namespace gem::cpu
