// The Gemma 4 dense contract: Config (hyperparameters read once from GGUF keys), the LayerPlan
// (one row per layer, computed once at load), and Weights (zero-copy tensor views into the
// mapping). Accepts exactly the 12B and 31B profiles, plus a test class of smaller models with
// the same structure (the fixtures' models and the demo model); rejects everything else with a
// message naming the key or tensor, what was expected and what was found.
//
// Shapes: GGUF lists dimensions innermost first ([in, out] for a linear layer). TensorView
// converts once: `rows` is the outer dimension (out features), `cols` the contiguous one.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/dtype.h"
#include "base/status.h"
#include "gguf/gguf.h"

namespace gem::model {

enum class Profile { k12B, k31B, kTest };
std::string_view profile_name(Profile p);  // "12B", "31B", "test"

enum class AttnKind { kSliding, kFull };

// Hyperparameters, read once from the GGUF keys (spec §2); nothing reads metadata afterwards.
struct Config {
  Profile profile = Profile::kTest;
  int n_layers = 0;
  int n_embd = 0;
  int n_ff = 0;
  int n_heads = 0;
  int n_vocab = 0;
  int context_length = 0;           // gemma4.context_length (training context)
  int sliding_window = 0;
  int head_dim_sliding = 0;         // key_length_swa
  int head_dim_full = 0;            // key_length
  int n_kv_heads_sliding = 0;       // head_count_kv of sliding layers
  int n_kv_heads_full = 0;          // head_count_kv of full layers
  int n_rot_sliding = 0;            // rope.dimension_count_swa
  int n_rot_full = 0;               // rope.dimension_count
  float rope_theta_sliding = 0.0f;  // rope.freq_base_swa
  float rope_theta_full = 0.0f;     // rope.freq_base
  float rms_eps = 1e-6f;
  float final_logit_softcap = 0.0f;  // 0 = none
  // Recommended sampling from general.sampling.* when present.
  std::optional<float> sampling_temp;
  std::optional<int> sampling_top_k;
  std::optional<float> sampling_top_p;
  std::optional<float> sampling_min_p;
  std::vector<bool> sliding;        // per layer: true = sliding-window layer
};

// One row per layer: every fact the forward needs, derived once at load.
struct LayerPlan {
  int layer = 0;
  AttnKind kind = AttnKind::kSliding;
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  int window = 0;            // keys visible: p-window+1 .. p; 0 = unlimited (full layers)
  float rope_theta = 0.0f;
  int n_rot = 0;             // NeoX rotary dims (the whole head)
  int n_rot_pairs_active = 0;  // pairs that actually rotate: 128 of 128 / 64 of 256
  bool v_from_k = false;     // full layers: V is the raw K projection
  int kv_slot = 0;           // index among layers of the same kind (cache slot)
};

// A zero-copy view of one tensor. For 2-D tensors: rows = ne[1], cols = ne[0].
struct TensorView {
  std::string_view name;
  DType type = DType::kF32;
  const uint8_t* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  uint64_t n_bytes = 0;
  bool present() const { return data != nullptr; }
  uint64_t row_bytes() const { return rows > 0 ? n_bytes / static_cast<uint64_t>(rows) : 0; }
  const float* f32() const { return reinterpret_cast<const float*>(data); }
};

struct LayerWeights {
  TensorView attn_norm;            // [n_embd] f32
  TensorView attn_q;               // [n_heads*head_dim, n_embd]
  TensorView attn_k;               // [n_kv_heads*head_dim, n_embd]
  TensorView attn_v;               // [n_kv_heads*head_dim, n_embd]; absent on full layers
  TensorView attn_output;          // [n_embd, n_heads*head_dim]
  TensorView attn_q_norm;          // [head_dim] f32
  TensorView attn_k_norm;          // [head_dim] f32
  TensorView post_attention_norm;  // [n_embd] f32
  TensorView ffn_norm;             // [n_embd] f32 (pre-FFN norm)
  TensorView ffn_gate;             // [n_ff, n_embd]
  TensorView ffn_up;               // [n_ff, n_embd]
  TensorView ffn_down;             // [n_embd, n_ff]
  TensorView post_ffw_norm;        // [n_embd] f32
  TensorView layer_output_scale;   // [1] f32
};

struct Weights {
  TensorView token_embd;   // [n_vocab, n_embd] Q8_0 | Q6_K | F32; also the tied output head
  TensorView output_norm;  // [n_embd] f32
  TensorView rope_freqs;   // [head_dim_full/2] f32: 1.0 then 1e30 (proportional RoPE)
  std::vector<LayerWeights> layers;
};

// A loaded, validated model. Owns the mapping that every TensorView points into.
struct Model {
  std::unique_ptr<gguf::GgufFile> file;
  Config config;
  std::vector<LayerPlan> plan;
  Weights weights;
};

// The tensor manifest: every tensor a dense Gemma 4 file holds, in the order llama.cpp's converter
// (and gguf_synth.py) writes them, with its GGUF shape (ne, innermost first) and storage class.
// The single source for the loader's checks and for `gem synth`.
enum class TensorRole {
  kEmbedding,  // token_embd: Q8_0, Q6_K or F32
  kMatrix,     // 2-D layer matrices: Q4_0 or F32
  kVector,     // norms, layer_output_scale, rope_freqs: F32
};
struct ManifestEntry {
  std::string name;           // GGUF name, e.g. "blk.7.attn_q.weight"
  std::vector<uint64_t> ne;   // GGUF order
  TensorRole role = TensorRole::kVector;
  int layer = -1;             // -1 for the three global tensors
};
std::vector<ManifestEntry> tensor_manifest(const Config& config);
// Storage types gem accepts for a role, and the phrase used in error messages.
bool dtype_accepted(TensorRole role, DType type);
std::string_view accepted_dtypes(TensorRole role);  // "Q4_0 or F32 for layer matrices"

// The Gemma 4 tokenizer keys every accepted file carries (Appendix A.1): model "gemma4", 262144
// tokens, the control tokens at their ids. Targets and assistants alike.
Status check_tokenizer(const gguf::GgufFile& f);

// Validates a parsed GGUF against the contract and binds the views.
Result<std::unique_ptr<Model>> load_model(std::unique_ptr<gguf::GgufFile> file);
// Maps and validates `path`.
Result<std::unique_ptr<Model>> load_model(const std::string& path);

// KV-cache storage (DESIGN.md Runtime): F32 everywhere; F16 everywhere; or F16-full, which keeps
// the sliding rings in F32 and stores only the context-growing full layers in F16.
enum class KvType { kF32, kF16, kF16Full };
Result<KvType> parse_kv_type(std::string_view s);  // "f32", "f16", "f16-full"
std::string_view kv_type_name(KvType t);

// Slots a sliding layer's ring holds beyond its window: a sequence can be truncated by up to this
// many positions (Backend::slot_truncate, the rollback of a rejected speculative tail) and still
// hold every key the window needs, since writing position q overwrites only position q − slots.
inline constexpr int kRingSpare = 32;
inline int kv_ring_slots(int window) { return window + kRingSpare; }

// Bytes of K+V for one layer and one sequence: sliding layers hold a ring of kv_ring_slots(window)
// slots, full layers n_ctx slots. kv_cache_bytes: every layer, for n_seq sequence slots.
uint64_t kv_layer_bytes(const LayerPlan& p, int n_ctx, KvType kv);
uint64_t kv_cache_bytes(const std::vector<LayerPlan>& plan, int n_ctx, KvType kv, int n_seq = 1);

}  // namespace gem::model
