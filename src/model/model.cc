// load_model: checks a parsed GGUF against the Gemma 4 dense contract (spec §2, §3, Appendix A),
// fills Config and the LayerPlan, and binds zero-copy TensorViews. The 12B and 31B profiles are
// matched value by value; smaller files with the same structure are accepted as test models.
#include "model/model.h"

#include "model/load_util.h"

#include <cmath>
#include <cstring>
#include <map>
#include <set>

namespace gem::model {
namespace {

constexpr int kVocabSize = 262144;
constexpr int kPeriod = 6;  // 5 sliding layers, then 1 full layer, in every shipped model
constexpr float kRopeThetaFull = 1000000.0f;
constexpr float kRopeThetaSliding = 10000.0f;
constexpr float kRmsEps = 1e-6f;
constexpr float kSoftcap = 30.0f;

// The values a production file must carry exactly (spec §0, §2.1).
struct ProfileSpec {
  Profile profile;
  int n_layers;
  int n_embd;
  int n_ff;
  int n_heads;
  int n_kv_heads_sliding;
  int n_kv_heads_full;
  int head_dim_sliding;
  int head_dim_full;
  int sliding_window;
  int context_length;
  size_t n_tensors;
};
constexpr ProfileSpec k12B{Profile::k12B, 48, 3840, 15360, 16, 8, 1, 256, 512, 1024, 262144, 667};
constexpr ProfileSpec k31B{Profile::k31B, 60, 5376, 21504, 32, 16, 4, 256, 512, 1024, 262144, 833};

std::string arch_key(std::string_view suffix) { return "gemma4." + std::string(suffix); }

// Reads the metadata of a gemma4 file into Config; profile checks come afterwards.
class KeyReader {
 public:
  explicit KeyReader(const gguf::GgufFile& f) : f_(f) {}

  Result<int> u32(std::string_view suffix) {
    std::string key = arch_key(suffix);
    if (!f_.find_kv(key)) return errorf("key %s missing", key.c_str());
    GEM_ASSIGN_OR_RETURN(int64_t v, f_.get_i64(key));
    if (v < 0 || v > (int64_t{1} << 31) - 1) {
      return errorf("key %s: value %lld out of range", key.c_str(), static_cast<long long>(v));
    }
    return static_cast<int>(v);
  }
  // Optional integer with a default when absent.
  Result<int> u32_or(std::string_view suffix, int dflt) {
    if (!f_.find_kv(arch_key(suffix))) return dflt;
    return u32(suffix);
  }
  Result<float> f32(std::string_view suffix) {
    std::string key = arch_key(suffix);
    if (!f_.find_kv(key)) return errorf("key %s missing", key.c_str());
    return f_.get_f32(key);
  }
  // A scalar broadcast to every layer, or an integer array of length n_layers (spec §2.2).
  Result<std::vector<int>> per_layer(std::string_view suffix, int n_layers) {
    std::string key = arch_key(suffix);
    const gguf::KeyValue* kv = f_.find_kv(key);
    if (!kv) return errorf("key %s missing", key.c_str());
    std::vector<int> out;
    if (kv->type == gguf::ValueType::kArray) {
      GEM_ASSIGN_OR_RETURN(std::vector<int64_t> v, f_.get_int_array(key));
      if (static_cast<int64_t>(v.size()) != n_layers) {
        return errorf("key %s: array of %zu values, expected one per layer (block_count %d)",
                      key.c_str(), v.size(), n_layers);
      }
      for (size_t i = 0; i < v.size(); ++i) {
        if (v[i] <= 0 || v[i] > (int64_t{1} << 30)) {
          return errorf("key %s: layer %zu value %lld out of range", key.c_str(), i,
                        static_cast<long long>(v[i]));
        }
        out.push_back(static_cast<int>(v[i]));
      }
    } else {
      GEM_ASSIGN_OR_RETURN(int v, u32(suffix));
      out.assign(static_cast<size_t>(n_layers), v);
    }
    return out;
  }

 private:
  const gguf::GgufFile& f_;
};

// One value for every layer of a kind (Config holds one per kind); per-layer arrays that vary
// within a kind describe a model gem does not run.
Result<int> uniform_value(const std::vector<int>& v, const std::vector<bool>& sliding, bool want_sliding,
                          const char* key) {
  int value = -1;
  for (size_t i = 0; i < v.size(); ++i) {
    if (sliding[i] != want_sliding) continue;
    if (value < 0) {
      value = v[i];
    } else if (v[i] != value) {
      return errorf("key gemma4.%s: layer %zu has %d, earlier %s layers have %d; gem needs one value "
                    "per layer kind", key, i, v[i], want_sliding ? "sliding" : "full", value);
    }
  }
  return value < 0 ? 0 : value;
}

// Value-by-value comparison for a production profile.
struct ProfileCheck {
  const char* profile;
  Status status;
  void eq(const char* key, long long expected, long long actual) {
    if (!status.ok() || expected == actual) return;
    status = errorf("key gemma4.%s: the %s profile expects %lld, found %lld", key, profile, expected, actual);
  }
  void eqf(const char* key, float expected, float actual) {
    if (!status.ok() || expected == actual) return;
    status = errorf("key gemma4.%s: the %s profile expects %g, found %g", key, profile, expected, actual);
  }
};

Status check_profile(const ProfileSpec& p, const Config& c) {
  ProfileCheck k{profile_name(p.profile).data(), ok_status()};
  k.eq("block_count", p.n_layers, c.n_layers);
  k.eq("embedding_length", p.n_embd, c.n_embd);
  k.eq("feed_forward_length", p.n_ff, c.n_ff);
  k.eq("attention.head_count", p.n_heads, c.n_heads);
  k.eq("attention.key_length", p.head_dim_full, c.head_dim_full);
  k.eq("attention.key_length_swa", p.head_dim_sliding, c.head_dim_sliding);
  k.eq("attention.sliding_window", p.sliding_window, c.sliding_window);
  k.eq("context_length", p.context_length, c.context_length);
  k.eq("rope.dimension_count", p.head_dim_full, c.n_rot_full);
  k.eq("rope.dimension_count_swa", p.head_dim_sliding, c.n_rot_sliding);
  k.eqf("rope.freq_base", kRopeThetaFull, c.rope_theta_full);
  k.eqf("rope.freq_base_swa", kRopeThetaSliding, c.rope_theta_sliding);
  k.eqf("attention.layer_norm_rms_epsilon", kRmsEps, c.rms_eps);
  k.eqf("final_logit_softcapping", kSoftcap, c.final_logit_softcap);
  return k.status;
}

// Reads every gemma4.* key into Config, choosing and checking the profile.
Status read_config(const gguf::GgufFile& f, Config* c) {
  KeyReader r(f);
  GEM_ASSIGN_OR_RETURN(c->n_layers, r.u32("block_count"));
  if (c->n_layers < 1 || c->n_layers > 1024) {
    return errorf("key gemma4.block_count: %d layers, expected 1..1024", c->n_layers);
  }
  GEM_ASSIGN_OR_RETURN(c->n_embd, r.u32("embedding_length"));
  GEM_ASSIGN_OR_RETURN(c->context_length, r.u32("context_length"));
  GEM_ASSIGN_OR_RETURN(c->head_dim_full, r.u32("attention.key_length"));
  GEM_ASSIGN_OR_RETURN(c->head_dim_sliding, r.u32("attention.key_length_swa"));
  GEM_ASSIGN_OR_RETURN(int v_full, r.u32_or("attention.value_length", c->head_dim_full));
  GEM_ASSIGN_OR_RETURN(int v_sliding, r.u32_or("attention.value_length_swa", c->head_dim_sliding));
  GEM_ASSIGN_OR_RETURN(c->sliding_window, r.u32("attention.sliding_window"));
  GEM_ASSIGN_OR_RETURN(c->n_rot_full, r.u32_or("rope.dimension_count", c->head_dim_full));
  GEM_ASSIGN_OR_RETURN(c->n_rot_sliding, r.u32_or("rope.dimension_count_swa", c->head_dim_sliding));
  GEM_ASSIGN_OR_RETURN(c->rope_theta_full, r.f32("rope.freq_base"));
  GEM_ASSIGN_OR_RETURN(c->rope_theta_sliding, r.f32("rope.freq_base_swa"));
  GEM_ASSIGN_OR_RETURN(c->rms_eps, r.f32("attention.layer_norm_rms_epsilon"));
  if (f.find_kv(arch_key("final_logit_softcapping"))) {
    GEM_ASSIGN_OR_RETURN(c->final_logit_softcap, r.f32("final_logit_softcapping"));
  }
  GEM_ASSIGN_OR_RETURN(int shared_kv, r.u32_or("attention.shared_kv_layers", 0));
  GEM_ASSIGN_OR_RETURN(int per_layer_input, r.u32_or("embedding_length_per_layer_input", 0));
  if (shared_kv != 0) {
    return errorf("key gemma4.attention.shared_kv_layers: expected 0 (dense models share no KV), found %d",
                  shared_kv);
  }
  if (per_layer_input != 0) {
    return errorf("key gemma4.embedding_length_per_layer_input: expected 0 (per-layer embeddings are "
                  "E2B/E4B only), found %d", per_layer_input);
  }
  if (f.find_kv(arch_key("expert_count"))) {
    return errorf("key gemma4.expert_count present: a mixture-of-experts Gemma 4 (26B-A4B); gem runs the "
                  "dense 12B and 31B only");
  }

  // The profile is chosen by width: a file as wide as a real model must be that model exactly.
  const ProfileSpec* spec = nullptr;
  if (c->n_embd == k12B.n_embd) {
    spec = &k12B;
  } else if (c->n_embd == k31B.n_embd) {
    spec = &k31B;
  } else if (c->n_embd >= k12B.n_embd) {
    return errorf("key gemma4.embedding_length: %d matches neither the 12B (%d) nor the 31B (%d) profile, "
                  "and test models must be narrower than %d", c->n_embd, k12B.n_embd, k31B.n_embd,
                  k12B.n_embd);
  }
  c->profile = spec ? spec->profile : Profile::kTest;

  // Per-layer values (scalars or arrays, spec §2.2).
  GEM_ASSIGN_OR_RETURN(std::vector<int> ff, r.per_layer("feed_forward_length", c->n_layers));
  GEM_ASSIGN_OR_RETURN(std::vector<int> heads, r.per_layer("attention.head_count", c->n_layers));
  for (int i = 1; i < c->n_layers; ++i) {
    if (ff[i] != ff[0]) {
      return errorf("key gemma4.feed_forward_length: layer %d has %d, layer 0 has %d; gem needs one FFN "
                    "width", i, ff[i], ff[0]);
    }
    if (heads[i] != heads[0]) {
      return errorf("key gemma4.attention.head_count: layer %d has %d, layer 0 has %d; gem needs one "
                    "query-head count", i, heads[i], heads[0]);
    }
  }
  c->n_ff = ff[0];
  c->n_heads = heads[0];
  if (spec) GEM_RETURN_IF_ERROR(check_profile(*spec, *c));

  // The attention pattern: a bool array, one per layer, last layer full (spec §2.2, App. A.2).
  const std::string pattern_key = arch_key("attention.sliding_window_pattern");
  const gguf::KeyValue* pkv = f.find_kv(pattern_key);
  if (!pkv) return errorf("key %s missing", pattern_key.c_str());
  if (pkv->type != gguf::ValueType::kArray || pkv->array_type != gguf::ValueType::kBool) {
    return errorf("key %s: expected an array of bool, found %.*s", pattern_key.c_str(),
                  static_cast<int>(gguf::value_type_name(pkv->type).size()),
                  gguf::value_type_name(pkv->type).data());
  }
  GEM_ASSIGN_OR_RETURN(c->sliding, f.get_bool_array(pattern_key));
  if (static_cast<int>(c->sliding.size()) != c->n_layers) {
    return errorf("key %s: %zu entries, expected one per layer (block_count %d)", pattern_key.c_str(),
                  c->sliding.size(), c->n_layers);
  }
  if (c->sliding.back()) {
    return errorf("key %s: the last layer (%d) is sliding, expected full attention", pattern_key.c_str(),
                  c->n_layers - 1);
  }
  if (spec) {
    for (int i = 0; i < c->n_layers; ++i) {
      const bool want = (i + 1) % kPeriod != 0;
      if (c->sliding[i] != want) {
        return errorf("key %s: layer %d is %s, the %s profile expects %s (pattern [T,T,T,T,T,F] x %d)",
                      pattern_key.c_str(), i, c->sliding[i] ? "sliding" : "full",
                      std::string(profile_name(spec->profile)).c_str(), want ? "sliding" : "full",
                      c->n_layers / kPeriod);
      }
    }
  }

  GEM_ASSIGN_OR_RETURN(std::vector<int> kv, r.per_layer("attention.head_count_kv", c->n_layers));
  GEM_ASSIGN_OR_RETURN(c->n_kv_heads_sliding, uniform_value(kv, c->sliding, true, "attention.head_count_kv"));
  GEM_ASSIGN_OR_RETURN(c->n_kv_heads_full, uniform_value(kv, c->sliding, false, "attention.head_count_kv"));
  if (spec) {
    ProfileCheck k{profile_name(spec->profile).data(), ok_status()};  // a literal: NUL-terminated
    k.eq("attention.head_count_kv (sliding layers)", spec->n_kv_heads_sliding, c->n_kv_heads_sliding);
    k.eq("attention.head_count_kv (full layers)", spec->n_kv_heads_full, c->n_kv_heads_full);
    GEM_RETURN_IF_ERROR(k.status);
  }

  // Structural rules every accepted file obeys (the test class is held to these alone).
  if (v_full != c->head_dim_full || v_sliding != c->head_dim_sliding) {
    return errorf("keys gemma4.attention.value_length/_swa (%d/%d) must equal key_length/_swa (%d/%d)",
                  v_full, v_sliding, c->head_dim_full, c->head_dim_sliding);
  }
  if (c->head_dim_full <= 0 || c->head_dim_full % 8 || c->head_dim_sliding <= 0 || c->head_dim_sliding % 2) {
    return errorf("keys gemma4.attention.key_length/_swa: %d/%d, expected a multiple of 8 (full) and an "
                  "even width (sliding)", c->head_dim_full, c->head_dim_sliding);
  }
  if (c->n_rot_full != c->head_dim_full || c->n_rot_sliding != c->head_dim_sliding) {
    return errorf("keys gemma4.rope.dimension_count/_swa: %d/%d, expected the whole head (%d/%d)",
                  c->n_rot_full, c->n_rot_sliding, c->head_dim_full, c->head_dim_sliding);
  }
  if (c->n_heads <= 0 || c->n_kv_heads_full <= 0 || c->n_heads % c->n_kv_heads_full ||
      (c->n_kv_heads_sliding > 0 && c->n_heads % c->n_kv_heads_sliding)) {
    return errorf("key gemma4.attention.head_count_kv: %d (sliding) / %d (full) KV heads must divide "
                  "head_count %d", c->n_kv_heads_sliding, c->n_kv_heads_full, c->n_heads);
  }
  if (c->n_embd <= 0 || c->n_ff <= 0 || c->sliding_window <= 0 || c->context_length <= 0) {
    return errorf("keys gemma4.embedding_length/feed_forward_length/sliding_window/context_length must be "
                  "positive, found %d/%d/%d/%d", c->n_embd, c->n_ff, c->sliding_window, c->context_length);
  }
  if (!(c->rms_eps > 0.0f) || !(c->rope_theta_full > 0.0f) || !(c->rope_theta_sliding > 0.0f) ||
      !(c->final_logit_softcap >= 0.0f)) {
    return errorf("keys gemma4.*: rms eps %g, rope bases %g/%g and softcap %g must be positive",
                  c->rms_eps, c->rope_theta_full, c->rope_theta_sliding, c->final_logit_softcap);
  }
  return ok_status();
}

Status read_sampling(const gguf::GgufFile& f, Config* c) {
  if (f.find_kv("general.sampling.temp")) {
    GEM_ASSIGN_OR_RETURN(c->sampling_temp, f.get_f32("general.sampling.temp"));
  }
  if (f.find_kv("general.sampling.top_k")) {
    GEM_ASSIGN_OR_RETURN(int64_t k, f.get_i64("general.sampling.top_k"));
    c->sampling_top_k = static_cast<int>(k);
  }
  if (f.find_kv("general.sampling.top_p")) {
    GEM_ASSIGN_OR_RETURN(c->sampling_top_p, f.get_f32("general.sampling.top_p"));
  }
  if (f.find_kv("general.sampling.min_p")) {
    GEM_ASSIGN_OR_RETURN(c->sampling_min_p, f.get_f32("general.sampling.min_p"));
  }
  return ok_status();
}

// Appendix A.4: rope_freqs is [1.0 x active, >= 1e29 x the rest]; returns the active pair count.
Result<int> check_rope_freqs(const gguf::TensorInfo& t, const Config& c) {
  const int n = c.head_dim_full / 2;
  const int want_active = c.head_dim_full / 8;  // 0.25 * head_dim_full / 2 (proportional RoPE)
  std::vector<float> v(static_cast<size_t>(n));
  std::memcpy(v.data(), t.data, v.size() * sizeof(float));
  int active = 0;
  while (active < n && v[static_cast<size_t>(active)] == 1.0f) ++active;
  for (int i = active; i < n; ++i) {
    if (!(v[static_cast<size_t>(i)] >= 1e29f)) {
      return errorf("tensor rope_freqs.weight: entry %d is %g, expected 1.0 for the first %d entries and "
                    ">= 1e29 after (proportional RoPE)", i, v[static_cast<size_t>(i)], want_active);
    }
  }
  if (active != want_active) {
    return errorf("tensor rope_freqs.weight: %d leading 1.0 entries, expected %d (0.25 x key_length %d / 2)",
                  active, want_active, c.head_dim_full);
  }
  return active;
}

Status check_tensors(const gguf::GgufFile& f, const Config& c, const std::vector<ManifestEntry>& manifest) {
  std::set<std::string_view> expected;
  for (const ManifestEntry& e : manifest) {
    expected.insert(e.name);
    const gguf::TensorInfo* t = f.find_tensor(e.name);
    if (!t) {
      if (e.layer >= 0) {
        return errorf("tensor %s missing (layer %d is a %s-attention layer)", e.name.c_str(), e.layer,
                      c.sliding[static_cast<size_t>(e.layer)] ? "sliding" : "full");
      }
      return errorf("tensor %s missing", e.name.c_str());
    }
    GEM_RETURN_IF_ERROR(check_entry(*t, e, dtype_accepted(e.role, t->type), accepted_dtypes(e.role)));
  }
  for (const gguf::TensorInfo& t : f.tensors()) {
    if (expected.count(t.name)) continue;
    std::string name(t.name);
    int layer = -1;
    if (std::sscanf(name.c_str(), "blk.%d.attn_v.weight", &layer) == 1 && layer >= 0 &&
        layer < c.n_layers && !c.sliding[static_cast<size_t>(layer)] && name == strprintf("blk.%d.attn_v.weight", layer)) {
      return errorf("unexpected tensor %s: layer %d is a full-attention layer, which takes V from the K "
                    "projection and has no attn_v", name.c_str(), layer);
    }
    return errorf("unexpected tensor %s: not part of the Gemma 4 dense contract (file has %zu tensors, "
                  "expected %zu)", name.c_str(), f.tensors().size(), manifest.size());
  }
  if (f.tensors().size() != manifest.size()) {  // duplicates would slip past the name checks
    return errorf("file has %zu tensors, expected %zu", f.tensors().size(), manifest.size());
  }
  return ok_status();
}

LayerWeights bind_layer(const gguf::GgufFile& f, int il, bool sliding) {
  auto get = [&](const char* suffix) {
    const gguf::TensorInfo* t = f.find_tensor(strprintf("blk.%d.%s.weight", il, suffix));
    return t ? view_of(*t) : TensorView{};
  };
  LayerWeights w;
  w.attn_norm = get("attn_norm");
  w.attn_q = get("attn_q");
  w.attn_k = get("attn_k");
  if (sliding) w.attn_v = get("attn_v");
  w.attn_output = get("attn_output");
  w.attn_q_norm = get("attn_q_norm");
  w.attn_k_norm = get("attn_k_norm");
  w.post_attention_norm = get("post_attention_norm");
  w.ffn_norm = get("ffn_norm");
  w.ffn_gate = get("ffn_gate");
  w.ffn_up = get("ffn_up");
  w.ffn_down = get("ffn_down");
  w.post_ffw_norm = get("post_ffw_norm");
  w.layer_output_scale = get("layer_output_scale");
  return w;
}

}  // namespace

Status check_tokenizer(const gguf::GgufFile& f) {
  if (!f.find_kv("tokenizer.ggml.model")) {
    return errorf("key tokenizer.ggml.model missing: gem needs the Gemma 4 tokenizer (tokenizer.* keys) "
                  "inside the model file");
  }
  GEM_ASSIGN_OR_RETURN(std::string_view model, f.get_string("tokenizer.ggml.model"));
  if (model != "gemma4") {
    return errorf("key tokenizer.ggml.model: expected \"gemma4\", found \"%.*s\"",
                  static_cast<int>(model.size()), model.data());
  }
  if (!f.find_kv("tokenizer.ggml.tokens")) return errorf("key tokenizer.ggml.tokens missing");
  GEM_ASSIGN_OR_RETURN(const std::vector<std::string_view>* tokens,
                       f.get_string_array("tokenizer.ggml.tokens"));
  if (tokens->size() != static_cast<size_t>(kVocabSize)) {
    return errorf("key tokenizer.ggml.tokens: %zu tokens, the Gemma 4 vocabulary has %d",
                  tokens->size(), kVocabSize);
  }
  // Appendix A.1: the control tokens gem's chat format and stop logic rely on.
  static constexpr struct {
    int id;
    const char* text;
  } kSpecial[] = {{2, "<bos>"}, {1, "<eos>"}, {105, "<|turn>"}, {106, "<turn|>"}, {50, "<|tool_response>"}};
  for (const auto& s : kSpecial) {
    std::string_view t = (*tokens)[static_cast<size_t>(s.id)];
    if (t != s.text) {
      return errorf("key tokenizer.ggml.tokens: token %d is \"%.*s\", the Gemma 4 vocabulary has \"%s\"",
                    s.id, static_cast<int>(t.size()), t.data(), s.text);
    }
  }
  return ok_status();
}

std::string_view profile_name(Profile p) {
  switch (p) {
    case Profile::k12B: return "12B";
    case Profile::k31B: return "31B";
    case Profile::kTest: return "test";
  }
  return "?";
}

bool dtype_accepted(TensorRole role, DType type) {
  switch (role) {
    case TensorRole::kEmbedding:
      return type == DType::kQ8_0 || type == DType::kQ6_K || type == DType::kF32;
    case TensorRole::kMatrix: return type == DType::kQ4_0 || type == DType::kF32;
    case TensorRole::kVector: return type == DType::kF32;
  }
  return false;
}

std::string_view accepted_dtypes(TensorRole role) {
  switch (role) {
    case TensorRole::kEmbedding: return "Q8_0, Q6_K or F32 for token_embd";
    case TensorRole::kMatrix: return "Q4_0 or F32 for layer matrices";
    case TensorRole::kVector: return "F32 for norms, scales and rope_freqs";
  }
  return "?";
}

std::vector<ManifestEntry> tensor_manifest(const Config& c) {
  using U = uint64_t;
  const U e = static_cast<U>(c.n_embd);
  const U ff = static_cast<U>(c.n_ff);
  std::vector<ManifestEntry> m;
  m.push_back({"token_embd.weight", {e, static_cast<U>(c.n_vocab)}, TensorRole::kEmbedding, -1});
  m.push_back({"rope_freqs.weight", {static_cast<U>(c.head_dim_full / 2)}, TensorRole::kVector, -1});
  m.push_back({"output_norm.weight", {e}, TensorRole::kVector, -1});
  for (int il = 0; il < c.n_layers; ++il) {
    const bool sliding = c.sliding[static_cast<size_t>(il)];
    const U hd = static_cast<U>(sliding ? c.head_dim_sliding : c.head_dim_full);
    const U q = static_cast<U>(c.n_heads) * hd;
    const U kv = static_cast<U>(sliding ? c.n_kv_heads_sliding : c.n_kv_heads_full) * hd;
    auto add = [&](const char* suffix, std::vector<U> ne, TensorRole role) {
      m.push_back({strprintf("blk.%d.%s.weight", il, suffix), std::move(ne), role, il});
    };
    // The order llama.cpp's converter writes (and gguf_synth.py mirrors).
    add("attn_norm", {e}, TensorRole::kVector);
    add("attn_q", {e, q}, TensorRole::kMatrix);
    add("attn_k", {e, kv}, TensorRole::kMatrix);
    if (sliding) add("attn_v", {e, kv}, TensorRole::kMatrix);  // full layers: V is the K projection
    add("attn_output", {q, e}, TensorRole::kMatrix);
    add("attn_q_norm", {hd}, TensorRole::kVector);
    add("attn_k_norm", {hd}, TensorRole::kVector);
    add("post_attention_norm", {e}, TensorRole::kVector);
    add("layer_output_scale", {1}, TensorRole::kVector);
    add("ffn_norm", {e}, TensorRole::kVector);
    add("ffn_gate", {e, ff}, TensorRole::kMatrix);
    add("ffn_up", {e, ff}, TensorRole::kMatrix);
    add("ffn_down", {ff, e}, TensorRole::kMatrix);
    add("post_ffw_norm", {e}, TensorRole::kVector);
  }
  return m;
}

Result<std::unique_ptr<Model>> load_model(std::unique_ptr<gguf::GgufFile> file) {
  if (!file) return errorf("load_model: no file");
  const gguf::GgufFile& f = *file;
  if (!f.find_kv("general.architecture")) return errorf("key general.architecture missing");
  GEM_ASSIGN_OR_RETURN(std::string_view arch, f.get_string("general.architecture"));
  if (arch == "gemma4-assistant") {
    return errorf("general.architecture is \"gemma4-assistant\": this is a Gemma 4 MTP assistant (drafter), "
                  "not a target model (load_assistant reads it; `gem inspect` describes it)");
  }
  if (arch != "gemma4") {
    return errorf("general.architecture: expected \"gemma4\" (Gemma 4 dense), found \"%.*s\"",
                  static_cast<int>(arch.size()), arch.data());
  }
  auto model = std::make_unique<Model>();
  Config& c = model->config;
  GEM_RETURN_IF_ERROR(read_config(f, &c));
  GEM_RETURN_IF_ERROR(check_tokenizer(f));
  c.n_vocab = kVocabSize;
  GEM_RETURN_IF_ERROR(read_sampling(f, &c));

  std::vector<ManifestEntry> manifest = tensor_manifest(c);
  if (c.profile == Profile::k12B && manifest.size() != k12B.n_tensors) {
    return errorf("internal: 12B manifest has %zu tensors, expected %zu", manifest.size(), k12B.n_tensors);
  }
  if (c.profile == Profile::k31B && manifest.size() != k31B.n_tensors) {
    return errorf("internal: 31B manifest has %zu tensors, expected %zu", manifest.size(), k31B.n_tensors);
  }
  GEM_RETURN_IF_ERROR(check_tensors(f, c, manifest));
  GEM_ASSIGN_OR_RETURN(int active_full, check_rope_freqs(*f.find_tensor("rope_freqs.weight"), c));

  // The layer plan: every per-layer fact the forward needs.
  int n_sliding = 0, n_full = 0;
  for (int il = 0; il < c.n_layers; ++il) {
    LayerPlan p = plan_layer(c, il, active_full);
    p.kv_slot = p.kind == AttnKind::kSliding ? n_sliding++ : n_full++;
    model->plan.push_back(p);
  }

  Weights& w = model->weights;
  w.token_embd = view_of(*f.find_tensor("token_embd.weight"));
  w.output_norm = view_of(*f.find_tensor("output_norm.weight"));
  w.rope_freqs = view_of(*f.find_tensor("rope_freqs.weight"));
  for (int il = 0; il < c.n_layers; ++il) {
    w.layers.push_back(bind_layer(f, il, c.sliding[static_cast<size_t>(il)]));
  }
  model->file = std::move(file);
  return model;
}

Result<std::unique_ptr<Model>> load_model(const std::string& path) {
  auto file = gguf::GgufFile::open(path);
  if (!file.ok()) return file.status();
  auto model = load_model(std::move(file).value());
  if (!model.ok()) return model.status().with_context(path + ": ");
  return model;
}

Result<KvType> parse_kv_type(std::string_view s) {
  if (s == "f32") return KvType::kF32;
  if (s == "f16") return KvType::kF16;
  if (s == "f16-full") return KvType::kF16Full;
  return errorf("KV type \"%.*s\": expected f32, f16 or f16-full", static_cast<int>(s.size()), s.data());
}

std::string_view kv_type_name(KvType t) {
  switch (t) {
    case KvType::kF32: return "f32";
    case KvType::kF16: return "f16";
    case KvType::kF16Full: return "f16-full";
  }
  return "?";
}

uint64_t kv_layer_bytes(const LayerPlan& p, int n_ctx, KvType kv) {
  const bool sliding = p.kind == AttnKind::kSliding;
  // A sliding layer keeps a ring of its window plus the truncation spare, whatever the context.
  const uint64_t slots = static_cast<uint64_t>(sliding ? kv_ring_slots(p.window) : n_ctx);
  uint64_t elem_bytes = 4;
  if (kv == KvType::kF16 || (kv == KvType::kF16Full && !sliding)) elem_bytes = 2;
  return 2 * static_cast<uint64_t>(p.n_kv_heads) * static_cast<uint64_t>(p.head_dim) * slots * elem_bytes;
}

uint64_t kv_cache_bytes(const std::vector<LayerPlan>& plan, int n_ctx, KvType kv, int n_seq) {
  uint64_t total = 0;
  for (const LayerPlan& p : plan) total += kv_layer_bytes(p, n_ctx, kv);
  return total * static_cast<uint64_t>(n_seq);
}

}  // namespace gem::model
