// Stage profiling (`gem profile`): the stages a forward pass is cut into, and the StageProfiler a
// backend adds one timed record to per stage boundary while profiling. The forwards test one
// pointer at each boundary, so profiling costs nothing when it is off.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gem {

// The stages of one forward pass, in the order a layer runs them. A backend reports the stages
// it has: the CPU forward runs them all separately; the CUDA forward fuses some (its norms are
// part of the residual epilogues, its RoPE prologue also writes K/V in decode).
enum class Stage : uint8_t {
  kSetup,      // step parameters and tokens to the device, the decode graph's launch (CUDA)
  kEmbed,      // token_embd rows × sqrt(n_embd)
  kNorm,       // RMSNorms: attn_norm, ffn_norm, the post norms, the per-head Q/K/V norms
  kQkv,        // the attn_q, attn_k, attn_v products
  kRope,       // RoPE of Q and K (CUDA: with the Q/K norms, and the K/V write in decode)
  kKvWrite,    // K/V into the cache (with f16 rounding)
  kAttention,  // softmax(q·Kᵀ)·V over the cached keys and the tile's own
  kAttnOut,    // the attn_output product
  kFfnGateUp,  // the ffn_gate and ffn_up products (CUDA decode: with gelu(gate) ⊙ up)
  kGelu,       // gelu(gate) ⊙ up (CUDA decode: its q8 quantisation for ffn_down)
  kFfnDown,    // the ffn_down product
  kEpilogue,   // residual adds and layer_output_scale (CUDA: fused with the norms around them)
  kHead,       // output_norm, the tied token_embd product, the final soft-cap
  kSample,     // picking the next token (timed by the caller, not the forward)
};
inline constexpr int kStageCount = static_cast<int>(Stage::kSample) + 1;

inline std::string_view stage_name(Stage s) {
  constexpr std::string_view kNames[kStageCount] = {
      "setup",    "embed",       "norm", "qkv",      "rope",     "kv_write", "attention",
      "attn_out", "ffn_gate_up", "gelu", "ffn_down", "epilogue", "head",     "sample"};
  return kNames[static_cast<int>(s)];
}

// Collects the stage times of the evals made while it is installed (Backend::set_stage_profiler).
// Layer -1 marks the stages outside the layer loop (setup, embed, head, sample).
class StageProfiler {
 public:
  struct Record {
    Stage stage = Stage::kSetup;
    int layer = -1;
    double seconds = 0.0;
  };

  // What the caller asks of a backend that can time its stages in several ways (CUDA):
  // "auto" (its default), "graph-side", "graph-inline" or "eager"; backends that have one way
  // accept only "auto".
  explicit StageProfiler(std::string timing = "auto") : timing_(std::move(timing)) {
    records_.reserve(1024);
  }

  void add(Stage stage, int layer, double seconds) { records_.push_back({stage, layer, seconds}); }
  void clear() { records_.clear(); }
  const std::vector<Record>& records() const { return records_; }

  const std::string& timing() const { return timing_; }
  // How the backend measured, in words, for the report (set by the backend).
  const std::string& method() const { return method_; }
  void set_method(std::string method) { method_ = std::move(method); }

 private:
  std::vector<Record> records_;
  std::string timing_;
  std::string method_;
};

}  // namespace gem
