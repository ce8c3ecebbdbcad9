// The Gemma 4 forward pass on the CPU: one tile of tokens through every layer in order, writing
// K/V into the cache, then the tied head for the rows that need logits. Two flavours behind one
// schedule: the reference (ops_ref + matmul_ref, obviously right) and the fast path (matmul with
// threads, ops_fast).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "backend/cpu/kv_cache.h"
#include "backend/cpu/ops_fast.h"
#include "backend/cpu/packed.h"
#include "backend/cpu/thread_pool.h"
#include "backend/profile.h"
#include "model/model.h"

namespace gem::cpu {

// Scratch of one tile, allocated once from Config, n_tile and n_ctx (STYLE.md §3): nothing is
// allocated per token. T = n_tile; D = the larger head width; G = the larger KV head count.
struct Activations {
  std::vector<float> x;        // [T, n_embd] residual stream
  std::vector<float> h;        // [T, n_embd] normed input of a sub-block / final norm
  std::vector<float> q;        // [T, n_heads * D] queries (normed, rotated)
  std::vector<float> k;        // [T, G * D] keys of the tile (normed, rotated)
  std::vector<float> v;        // [T, G * D] values of the tile (V-normed)
  std::vector<float> attn;     // [T, n_heads * D] attention output, heads concatenated
  std::vector<float> proj;     // [T, n_embd] attn_output / ffn_down output
  std::vector<float> gate;     // [T, n_ff] gate projection, then gelu(gate) ⊙ up
  std::vector<float> up;       // [T, n_ff]
  std::vector<int32_t> pos;    // [T] positions of the tile's tokens
  AttentionScratch attn_scratch;  // fast path only: scores and softmax partials per thread
  uint64_t bytes() const;
};

// Debug observer of named checkpoints ("attn_norm", "q_rope", "attn_out", "ffn_out", "out" per
// layer; layer -1 for "embd" and "result_norm"): data is [n_tokens, width] f32. Off = empty.
using TapFn = std::function<void(int layer, std::string_view name, const float* data,
                                 int n_tokens, int width)>;

// Rows [row0, row0 + n) of a tile that continue one sequence's cache `kv` at positions pos0...
struct SeqRun {
  KvCache* kv = nullptr;
  int pos0 = 0;
  int row0 = 0;
  int n = 0;
};

class ForwardCpu {
 public:
  // pool runs the parallel loops of both flavours (the reference uses it only over matrix rows).
  ForwardCpu(const model::Model& model, int n_ctx, int n_tile, bool reference, ThreadPool& pool);

  // tokens[0..n_tokens) at positions pos0.. (n_tokens <= n_tile) through every layer; K/V land in
  // `kv` (which holds positions < pos0). Then logits of rows first_logit_row .. n_tokens-1 into
  // logits ([n_tokens - first_logit_row, n_vocab] f32, after the soft-cap); none when
  // first_logit_row == n_tokens.
  void forward_tile(const int32_t* tokens, int n_tokens, int pos0, KvCache& kv,
                    int first_logit_row, float* logits);
  // The batched form: tokens[0..n_tokens) are the rows of `runs` (which cover them in order, each
  // over its own sequence's cache); every run attends to its cache and its own rows, runs of one
  // cache see the earlier ones' K/V. Logits of the rows in logit_rows (ascending) into logits
  // ([logit_rows.size(), n_vocab]).
  void forward_rows(const int32_t* tokens, int n_tokens, std::span<const SeqRun> runs,
                    std::span<const int> logit_rows, float* logits);

  const Activations& activations() const { return act_; }
  // The fast path's packed weight copy (packed.h), or null (reference, GEM_CPU_REPACK=0, no
  // x86 SIMD path, or nothing packable).
  const PackedWeights* packed() const { return packed_.get(); }
  void set_tap(TapFn tap) { tap_ = std::move(tap); }
  // Stage times of every forward_tile go to `profiler` (backend/profile.h); null = off.
  void set_profiler(StageProfiler* profiler) { profiler_ = profiler; }

 private:
  void forward_layer(int layer, int n_tokens, std::span<const SeqRun> runs);
  // The ops, dispatched to the reference or the fast flavour.
  void linear(const model::TensorView& w, const float* x, int n_tokens, float* y);
  void norm(const float* x, const float* w, int64_t n_rows, int n_cols, float* y);
  void tap(int layer, std::string_view name, const float* data, int n_tokens, int width);
  // A stage boundary: the wall time since the previous one goes to (stage, layer) of this
  // tile's profiler. The thread pool joins at the end of every parallel op, so the work before
  // a boundary is done when it is reached. Off: one branch.
  void stage(Stage s, int layer) {
    if (profiler_ != nullptr) stage_end(s, layer);
  }
  void stage_end(Stage s, int layer);

  const model::Model& model_;
  const model::Config& cfg_;
  int n_tile_;
  bool reference_;
  ThreadPool& pool_;
  Activations act_;
  std::unique_ptr<PackedWeights> packed_;
  std::vector<std::vector<double>> inv_freq_;  // [n_layers][head_dim/2] RoPE inverse frequencies
  TapFn tap_;
  StageProfiler* profiler_ = nullptr;  // set_profiler's (gem profile); null = off
  double stage_start_ = 0.0;
};

}  // namespace gem::cpu
