// The Gemma 4 MTP assistant (`gemma4-assistant`, spec §7): a 4-layer drafter that owns no KV
// cache and cross-attends to its target's caches of layers N−2 (sliding) and N−1 (full). Its
// strict manifest (the 49 tensors of spec §7.3 with their exact shapes), the metadata of §7.2,
// and the pairing check against a loaded target (Appendix A.7).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "gguf/gguf.h"
#include "model/model.h"

namespace gem::model {

// Hyperparameters of an assistant, read once from the gemma4-assistant.* keys.
struct AssistantConfig {
  Profile profile = Profile::kTest;  // the 12B / 31B assistant (chosen by embedding_length_out), or test
  int n_layers = 0;                  // block_count (= nextn_predict_layers): 4, kinds S,S,S,F
  int n_embd = 0;                    // embedding_length: the assistant's own width (1024)
  int n_embd_out = 0;                // embedding_length_out: the target's width (h, h_next)
  int n_ff = 0;
  int n_heads = 0;                   // = the target's query heads
  int n_vocab = 0;
  int context_length = 0;
  int sliding_window = 0;
  int head_dim_sliding = 0;          // key_length_swa: = the target's sliding head width
  int head_dim_full = 0;             // key_length
  int n_kv_heads_sliding = 0;        // head_count_kv of its sliding layers (= the target's)
  int n_kv_heads_full = 0;
  int n_rot_sliding = 0;
  int n_rot_full = 0;
  float rope_theta_sliding = 0.0f;
  float rope_theta_full = 0.0f;
  float rms_eps = 1e-6f;
  std::vector<bool> sliding;         // per layer: true = sliding kind (reads target layer N−2)
};

struct AssistantLayerWeights {
  TensorView attn_norm;            // [n_embd] f32
  TensorView attn_q;               // [n_heads*head_dim, n_embd]
  TensorView attn_q_norm;          // [head_dim] f32
  TensorView attn_output;          // [n_embd, n_heads*head_dim]
  TensorView post_attention_norm;  // [n_embd] f32
  TensorView layer_output_scale;   // [1] f32
  TensorView ffn_norm;             // [n_embd] f32
  TensorView ffn_gate;             // [n_ff, n_embd]
  TensorView ffn_up;               // [n_ff, n_embd]
  TensorView ffn_down;             // [n_embd, n_ff]
  TensorView post_ffw_norm;        // [n_embd] f32
};

struct AssistantWeights {
  TensorView token_embd;       // [n_vocab, n_embd] Q8_0 | Q6_K | F32: the tied LM head only
  TensorView rope_freqs;       // [head_dim_full/2] f32 (proportional RoPE, as the target's)
  TensorView output_norm;      // [n_embd] f32
  TensorView pre_projection;   // [n_embd, 2*n_embd_out]: concat(target embedding·√n_embd_out, h)
  TensorView post_projection;  // [n_embd_out, n_embd]: back to the target's space (h_next)
  std::vector<AssistantLayerWeights> layers;
};

// A loaded, validated assistant; owns the mapping its views point into. plan[i] describes
// layer i as LayerPlan does for a target (kv_slot unused: the assistant has no cache).
struct Assistant {
  std::unique_ptr<gguf::GgufFile> file;
  AssistantConfig config;
  std::vector<LayerPlan> plan;
  AssistantWeights weights;
};

// Every tensor an assistant holds, in the order llama.cpp's converter (and gem synth) write
// them, with its GGUF shape (ne, innermost first) and storage role (49 for 4 layers).
std::vector<ManifestEntry> assistant_manifest(const AssistantConfig& config);

// True when general.architecture is "gemma4-assistant".
bool is_assistant_file(const gguf::GgufFile& file);

// Validates a parsed GGUF against the assistant contract and binds the views.
Result<std::unique_ptr<Assistant>> load_assistant(std::unique_ptr<gguf::GgufFile> file);
Result<std::unique_ptr<Assistant>> load_assistant(const std::string& path);

// The target layer an assistant layer of this kind reads (spec §7.1): N−2 for sliding layers
// (the target's last sliding layer), N−1 for the full one.
inline int assistant_target_layer(bool sliding, int n_target_layers) {
  return sliding ? n_target_layers - 2 : n_target_layers - 1;
}

// Whether `assistant` drafts for `target` (Appendix A.7): its output width, heads, head widths,
// KV heads, window, RoPE and vocabulary equal the target's, and the target's layers N−2 and
// N−1 are sliding and full. The message names the key, the expected and the actual value.
Status check_pairing(const Assistant& assistant, const Model& target);

}  // namespace gem::model
