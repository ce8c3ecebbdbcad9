// The Gemma 4 forward pass on the CPU (see forward_cpu.h). forward_layer names its slices and
// then makes the calls in the order of spec §4.3; the order on the page is the order computed.
#include "backend/cpu/forward_cpu.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "backend/cpu/matmul.h"
#include "backend/cpu/ops_fast.h"
#include "backend/cpu/ops_ref.h"
#include "base/check.h"
#include "base/log.h"
#include "base/timer.h"

namespace gem::cpu {

uint64_t Activations::bytes() const {
  return sizeof(float) * (x.size() + h.size() + q.size() + k.size() + v.size() + attn.size() +
                          proj.size() + gate.size() + up.size()) +
         sizeof(int32_t) * pos.size() + attn_scratch.bytes();
}

ForwardCpu::ForwardCpu(const model::Model& model, int n_ctx, int n_tile, bool reference,
                       ThreadPool& pool)
    : model_(model), cfg_(model.config), n_tile_(n_tile), reference_(reference), pool_(pool) {
  int max_head_dim = 0, max_kv_heads = 0, min_kv_heads = 1 << 30, max_keys = 0;
  inv_freq_.resize(model.plan.size());
  for (const model::LayerPlan& p : model.plan) {
    max_head_dim = std::max(max_head_dim, p.head_dim);
    max_kv_heads = std::max(max_kv_heads, p.n_kv_heads);
    min_kv_heads = std::min(min_kv_heads, p.n_kv_heads);
    // Keys one query can face: the cached ones (ring or 0..n_ctx) plus the tile's own.
    max_keys = std::max(max_keys, (p.kind == model::AttnKind::kSliding ? model::kv_ring_slots(p.window)
                                                                        : n_ctx) +
                                       n_tile);
    // Full layers: proportional RoPE through rope_freqs (1e30 = a pair that does not rotate).
    const float* freq_factors = p.kind == model::AttnKind::kFull && model.weights.rope_freqs.present()
                                    ? model.weights.rope_freqs.f32()
                                    : nullptr;
    inv_freq_[p.layer].resize(p.head_dim / 2);
    rope_inv_freq(p.head_dim, p.rope_theta, freq_factors, inv_freq_[p.layer].data());
  }
  const int64_t t = n_tile;
  act_.x.resize(t * cfg_.n_embd);
  act_.h.resize(t * cfg_.n_embd);
  act_.q.resize(t * cfg_.n_heads * max_head_dim);
  act_.k.resize(t * max_kv_heads * max_head_dim);
  act_.v.resize(t * max_kv_heads * max_head_dim);
  act_.attn.resize(t * cfg_.n_heads * max_head_dim);
  act_.proj.resize(t * cfg_.n_embd);
  act_.gate.resize(t * cfg_.n_ff);
  act_.up.resize(t * cfg_.n_ff);
  act_.pos.resize(t);
  if (!reference_ && repack_enabled()) {
    const double t0 = now_seconds();
    packed_ = std::make_unique<PackedWeights>(model, pool);
    if (packed_->count() == 0) {
      packed_.reset();
    } else {
      GEM_LOG_INFO("cpu: %d Q4_0/Q8_0/Q6_K matrices packed into 16-row interleaved blocks, %.2f GB "
                   "besides the file mapping, %.1f s (GEM_CPU_REPACK=0: read the file's layout)",
                   packed_->count(), static_cast<double>(packed_->bytes()) / 1e9,
                   now_seconds() - t0);
    }
  }
  if (!reference_) {
    act_.attn_scratch.init(pool.size(), cfg_.n_heads, min_kv_heads, max_kv_heads, max_head_dim, max_keys);
  }
}

void ForwardCpu::tap(int layer, std::string_view name, const float* data, int n_tokens, int width) {
  if (tap_) tap_(layer, name, data, n_tokens, width);
}

void ForwardCpu::stage_end(Stage s, int layer) {
  const double now = now_seconds();
  profiler_->add(s, layer, now - stage_start_);
  stage_start_ = now;
}

void ForwardCpu::linear(const model::TensorView& w, const float* x, int n_tokens, float* y) {
  if (!reference_) {
    matmul(w, x, n_tokens, y, pool_, packed_ ? packed_->find(w) : nullptr);
    return;
  }
  // Reference: matmul_ref over disjoint row ranges of w, one per thread (a parallel loop over
  // rows is all the reference allows itself).
  const int64_t rows = w.rows;
  const uint64_t row_bytes = w.row_bytes();
  pool_.parallel_for(pool_.size(), [&](int64_t begin, int64_t end, int) {
    for (int64_t part = begin; part < end; ++part) {
      const int64_t r0 = rows * part / pool_.size();
      const int64_t r1 = rows * (part + 1) / pool_.size();
      if (r1 == r0) continue;
      model::TensorView sub = w;
      sub.data = w.data + r0 * row_bytes;
      sub.rows = r1 - r0;
      sub.n_bytes = (r1 - r0) * row_bytes;
      if (n_tokens == 1) {
        matmul_ref(sub, x, 1, y + r0);
        continue;
      }
      std::vector<float> part_y(static_cast<size_t>(n_tokens) * sub.rows);
      matmul_ref(sub, x, n_tokens, part_y.data());
      for (int t = 0; t < n_tokens; ++t) {
        std::memcpy(y + t * rows + r0, part_y.data() + t * sub.rows, sub.rows * sizeof(float));
      }
    }
  });
}

void ForwardCpu::norm(const float* x, const float* w, int64_t n_rows, int n_cols, float* y) {
  if (reference_) {
    rms_norm(x, w, n_rows, n_cols, cfg_.rms_eps, y);
  } else {
    rms_norm_fast(x, w, n_rows, n_cols, cfg_.rms_eps, y, pool_);
  }
}

void ForwardCpu::forward_tile(const int32_t* tokens, int n_tokens, int pos0, KvCache& kv,
                              int first_logit_row, float* logits) {
  const SeqRun run{&kv, pos0, 0, n_tokens};
  int rows[1] = {first_logit_row};
  std::vector<int> many;
  std::span<const int> logit_rows;
  if (first_logit_row == n_tokens - 1) {
    logit_rows = rows;
  } else if (first_logit_row < n_tokens) {
    for (int r = first_logit_row; r < n_tokens; ++r) many.push_back(r);
    logit_rows = many;
  }
  forward_rows(tokens, n_tokens, {&run, 1}, logit_rows, logits);
}

void ForwardCpu::forward_rows(const int32_t* tokens, int n_tokens, std::span<const SeqRun> runs,
                              std::span<const int> logit_rows, float* logits) {
  GEM_CHECK(n_tokens > 0 && n_tokens <= n_tile_, "tile of %d tokens, n_tile %d", n_tokens, n_tile_);
  const int n_embd = cfg_.n_embd;
  float* x = act_.x.data();
  if (profiler_ != nullptr) stage_start_ = now_seconds();
  int covered = 0;
  for (const SeqRun& r : runs) {
    GEM_CHECK(r.row0 == covered && r.n > 0, "run at row %d of %d rows, expected row %d", r.row0,
              r.n, covered);
    for (int t = 0; t < r.n; ++t) act_.pos[r.row0 + t] = r.pos0 + t;
    covered += r.n;
  }
  GEM_CHECK(covered == n_tokens, "runs cover %d of %d rows", covered, n_tokens);

  // Embedding: the token_embd row times sqrtf(n_embd), in f32 as llama.cpp does.
  const float embd_scale = std::sqrt(static_cast<float>(n_embd));
  for (int t = 0; t < n_tokens; ++t) {
    float* xt = x + static_cast<int64_t>(t) * n_embd;
    get_row(model_.weights.token_embd, tokens[t], xt);
    for (int i = 0; i < n_embd; ++i) xt[i] *= embd_scale;
  }
  tap(-1, "embd", x, n_tokens, n_embd);
  stage(Stage::kEmbed, -1);

  for (int layer = 0; layer < cfg_.n_layers; ++layer) forward_layer(layer, n_tokens, runs);

  // Head: final norm and the tied token_embd, only for the rows whose logits are wanted (it is
  // the largest matmul of the model).
  const int n_rows = static_cast<int>(logit_rows.size());
  if (n_rows == 0) {
    return;
  }
  float* h = act_.h.data();
  // The wanted rows are contiguous in the common cases (the last row; every row from one on).
  const bool contiguous = logit_rows.back() - logit_rows.front() == n_rows - 1;
  if (contiguous) {
    norm(x + static_cast<int64_t>(logit_rows.front()) * n_embd, model_.weights.output_norm.f32(),
         n_rows, n_embd, h);
  } else {
    for (int i = 0; i < n_rows; ++i) {
      GEM_CHECK(logit_rows[i] >= 0 && logit_rows[i] < n_tokens && (i == 0 || logit_rows[i] > logit_rows[i - 1]),
                "logit rows must ascend within the tile");
      norm(x + static_cast<int64_t>(logit_rows[i]) * n_embd, model_.weights.output_norm.f32(), 1,
           n_embd, h + static_cast<int64_t>(i) * n_embd);
    }
  }
  tap(-1, "result_norm", h, n_rows, n_embd);
  linear(model_.weights.token_embd, h, n_rows, logits);
  if (cfg_.final_logit_softcap > 0.0f) {
    const int64_t n = static_cast<int64_t>(n_rows) * cfg_.n_vocab;
    if (reference_) {
      softcap(logits, n, cfg_.final_logit_softcap);
    } else {
      const float cap = cfg_.final_logit_softcap;
      pool_.parallel_for(n, [&](int64_t begin, int64_t end, int) {
        for (int64_t i = begin; i < end; ++i) logits[i] = cap * std::tanh(logits[i] / cap);
      });
    }
  }
  stage(Stage::kHead, -1);
}

void ForwardCpu::forward_layer(int layer, int n_tokens, std::span<const SeqRun> runs) {
  // This layer's facts and weights.
  const model::LayerPlan& p = model_.plan[layer];
  const model::LayerWeights& w = model_.weights.layers[layer];
  const int n_embd = cfg_.n_embd;
  const int n_ff = cfg_.n_ff;
  const int head_dim = p.head_dim;
  const int q_width = p.n_heads * head_dim;
  const int kv_width = p.n_kv_heads * head_dim;
  const int64_t n = n_tokens;

  // Slices of the scratch for this tile.
  float* x = act_.x.data();        // [n, n_embd]
  float* h = act_.h.data();        // [n, n_embd]
  float* q = act_.q.data();        // [n, n_heads, head_dim]
  float* k = act_.k.data();        // [n, n_kv_heads, head_dim]
  float* v = act_.v.data();        // [n, n_kv_heads, head_dim]
  float* attn = act_.attn.data();  // [n, n_heads * head_dim]
  float* proj = act_.proj.data();  // [n, n_embd]
  float* gate = act_.gate.data();  // [n, n_ff]
  float* up = act_.up.data();      // [n, n_ff]
  const int32_t* pos = act_.pos.data();

  // Attention block.
  norm(x, w.attn_norm.f32(), n, n_embd, h);
  tap(layer, "attn_norm", h, n_tokens, n_embd);
  stage(Stage::kNorm, layer);
  linear(w.attn_q, h, n_tokens, q);
  linear(w.attn_k, h, n_tokens, k);
  if (p.v_from_k) {
    // Full layers: V is the raw K projection, forked before the K norm and RoPE.
    std::memcpy(v, k, sizeof(float) * n * kv_width);
  } else {
    linear(w.attn_v, h, n_tokens, v);
  }
  stage(Stage::kQkv, layer);
  norm(q, w.attn_q_norm.f32(), n * p.n_heads, head_dim, q);
  norm(k, w.attn_k_norm.f32(), n * p.n_kv_heads, head_dim, k);
  norm(v, nullptr, n * p.n_kv_heads, head_dim, v);  // V norm without weight, every layer
  stage(Stage::kNorm, layer);
  rope_neox(q, n, p.n_heads, head_dim, pos, inv_freq_[layer].data());
  rope_neox(k, n, p.n_kv_heads, head_dim, pos, inv_freq_[layer].data());
  tap(layer, "q_rope", q, n_tokens, q_width);
  stage(Stage::kRope, layer);
  if (runs.front().kv->layer(layer).f16) {
    // The tile attends to its own K/V as the cache will hand them back later, so a tiled prompt
    // and token-by-token decoding see the same values.
    round_to_f16(k, n * kv_width);
    round_to_f16(v, n * kv_width);
  }
  stage(Stage::kKvWrite, layer);
  // Each run in order: keys are its sequence's cached positions < pos0 (read before the run
  // overwrites any ring slot), then the run's own, [n, n_kv_heads, head_dim].
  for (const SeqRun& r : runs) {
    const int64_t o = r.row0;
    KvSegment run_kv;
    run_kv.k = k + o * kv_width;
    run_kv.v = v + o * kv_width;
    run_kv.head_stride = head_dim;
    run_kv.slot_stride = kv_width;
    run_kv.pos_base = r.pos0;
    run_kv.n_slots = r.n;
    const KvSegment segments[2] = {r.kv->segment(layer, r.pos0), run_kv};
    if (reference_) {
      attention(q + o * q_width, pos + o, r.n, p.n_heads, p.n_kv_heads, head_dim, p.window, 1.0f,
                segments, attn + o * q_width);
    } else {
      attention_fast(q + o * q_width, pos + o, r.n, p.n_heads, p.n_kv_heads, head_dim, p.window,
                     1.0f, segments, attn + o * q_width, pool_, act_.attn_scratch);
    }
    stage(Stage::kAttention, layer);
    r.kv->write(layer, r.pos0, r.n, k + o * kv_width, v + o * kv_width);
    stage(Stage::kKvWrite, layer);
  }
  linear(w.attn_output, attn, n_tokens, proj);
  stage(Stage::kAttnOut, layer);
  norm(proj, w.post_attention_norm.f32(), n, n_embd, proj);
  stage(Stage::kNorm, layer);
  add(x, proj, n * n_embd);
  tap(layer, "attn_out", x, n_tokens, n_embd);
  stage(Stage::kEpilogue, layer);

  // Feed-forward block.
  norm(x, w.ffn_norm.f32(), n, n_embd, h);
  stage(Stage::kNorm, layer);
  linear(w.ffn_gate, h, n_tokens, gate);
  linear(w.ffn_up, h, n_tokens, up);
  stage(Stage::kFfnGateUp, layer);
  if (reference_) {
    gelu_tanh_mul(gate, up, n * n_ff);
  } else {
    gelu_tanh_mul_fast(gate, up, n * n_ff, pool_);
  }
  stage(Stage::kGelu, layer);
  linear(w.ffn_down, gate, n_tokens, proj);
  stage(Stage::kFfnDown, layer);
  norm(proj, w.post_ffw_norm.f32(), n, n_embd, proj);
  tap(layer, "ffn_out", proj, n_tokens, n_embd);
  stage(Stage::kNorm, layer);
  add(x, proj, n * n_embd);
  // layer_output_scale multiplies the whole residual stream, not only the branch.
  scale(x, n * n_embd, w.layer_output_scale.f32()[0]);
  tap(layer, "out", x, n_tokens, n_embd);
  stage(Stage::kEpilogue, layer);
}

}  // namespace gem::cpu
