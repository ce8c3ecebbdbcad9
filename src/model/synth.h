// Synthetic Gemma 4 dense GGUF models (`gem synth`): the exact keys, key order, tensor names,
// shapes and storage types of a real converted checkpoint (mirroring shared/tools/gguf_synth.py),
// the real tokenizer copied from a vocab GGUF, and seeded random weights scaled so activations
// stay finite. Small models get an "exact" fill (values drawn per element, then quantised); the
// large ones a "fast" fill (random quant bytes, fixed per-tensor scale) that streams at disk speed.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "base/dtype.h"
#include "base/status.h"
#include "gguf/gguf.h"
#include "gguf/writer.h"
#include "model/model.h"

namespace gem::model {

// A model shape plus the value ranges of its random weights (names as in gguf_synth.py).
struct SynthGeometry {
  std::string name;  // "12b", "31b", "tiny", "tiny6", "tiny256", "demo"
  int n_layer = 0;
  int n_embd = 0;
  int n_head = 0;
  int n_head_kv_swa = 0;
  int head_dim_swa = 0;
  int n_head_kv_full = 0;
  int head_dim_full = 0;
  int n_ff = 0;
  int n_swa = 0;   // sliding window
  int n_ctx = 0;   // context_length metadata
  int n_vocab = 262144;
  int period = 6;  // layer il is full when il % period == period - 1
  double rope_base_full = 1e6;
  double rope_base_swa = 1e4;
  double partial_rotary_full = 0.25;
  double rms_eps = 1e-6;
  double softcap = 30.0;
  // Random weight ranges (fixtures/README.md "Random weights").
  double norm_lo = 0.7, norm_hi = 1.3;    // attn_norm, ffn_norm
  double post_lo = 0.1, post_hi = 0.2;    // post_attention_norm, post_ffw_norm
  double out_lo = 5.0, out_hi = 9.0;      // output_norm
  double scale_lo = 0.95, scale_hi = 1.0;  // layer_output_scale
  double qk_gain = 1.0;                   // q/k norms U(0.8, 1.2) * qk_gain * hd^-1/4
  double embd_in_rms = 0.5;               // token_embd std = embd_in_rms / sqrt(n_embd)

  double embd_std() const;
  Config config() const;  // the Config a loader reads back (profile left as kTest)
};

std::vector<std::string_view> synth_geometry_names();
Result<SynthGeometry> synth_geometry(std::string_view name);

enum class SynthFill { kAuto, kExact, kFast };

struct SynthOptions {
  SynthGeometry geometry;
  std::string layout = "prod";           // "prod" (Q4_0 matrices) or "f32"
  DType matrix_type = DType::kQ4_0;      // Q4_0 or F32 (an assistant's: also Q8_0)
  DType embd_type = DType::kQ8_0;        // Q8_0, Q6_K or F32
  uint64_t seed = 1;
  SynthFill fill = SynthFill::kAuto;     // auto: exact below 2e9 parameters, fast above
  // Header real, tensor data a hole (no disk blocks), except the small F32 vectors (norms,
  // scales, rope_freqs), written for real so the file still validates: for loader tests of the
  // 12B/31B on a small disk.
  bool sparse = false;
  std::string name;                      // general.name; default gem-synth-<geometry>-<layout>-s<seed>
};

// Fills `w` with the model's metadata (vocab's tokenizer.* keys copied verbatim, at once, so
// `vocab` may be closed afterwards) and tensors. Returns the fill mode used ("exact"/"fast").
Result<std::string> build_synth_model(const SynthOptions& opt, const gguf::GgufFile& vocab,
                                      gguf::GgufWriter* w);

struct SynthSummary {
  std::string fill;
  uint64_t n_tensors = 0;
  uint64_t n_params = 0;
  uint64_t file_bytes = 0;
  double seconds = 0.0;
};
// Builds and writes the model to `path` (sparse per opt.sparse). progress(done, total) as bytes
// are written.
// The layout label gguf_synth.py writes (gem.synth.layout): "prod" / "f32", or with the types
// that differ from the layout's, e.g. "prod(mat=Q8_0,embd=Q8_0)".
std::string layout_label(const SynthOptions& opt);

Result<SynthSummary> write_synth_model(const SynthOptions& opt, const gguf::GgufFile& vocab,
                                       const std::string& path,
                                       const std::function<void(uint64_t, uint64_t)>& progress = {});

// The MTP assistant (gemma4-assistant, spec §7) of a target: its own width and FFN, the target's
// heads, head widths, window and RoPE; the 4 + 1 + 44 tensors and the metadata gguf_synth.py's
// --assistant-for writes, values from streams keyed "assistant/<name>" (so, with the exact fill,
// the same tensor data as the fixture tiny-q4_0-assistant for the tiny target, seed 1).
struct AssistantGeometry {
  int a_embd = 0;           // assistant width
  int a_ff = 0;             // assistant FFN
  int a_layer = 4;          // kinds S, S, S, F
  double a_pre_gain = 0.2;  // nextn.pre_projection std = a_pre_gain / sqrt(2 * target width)
  double a_post_lo = 0.2, a_post_hi = 0.4;
  double a_embd_rms = 0.5;  // assistant token_embd std = a_embd_rms / sqrt(a_embd)
  double a_out_lo = 5.0, a_out_hi = 9.0;
};
// The assistant shape gguf_synth.py pairs with a target width (1024 / 8192 for the real ones).
AssistantGeometry assistant_geometry_for(const SynthGeometry& target);
// The target's geometry read back from a loaded model's configuration (value ranges default).
SynthGeometry geometry_of(const Config& target, std::string name);

Result<SynthSummary> write_synth_assistant(const SynthOptions& target_opt, const AssistantGeometry& a,
                                           const gguf::GgufFile& vocab, const std::string& path,
                                           const std::function<void(uint64_t, uint64_t)>& progress = {});

}  // namespace gem::model
