// load_assistant: checks a parsed GGUF against the gemma4-assistant contract (spec §7.2, §7.3,
// Appendix A), fills AssistantConfig and its plan, binds zero-copy views; check_pairing holds it
// against the target it drafts for.
#include "model/assistant.h"

#include "model/load_util.h"

#include <cstring>
#include <set>

namespace gem::model {
namespace {

constexpr int kVocabSize = 262144;
constexpr const char* kArch = "gemma4-assistant";

std::string akey(std::string_view suffix) { return std::string(kArch) + "." + std::string(suffix); }

Result<int> read_u32(const gguf::GgufFile& f, std::string_view suffix) {
  const std::string key = akey(suffix);
  if (!f.find_kv(key)) return errorf("key %s missing", key.c_str());
  GEM_ASSIGN_OR_RETURN(int64_t v, f.get_i64(key));
  if (v < 0 || v > (int64_t{1} << 30)) {
    return errorf("key %s: value %lld out of range", key.c_str(), static_cast<long long>(v));
  }
  return static_cast<int>(v);
}

Result<int> read_u32_or(const gguf::GgufFile& f, std::string_view suffix, int dflt) {
  if (!f.find_kv(akey(suffix))) return dflt;
  return read_u32(f, suffix);
}

Result<float> read_f32(const gguf::GgufFile& f, std::string_view suffix) {
  const std::string key = akey(suffix);
  if (!f.find_kv(key)) return errorf("key %s missing", key.c_str());
  return f.get_f32(key);
}

// Matrices of an assistant: the target loader's types plus Q8_0, the type of most public
// assistant files (spec §7.3); all three are types the CPU matmul runs.
bool matrix_dtype_accepted(DType t) { return t == DType::kQ4_0 || t == DType::kQ8_0 || t == DType::kF32; }

// The values the published assistants carry (spec §7.2), chosen by the target width they pair
// with; narrower files are test assistants, held to the structural rules alone.
struct AssistantProfile {
  Profile profile;
  int n_embd_out, n_layers, n_embd, n_ff, n_heads, n_kv_heads_sliding, n_kv_heads_full;
  int head_dim_sliding, head_dim_full, sliding_window;
};
constexpr AssistantProfile k12B{Profile::k12B, 3840, 4, 1024, 8192, 16, 8, 1, 256, 512, 1024};
constexpr AssistantProfile k31B{Profile::k31B, 5376, 4, 1024, 8192, 32, 16, 4, 256, 512, 1024};

Status check_profile(AssistantConfig* c) {
  const AssistantProfile* p = nullptr;
  if (c->n_embd_out == k12B.n_embd_out) {
    p = &k12B;
  } else if (c->n_embd_out == k31B.n_embd_out) {
    p = &k31B;
  } else if (c->n_embd_out >= k12B.n_embd_out) {
    return errorf("key %s: %d matches neither the 12B (%d) nor the 31B (%d) target, and test assistants must "
                  "pair with targets narrower than %d", akey("embedding_length_out").c_str(), c->n_embd_out,
                  k12B.n_embd_out, k31B.n_embd_out, k12B.n_embd_out);
  }
  c->profile = p ? p->profile : Profile::kTest;
  if (!p) return ok_status();
  const std::string name = std::string(profile_name(p->profile)) + " assistant";
  auto eq = [&](const char* key, int expected, int actual) -> Status {
    if (expected == actual) return ok_status();
    return errorf("key %s: the %s profile expects %d, found %d", akey(key).c_str(), name.c_str(), expected,
                  actual);
  };
  GEM_RETURN_IF_ERROR(eq("block_count", p->n_layers, c->n_layers));
  GEM_RETURN_IF_ERROR(eq("embedding_length", p->n_embd, c->n_embd));
  GEM_RETURN_IF_ERROR(eq("feed_forward_length", p->n_ff, c->n_ff));
  GEM_RETURN_IF_ERROR(eq("attention.head_count", p->n_heads, c->n_heads));
  GEM_RETURN_IF_ERROR(eq("attention.head_count_kv (sliding layers)", p->n_kv_heads_sliding, c->n_kv_heads_sliding));
  GEM_RETURN_IF_ERROR(eq("attention.head_count_kv (full layer)", p->n_kv_heads_full, c->n_kv_heads_full));
  GEM_RETURN_IF_ERROR(eq("attention.key_length_swa", p->head_dim_sliding, c->head_dim_sliding));
  GEM_RETURN_IF_ERROR(eq("attention.key_length", p->head_dim_full, c->head_dim_full));
  GEM_RETURN_IF_ERROR(eq("attention.sliding_window", p->sliding_window, c->sliding_window));
  return ok_status();
}

Status read_config(const gguf::GgufFile& f, AssistantConfig* c) {
  GEM_ASSIGN_OR_RETURN(c->n_layers, read_u32(f, "block_count"));
  if (c->n_layers < 2 || c->n_layers > 64) {
    return errorf("key %s: %d layers, expected 2..64 (4 in every published assistant)",
                  akey("block_count").c_str(), c->n_layers);
  }
  GEM_ASSIGN_OR_RETURN(int nextn, read_u32(f, "nextn_predict_layers"));
  if (nextn != c->n_layers) {
    return errorf("key %s: expected %d (= block_count: every layer is a draft layer), found %d",
                  akey("nextn_predict_layers").c_str(), c->n_layers, nextn);
  }
  GEM_ASSIGN_OR_RETURN(c->n_embd, read_u32(f, "embedding_length"));
  GEM_ASSIGN_OR_RETURN(c->n_embd_out, read_u32(f, "embedding_length_out"));
  GEM_ASSIGN_OR_RETURN(c->n_ff, read_u32(f, "feed_forward_length"));
  GEM_ASSIGN_OR_RETURN(c->n_heads, read_u32(f, "attention.head_count"));
  GEM_ASSIGN_OR_RETURN(c->context_length, read_u32(f, "context_length"));
  GEM_ASSIGN_OR_RETURN(c->sliding_window, read_u32(f, "attention.sliding_window"));
  GEM_ASSIGN_OR_RETURN(c->head_dim_full, read_u32(f, "attention.key_length"));
  GEM_ASSIGN_OR_RETURN(c->head_dim_sliding, read_u32(f, "attention.key_length_swa"));
  GEM_ASSIGN_OR_RETURN(int v_full, read_u32_or(f, "attention.value_length", c->head_dim_full));
  GEM_ASSIGN_OR_RETURN(int v_sliding, read_u32_or(f, "attention.value_length_swa", c->head_dim_sliding));
  GEM_ASSIGN_OR_RETURN(c->n_rot_full, read_u32_or(f, "rope.dimension_count", c->head_dim_full));
  GEM_ASSIGN_OR_RETURN(c->n_rot_sliding, read_u32_or(f, "rope.dimension_count_swa", c->head_dim_sliding));
  GEM_ASSIGN_OR_RETURN(c->rope_theta_full, read_f32(f, "rope.freq_base"));
  GEM_ASSIGN_OR_RETURN(c->rope_theta_sliding, read_f32(f, "rope.freq_base_swa"));
  GEM_ASSIGN_OR_RETURN(c->rms_eps, read_f32(f, "attention.layer_norm_rms_epsilon"));
  GEM_ASSIGN_OR_RETURN(int per_layer_input, read_u32_or(f, "embedding_length_per_layer_input", 0));
  if (per_layer_input != 0) {
    return errorf("key %s: expected 0, found %d", akey("embedding_length_per_layer_input").c_str(),
                  per_layer_input);
  }
  if (c->n_embd <= 0 || c->n_embd_out <= 0 || c->n_ff <= 0 || c->n_heads <= 0 || c->sliding_window <= 0) {
    return errorf("keys %s.embedding_length/embedding_length_out/feed_forward_length/attention.head_count/"
                  "attention.sliding_window must be positive, found %d/%d/%d/%d/%d", kArch, c->n_embd,
                  c->n_embd_out, c->n_ff, c->n_heads, c->sliding_window);
  }
  if (c->n_embd == c->n_embd_out) {
    return errorf("key %s: %d, equal to embedding_length; an assistant projects from and back to its "
                  "target's width, which must differ from its own (llama.cpp refuses equal widths)",
                  akey("embedding_length_out").c_str(), c->n_embd_out);
  }
  if (v_full != c->head_dim_full || v_sliding != c->head_dim_sliding) {
    return errorf("keys %s.attention.value_length/_swa (%d/%d) must equal key_length/_swa (%d/%d)", kArch,
                  v_full, v_sliding, c->head_dim_full, c->head_dim_sliding);
  }
  if (c->head_dim_full <= 0 || c->head_dim_full % 8 || c->head_dim_sliding <= 0 || c->head_dim_sliding % 2) {
    return errorf("keys %s.attention.key_length/_swa: %d/%d, expected a multiple of 8 (full) and an even "
                  "width (sliding)", kArch, c->head_dim_full, c->head_dim_sliding);
  }
  if (c->n_rot_full != c->head_dim_full || c->n_rot_sliding != c->head_dim_sliding) {
    return errorf("keys %s.rope.dimension_count/_swa: %d/%d, expected the whole head (%d/%d)", kArch,
                  c->n_rot_full, c->n_rot_sliding, c->head_dim_full, c->head_dim_sliding);
  }
  if (!(c->rms_eps > 0.0f) || !(c->rope_theta_full > 0.0f) || !(c->rope_theta_sliding > 0.0f)) {
    return errorf("keys %s.*: rms eps %g and rope bases %g/%g must be positive", kArch, c->rms_eps,
                  c->rope_theta_full, c->rope_theta_sliding);
  }

  // The pattern: sliding layers, then one full layer last (S,S,S,F).
  const std::string pattern_key = akey("attention.sliding_window_pattern");
  const gguf::KeyValue* pkv = f.find_kv(pattern_key);
  if (!pkv) return errorf("key %s missing", pattern_key.c_str());
  if (pkv->type != gguf::ValueType::kArray || pkv->array_type != gguf::ValueType::kBool) {
    return errorf("key %s: expected an array of bool", pattern_key.c_str());
  }
  GEM_ASSIGN_OR_RETURN(c->sliding, f.get_bool_array(pattern_key));
  if (static_cast<int>(c->sliding.size()) != c->n_layers) {
    return errorf("key %s: %zu entries, expected one per layer (block_count %d)", pattern_key.c_str(),
                  c->sliding.size(), c->n_layers);
  }
  for (int i = 0; i < c->n_layers; ++i) {
    const bool want = i != c->n_layers - 1;
    if (c->sliding[static_cast<size_t>(i)] != want) {
      return errorf("key %s: layer %d is %s, expected %s (sliding layers, then one full layer last)",
                    pattern_key.c_str(), i, want ? "full" : "sliding", want ? "sliding" : "full");
    }
  }

  // head_count_kv: a scalar or one per layer; one value per kind.
  const std::string kv_key = akey("attention.head_count_kv");
  const gguf::KeyValue* kkv = f.find_kv(kv_key);
  if (!kkv) return errorf("key %s missing", kv_key.c_str());
  std::vector<int64_t> kv;
  if (kkv->type == gguf::ValueType::kArray) {
    GEM_ASSIGN_OR_RETURN(kv, f.get_int_array(kv_key));
    if (static_cast<int>(kv.size()) != c->n_layers) {
      return errorf("key %s: %zu values, expected one per layer (block_count %d)", kv_key.c_str(), kv.size(),
                    c->n_layers);
    }
  } else {
    GEM_ASSIGN_OR_RETURN(int v, read_u32(f, "attention.head_count_kv"));
    kv.assign(static_cast<size_t>(c->n_layers), v);
  }
  c->n_kv_heads_sliding = static_cast<int>(kv.front());
  c->n_kv_heads_full = static_cast<int>(kv.back());
  for (int i = 0; i < c->n_layers; ++i) {
    const bool s = c->sliding[static_cast<size_t>(i)];
    const int64_t want = s ? c->n_kv_heads_sliding : c->n_kv_heads_full;
    if (kv[static_cast<size_t>(i)] != want) {
      return errorf("key %s: layer %d has %lld, the other %s layers %lld", kv_key.c_str(), i,
                    static_cast<long long>(kv[static_cast<size_t>(i)]), s ? "sliding" : "full",
                    static_cast<long long>(want));
    }
  }
  if (c->n_kv_heads_full <= 0 || c->n_kv_heads_sliding <= 0 || c->n_heads % c->n_kv_heads_full ||
      c->n_heads % c->n_kv_heads_sliding) {
    return errorf("key %s: %d (sliding) / %d (full) KV heads must divide head_count %d", kv_key.c_str(),
                  c->n_kv_heads_sliding, c->n_kv_heads_full, c->n_heads);
  }
  return check_profile(c);
}

Status check_tensors(const gguf::GgufFile& f, const std::vector<ManifestEntry>& manifest) {
  std::set<std::string_view> expected;
  for (const ManifestEntry& e : manifest) {
    expected.insert(e.name);
    const gguf::TensorInfo* t = f.find_tensor(e.name);
    if (!t) return errorf("tensor %s missing", e.name.c_str());
    const bool matrix = e.role == TensorRole::kMatrix;
    GEM_RETURN_IF_ERROR(check_entry(
        *t, e, matrix ? matrix_dtype_accepted(t->type) : dtype_accepted(e.role, t->type),
        matrix ? std::string_view("Q4_0, Q8_0 or F32 for assistant matrices") : accepted_dtypes(e.role)));
  }
  for (const gguf::TensorInfo& t : f.tensors()) {
    if (expected.count(t.name)) continue;
    return errorf("unexpected tensor %.*s: not part of the gemma4-assistant contract (an assistant has Q "
                  "and O projections only, no attn_k/attn_v/attn_k_norm; file has %zu tensors, expected %zu)",
                  static_cast<int>(t.name.size()), t.name.data(), f.tensors().size(), manifest.size());
  }
  if (f.tensors().size() != manifest.size()) {
    return errorf("file has %zu tensors, expected %zu", f.tensors().size(), manifest.size());
  }
  return ok_status();
}

// rope_freqs: 1.0 for the first head_dim_full/8 entries, >= 1e29 after (Appendix A.4).
Status check_rope_freqs(const gguf::TensorInfo& t, const AssistantConfig& c) {
  const int n = c.head_dim_full / 2;
  const int want_active = c.head_dim_full / 8;
  std::vector<float> v(static_cast<size_t>(n));
  std::memcpy(v.data(), t.data, v.size() * sizeof(float));
  for (int i = 0; i < n; ++i) {
    const float x = v[static_cast<size_t>(i)];
    if (i < want_active ? x != 1.0f : !(x >= 1e29f)) {
      return errorf("tensor rope_freqs.weight: entry %d is %g, expected 1.0 for the first %d entries and "
                    ">= 1e29 after (proportional RoPE)", i, x, want_active);
    }
  }
  return ok_status();
}

}  // namespace

std::vector<ManifestEntry> assistant_manifest(const AssistantConfig& c) {
  using U = uint64_t;
  const U e = static_cast<U>(c.n_embd), eo = static_cast<U>(c.n_embd_out), ff = static_cast<U>(c.n_ff);
  std::vector<ManifestEntry> m;
  m.push_back({"token_embd.weight", {e, static_cast<U>(c.n_vocab)}, TensorRole::kEmbedding, -1});
  m.push_back({"rope_freqs.weight", {static_cast<U>(c.head_dim_full / 2)}, TensorRole::kVector, -1});
  m.push_back({"output_norm.weight", {e}, TensorRole::kVector, -1});
  m.push_back({"nextn.pre_projection.weight", {2 * eo, e}, TensorRole::kMatrix, -1});
  m.push_back({"nextn.post_projection.weight", {e, eo}, TensorRole::kMatrix, -1});
  for (int il = 0; il < c.n_layers; ++il) {
    const bool sliding = c.sliding[static_cast<size_t>(il)];
    const U hd = static_cast<U>(sliding ? c.head_dim_sliding : c.head_dim_full);
    const U q = static_cast<U>(c.n_heads) * hd;
    auto add = [&](const char* suffix, std::vector<U> ne, TensorRole role) {
      m.push_back({strprintf("blk.%d.%s.weight", il, suffix), std::move(ne), role, il});
    };
    add("attn_norm", {e}, TensorRole::kVector);
    add("attn_q", {e, q}, TensorRole::kMatrix);
    add("attn_q_norm", {hd}, TensorRole::kVector);
    add("attn_output", {q, e}, TensorRole::kMatrix);
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

bool is_assistant_file(const gguf::GgufFile& f) {
  if (!f.find_kv("general.architecture")) return false;
  auto arch = f.get_string("general.architecture");
  return arch.ok() && *arch == kArch;
}

Result<std::unique_ptr<Assistant>> load_assistant(std::unique_ptr<gguf::GgufFile> file) {
  if (!file) return errorf("load_assistant: no file");
  const gguf::GgufFile& f = *file;
  if (!f.find_kv("general.architecture")) return errorf("key general.architecture missing");
  GEM_ASSIGN_OR_RETURN(std::string_view arch, f.get_string("general.architecture"));
  if (arch != kArch) {
    return errorf("general.architecture: expected \"%s\" (a Gemma 4 MTP assistant), found \"%.*s\"", kArch,
                  static_cast<int>(arch.size()), arch.data());
  }
  auto a = std::make_unique<Assistant>();
  AssistantConfig& c = a->config;
  GEM_RETURN_IF_ERROR(read_config(f, &c));
  GEM_RETURN_IF_ERROR(check_tokenizer(f));
  c.n_vocab = kVocabSize;
  GEM_RETURN_IF_ERROR(check_tensors(f, assistant_manifest(c)));
  GEM_RETURN_IF_ERROR(check_rope_freqs(*f.find_tensor("rope_freqs.weight"), c));

  for (int il = 0; il < c.n_layers; ++il) a->plan.push_back(plan_layer(c, il, c.head_dim_full / 8));

  AssistantWeights& w = a->weights;
  auto get = [&](const std::string& name) { return view_of(*f.find_tensor(name)); };
  w.token_embd = get("token_embd.weight");
  w.rope_freqs = get("rope_freqs.weight");
  w.output_norm = get("output_norm.weight");
  w.pre_projection = get("nextn.pre_projection.weight");
  w.post_projection = get("nextn.post_projection.weight");
  for (int il = 0; il < c.n_layers; ++il) {
    auto l = [&](const char* suffix) { return get(strprintf("blk.%d.%s.weight", il, suffix)); };
    AssistantLayerWeights lw;
    lw.attn_norm = l("attn_norm");
    lw.attn_q = l("attn_q");
    lw.attn_q_norm = l("attn_q_norm");
    lw.attn_output = l("attn_output");
    lw.post_attention_norm = l("post_attention_norm");
    lw.layer_output_scale = l("layer_output_scale");
    lw.ffn_norm = l("ffn_norm");
    lw.ffn_gate = l("ffn_gate");
    lw.ffn_up = l("ffn_up");
    lw.ffn_down = l("ffn_down");
    lw.post_ffw_norm = l("post_ffw_norm");
    w.layers.push_back(lw);
  }
  a->file = std::move(file);
  return a;
}

Result<std::unique_ptr<Assistant>> load_assistant(const std::string& path) {
  auto file = gguf::GgufFile::open(path);
  if (!file.ok()) return file.status();
  auto a = load_assistant(std::move(file).value());
  if (!a.ok()) return a.status().with_context(path + ": ");
  return a;
}

Status check_pairing(const Assistant& assistant, const Model& target) {
  const AssistantConfig& a = assistant.config;
  const Config& t = target.config;
  auto eq = [](const char* key, const char* what, long long expected, long long actual) -> Status {
    if (expected == actual) return ok_status();
    return errorf("assistant key %s.%s: expected %lld (the target's %s), found %lld", kArch, key, expected, what,
                  actual);
  };
  GEM_RETURN_IF_ERROR(eq("embedding_length_out", "embedding_length", t.n_embd, a.n_embd_out));
  GEM_RETURN_IF_ERROR(eq("attention.head_count", "head_count", t.n_heads, a.n_heads));
  GEM_RETURN_IF_ERROR(eq("attention.key_length_swa", "sliding head width", t.head_dim_sliding, a.head_dim_sliding));
  GEM_RETURN_IF_ERROR(eq("attention.key_length", "full head width", t.head_dim_full, a.head_dim_full));
  GEM_RETURN_IF_ERROR(eq("attention.head_count_kv (sliding layers)", "sliding KV heads", t.n_kv_heads_sliding,
                         a.n_kv_heads_sliding));
  GEM_RETURN_IF_ERROR(eq("attention.head_count_kv (full layer)", "full KV heads", t.n_kv_heads_full,
                         a.n_kv_heads_full));
  GEM_RETURN_IF_ERROR(eq("attention.sliding_window", "sliding_window", t.sliding_window, a.sliding_window));
  GEM_RETURN_IF_ERROR(eq("vocabulary size", "vocabulary size", t.n_vocab, a.n_vocab));
  if (a.rope_theta_sliding != t.rope_theta_sliding || a.rope_theta_full != t.rope_theta_full) {
    return errorf("assistant keys %s.rope.freq_base_swa/freq_base: %g/%g, expected the target's %g/%g", kArch,
                  a.rope_theta_sliding, a.rope_theta_full, t.rope_theta_sliding, t.rope_theta_full);
  }
  // The layers it reads: the target's last sliding (N−2) and last full (N−1) layers.
  const int n = t.n_layers;
  if (n < 2) return errorf("target has %d layer(s); an assistant reads layers N−2 and N−1", n);
  const int ls = assistant_target_layer(true, n), lf = assistant_target_layer(false, n);
  if (!t.sliding[static_cast<size_t>(ls)]) {
    return errorf("target layer %d (N−2) is a full-attention layer; the assistant's sliding layers read it "
                  "and need a sliding one", ls);
  }
  if (t.sliding[static_cast<size_t>(lf)]) {
    return errorf("target layer %d (N−1) is a sliding layer; the assistant's full layer reads it and needs a "
                  "full one", lf);
  }
  return ok_status();
}

}  // namespace gem::model
