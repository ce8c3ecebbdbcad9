// gem synth: synthetic Gemma 4 dense models. Metadata and tensor order mirror
// shared/tools/gguf_synth.py. The exact fill draws every value from the tensor's own numpy-PCG64
// stream (pcg64.h), exactly as gguf_synth.py does, and quantises it with the same rules, so a
// test model's tensor data equals the reference files llama.cpp's outputs were computed on (the
// tests check its checksum). The fast fill (the 12B/31B) uses a counter-based splitmix64 instead:
// random quant bytes at disk speed. Either way any chunk of a tensor is produced on its own, so
// the bytes do not depend on the writer's chunk size.
#include "model/synth.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>

#include "base/check.h"
#include "base/quant.h"
#include "model/pcg64.h"

namespace gem::model {
namespace {

constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;

// splitmix64's output function: a bijective 64-bit mixer.
inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Key of a named random stream: FNV-1a of "gem-synth/<seed>/<name>", mixed.
uint64_t stream_key(uint64_t seed, std::string_view name) {
  std::string s = "gem-synth/" + std::to_string(seed) + "/" + std::string(name);
  uint64_t h = 0xCBF29CE484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001B3ull;
  return mix64(h);
}

// The i-th 64-bit word of stream `key` (splitmix64 in counter mode).
inline uint64_t stream_word(uint64_t key, uint64_t i) { return mix64(key + (i + 1) * kGolden); }

// A per-file pool of random words for the fast fill, read at a per-tensor offset and XORed
// with a per-tensor key (as gguf_synth.py's FastPool): cheap, and no two tensors look alike.
constexpr uint64_t kPoolWords = uint64_t{1} << 24;  // 128 MiB
struct FastPool {
  std::vector<uint64_t> words;
  explicit FastPool(uint64_t seed) : words(kPoolWords) {
    const uint64_t key = stream_key(seed, "<pool>");
    for (uint64_t i = 0; i < kPoolWords; ++i) words[i] = stream_word(key, i);
  }
};

enum class Kind { kEmbedding, kMatrix, kNorm, kRopeFreqs };

// Everything needed to produce one tensor's bytes from any offset.
struct TensorGen {
  DType type = DType::kF32;
  Kind kind = Kind::kNorm;
  uint64_t key = 0;         // fast fill: splitmix64 stream key
  Pcg64 rng;                // exact fill: the tensor's stream at element 0
  double std = 0.0;         // matrices, embedding: uniform with this std
  double lo = 0.0, hi = 0.0;  // norms: uniform in [lo, hi)
  int rope_active = 0;      // rope_freqs: leading 1.0 entries
  bool fast = false;        // random quant bytes instead of quantised values
  uint64_t pool_start = 0;  // fast: word offset into the pool
  uint64_t pool_key = 0;    // fast: XOR key
  std::shared_ptr<const FastPool> pool;

  // Element i's value from its raw stream word r (gguf_synth.py's exact_chunks, same operations).
  float value(uint64_t i, uint64_t r) const {
    if (kind == Kind::kRopeFreqs) return static_cast<int64_t>(i) < rope_active ? 1.0f : 1e30f;
    const double u = uniform_pm1(r);
    if (kind == Kind::kNorm) return static_cast<float>(lo + (u + 1.0) * 0.5 * (hi - lo));
    return static_cast<float>(u * (std * std::sqrt(3.0)));
  }
  // Word j of block b: from the pool (fast) or the tensor's own stream (exact).
  uint64_t block_word(uint64_t b, uint64_t words_per_block, uint64_t j) const {
    if (fast) return pool->words[(pool_start + b * words_per_block + j) % kPoolWords] ^ pool_key;
    return stream_word(key ^ 0x5157ull, b * words_per_block + j);
  }
};

inline void put_half(uint8_t* dst, float v) {
  const uint16_t h = f32_to_fp16(v);
  std::memcpy(dst, &h, 2);
}

// Q6_K scales are drawn from 16..31; the std of d·sc·(code − 32) with uniform codes and scales.
constexpr int kQ6ScaleLo = 16;
double q6_k_unit_std() {
  double sc2 = 0.0;
  for (int s = kQ6ScaleLo; s < kQ6ScaleLo + 16; ++s) sc2 += s * s;
  sc2 /= 16.0;
  const double code2 = (64.0 * 64.0 - 1.0) / 12.0 + 0.25;  // E[(code − 32)^2], code uniform 0..63
  return std::sqrt(sc2 * code2);
}

// Blocks [b0, b0 + n) of an exact-fill tensor: the values of those elements from the tensor's
// stream (jumped to the first), quantised as gguf_synth.py / llama-quantize do.
void gen_exact_blocks(const TensorGen& g, uint64_t b0, uint64_t n, uint8_t* dst) {
  const DTypeInfo info = dtype_info(static_cast<uint32_t>(g.type)).value();
  const uint64_t epb = info.block_elems;
  Pcg64 r = g.rng;
  if (g.kind != Kind::kRopeFreqs) r.advance(b0 * epb);
  std::vector<float> x(epb);
  for (uint64_t b = b0; b < b0 + n; ++b, dst += info.block_bytes) {
    for (uint64_t k = 0; k < epb; ++k) {
      const uint64_t i = b * epb + k;
      x[k] = g.value(i, g.kind == Kind::kRopeFreqs ? 0 : r.next());
    }
    quantize_row(g.type, x.data(), dst, static_cast<int64_t>(epb));
  }
}

// One block of a fast-fill tensor (random quant bytes with a fixed scale), block index b.
void gen_fast_block(const TensorGen& g, uint64_t b, uint8_t* dst) {
  switch (g.type) {
    case DType::kQ4_0:
    case DType::kQ8_0: {
      const bool q4 = g.type == DType::kQ4_0;
      // Random nibbles / int8 with one scale giving the requested std.
      const double unit = q4 ? std::sqrt((16.0 * 16.0 - 1.0) / 12.0) : std::sqrt((256.0 * 256.0 - 1.0) / 12.0);
      put_half(dst, static_cast<float>(g.std / unit));
      const uint64_t words = q4 ? 2 : 4;
      for (uint64_t j = 0; j < words; ++j) {
        const uint64_t w = g.block_word(b, words, j);
        std::memcpy(dst + 2 + 8 * j, &w, 8);
      }
      return;
    }
    case DType::kQ6_K: {
      // Random 6-bit codes (ql[128], qh[64]), scales 16..31, d giving the requested std.
      BlockQ6_K blk;
      static_assert(sizeof(blk.ql) + sizeof(blk.qh) == 24 * 8);
      uint8_t bits[24 * 8];
      for (uint64_t j = 0; j < 24; ++j) {
        const uint64_t w = g.block_word(b, 26, j);
        std::memcpy(bits + 8 * j, &w, 8);
      }
      std::memcpy(blk.ql, bits, sizeof(blk.ql));
      std::memcpy(blk.qh, bits + sizeof(blk.ql), sizeof(blk.qh));
      for (uint64_t j = 0; j < 2; ++j) {
        const uint64_t w = g.block_word(b, 26, 24 + j);
        for (int k = 0; k < 8; ++k) {
          blk.scales[8 * j + k] = static_cast<int8_t>(kQ6ScaleLo + ((w >> (8 * k)) & 15));
        }
      }
      blk.d = f32_to_fp16(static_cast<float>(g.std / q6_k_unit_std()));
      std::memcpy(dst, &blk, sizeof(blk));
      return;
    }
    default:
      GEM_CHECK(false, "synth: no fast fill for dtype %u", static_cast<uint32_t>(g.type));
  }
}

void gen_blocks(const TensorGen& g, uint64_t b0, uint64_t n, uint8_t* dst) {
  if (!g.fast) return gen_exact_blocks(g, b0, n, dst);
  const uint64_t bb = dtype_info(static_cast<uint32_t>(g.type))->block_bytes;
  for (uint64_t b = b0; b < b0 + n; ++b, dst += bb) gen_fast_block(g, b, dst);
}

gguf::GgufWriter::Filler make_filler(TensorGen g) {
  const uint64_t bb = dtype_info(static_cast<uint32_t>(g.type))->block_bytes;
  return [g = std::move(g), bb](uint64_t off, std::span<uint8_t> out) {
    // Whole blocks straight into `out`; a block cut by either end of the chunk through a copy.
    const uint64_t first = off / bb, last = (off + out.size() + bb - 1) / bb;  // [first, last)
    std::vector<uint8_t> tmp(bb);
    size_t pos = 0;
    uint64_t b = first;
    if (off % bb != 0 || out.size() < bb) {
      gen_blocks(g, b, 1, tmp.data());
      const size_t n = std::min<size_t>(bb - off % bb, out.size());
      std::memcpy(out.data(), tmp.data() + off % bb, n);
      pos = n, ++b;
    }
    const uint64_t whole = (out.size() - pos) / bb;
    if (b < last && whole > 0) {
      gen_blocks(g, b, whole, out.data() + pos);
      pos += whole * bb, b += whole;
    }
    if (pos < out.size()) {
      gen_blocks(g, b, 1, tmp.data());
      std::memcpy(out.data() + pos, tmp.data(), out.size() - pos);
    }
  };
}

std::string json_num(double v) {
  if (v == std::floor(v) && std::fabs(v) < 1e15) return strprintf("%.1f", v);
  return strprintf("%.17g", v);
}

// gem.synth.geometry: the geometry as JSON with sorted keys (gguf_synth.py's --assistant-for
// reads it back).
std::string geometry_json(const SynthGeometry& g) {
  std::vector<std::pair<std::string, std::string>> f = {
      {"embd_in_rms", json_num(g.embd_in_rms)},
      {"embd_std", json_num(g.embd_std())},
      {"head_dim_full", std::to_string(g.head_dim_full)},
      {"head_dim_swa", std::to_string(g.head_dim_swa)},
      {"n_ctx", std::to_string(g.n_ctx)},
      {"n_embd", std::to_string(g.n_embd)},
      {"n_ff", std::to_string(g.n_ff)},
      {"n_head", std::to_string(g.n_head)},
      {"n_head_kv_full", std::to_string(g.n_head_kv_full)},
      {"n_head_kv_swa", std::to_string(g.n_head_kv_swa)},
      {"n_layer", std::to_string(g.n_layer)},
      {"n_swa", std::to_string(g.n_swa)},
      {"n_vocab", std::to_string(g.n_vocab)},
      {"norm_hi", json_num(g.norm_hi)},
      {"norm_lo", json_num(g.norm_lo)},
      {"out_hi", json_num(g.out_hi)},
      {"out_lo", json_num(g.out_lo)},
      {"partial_rotary_full", json_num(g.partial_rotary_full)},
      {"period", std::to_string(g.period)},
      {"post_hi", json_num(g.post_hi)},
      {"post_lo", json_num(g.post_lo)},
      {"qk_gain", json_num(g.qk_gain)},
      {"rms_eps", json_num(g.rms_eps)},
      {"rope_base_full", json_num(g.rope_base_full)},
      {"rope_base_swa", json_num(g.rope_base_swa)},
      {"scale_hi", json_num(g.scale_hi)},
      {"scale_lo", json_num(g.scale_lo)},
      {"softcap", json_num(g.softcap)},
  };
  std::string s = "{";
  for (size_t i = 0; i < f.size(); ++i) {
    if (i) s += ", ";
    s += "\"" + f[i].first + "\": " + f[i].second;
  }
  return s + "}";
}

}  // namespace

std::string layout_label(const SynthOptions& opt) {
  const DType layout_embd = opt.layout == "f32" ? DType::kF32 : DType::kQ8_0;
  const DType layout_mat = opt.layout == "f32" ? DType::kF32 : DType::kQ4_0;
  std::string layout = opt.layout;
  if (opt.embd_type != layout_embd || opt.matrix_type != layout_mat) {
    layout += strprintf("(mat=%s,embd=%s)", std::string(dtype_name(opt.matrix_type)).c_str(),
                        std::string(dtype_name(opt.embd_type)).c_str());
  }
  return layout;
}

namespace {

uint32_t file_type_of(DType matrix_type) {
  // llama_ftype MOSTLY_Q4_0 / MOSTLY_Q8_0 / ALL_F32
  return matrix_type == DType::kQ4_0 ? 2u : matrix_type == DType::kQ8_0 ? 7u : 0u;
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// The generator of every tensor of the manifest. Without a pool every tensor gets the exact fill.
std::vector<std::pair<ManifestEntry, TensorGen>> plan_tensors(const SynthOptions& opt,
                                                              const std::vector<ManifestEntry>& manifest,
                                                              const std::shared_ptr<const FastPool>& pool) {
  const SynthGeometry& g = opt.geometry;
  const int rope_active = static_cast<int>(g.head_dim_full * g.partial_rotary_full / 2);
  std::vector<std::pair<ManifestEntry, TensorGen>> out;
  for (const ManifestEntry& e : manifest) {
    TensorGen t;
    t.key = stream_key(opt.seed, e.name);
    t.rng = Pcg64::for_stream(opt.seed, e.name);
    const std::string_view n = e.name;
    switch (e.role) {
      case TensorRole::kEmbedding:
        t.type = opt.embd_type;
        t.kind = Kind::kEmbedding;
        t.std = g.embd_std();
        break;
      case TensorRole::kMatrix:
        t.type = opt.matrix_type;
        t.kind = Kind::kMatrix;
        t.std = std::pow(static_cast<double>(e.ne[0]), -0.5);  // fan_in ** -0.5, as gguf_synth.py
        break;
      case TensorRole::kVector: {
        t.type = DType::kF32;
        t.kind = Kind::kNorm;
        if (n == "rope_freqs.weight") {
          t.kind = Kind::kRopeFreqs;
          t.rope_active = rope_active;
        } else if (n == "output_norm.weight") {
          t.lo = g.out_lo, t.hi = g.out_hi;
        } else if (ends_with(n, ".attn_norm.weight") || ends_with(n, ".ffn_norm.weight")) {
          t.lo = g.norm_lo, t.hi = g.norm_hi;
        } else if (ends_with(n, ".post_attention_norm.weight") || ends_with(n, ".post_ffw_norm.weight")) {
          t.lo = g.post_lo, t.hi = g.post_hi;
        } else if (ends_with(n, ".layer_output_scale.weight")) {
          t.lo = g.scale_lo, t.hi = g.scale_hi;
        } else {  // attn_q_norm, attn_k_norm: softer attention (the attention scale is 1.0)
          const double qk = g.qk_gain * std::pow(static_cast<double>(e.ne[0]), -0.25);
          t.lo = 0.8 * qk, t.hi = 1.2 * qk;
        }
        break;
      }
    }
    // The fast fill covers the quantised tensors; F32 values are always drawn exactly.
    if (pool && (t.type == DType::kQ4_0 || t.type == DType::kQ8_0 || t.type == DType::kQ6_K)) {
      t.fast = true;
      t.pool = pool;
      t.pool_key = stream_word(t.key, 0);
      t.pool_start = stream_word(t.key, 1) % kPoolWords;
    }
    out.emplace_back(e, std::move(t));
  }
  return out;
}

}  // namespace

double SynthGeometry::embd_std() const { return embd_in_rms / std::sqrt(static_cast<double>(n_embd)); }

Config SynthGeometry::config() const {
  Config c;
  c.n_layers = n_layer;
  c.n_embd = n_embd;
  c.n_ff = n_ff;
  c.n_heads = n_head;
  c.n_vocab = n_vocab;
  c.context_length = n_ctx;
  c.sliding_window = n_swa;
  c.head_dim_sliding = head_dim_swa;
  c.head_dim_full = head_dim_full;
  c.n_kv_heads_sliding = n_head_kv_swa;
  c.n_kv_heads_full = n_head_kv_full;
  c.n_rot_sliding = head_dim_swa;
  c.n_rot_full = head_dim_full;
  c.rope_theta_sliding = static_cast<float>(rope_base_swa);
  c.rope_theta_full = static_cast<float>(rope_base_full);
  c.rms_eps = static_cast<float>(rms_eps);
  c.final_logit_softcap = static_cast<float>(softcap);
  for (int il = 0; il < n_layer; ++il) c.sliding.push_back(il % period != period - 1);
  return c;
}

std::vector<std::string_view> synth_geometry_names() {
  return {"12b", "31b", "tiny", "tiny6", "tiny256", "demo"};
}

Result<SynthGeometry> synth_geometry(std::string_view name) {
  SynthGeometry g;
  g.name = std::string(name);
  auto set = [&g](int n_layer, int n_embd, int n_head, int kv_swa, int hd_swa, int kv_full, int hd_full,
                  int n_ff, int n_swa, int n_ctx) {
    g.n_layer = n_layer;
    g.n_embd = n_embd;
    g.n_head = n_head;
    g.n_head_kv_swa = kv_swa;
    g.head_dim_swa = hd_swa;
    g.n_head_kv_full = kv_full;
    g.head_dim_full = hd_full;
    g.n_ff = n_ff;
    g.n_swa = n_swa;
    g.n_ctx = n_ctx;
  };
  // The geometries of gguf_synth.py (fixtures/README.md "The models"), plus "demo".
  if (name == "12b") {
    set(48, 3840, 16, 8, 256, 1, 512, 15360, 1024, 262144);
  } else if (name == "31b") {
    set(60, 5376, 32, 16, 256, 4, 512, 21504, 1024, 262144);
  } else if (name == "tiny") {
    set(12, 64, 4, 2, 32, 1, 64, 192, 16, 4096);
  } else if (name == "tiny6") {
    set(6, 32, 8, 4, 32, 2, 64, 128, 8, 4096);
  } else if (name == "tiny256") {
    set(6, 256, 4, 2, 64, 1, 128, 512, 8, 4096);
    // Wide and shallow: a smaller embedding and a larger output norm keep the model from only
    // copying its input token (gguf_synth.py's note on tiny256).
    g.embd_in_rms = 0.125;
    g.out_lo = 20.0;
    g.out_hi = 36.0;
  } else if (name == "demo") {
    // A test-class model for CPU demos: tiny256's width with real-looking depth of attention
    // (window 128, context 8192) and a 4x FFN; ~11M layer parameters, fast on any CPU.
    set(6, 256, 4, 2, 64, 1, 128, 1024, 128, 8192);
    g.embd_in_rms = 0.125;
    g.out_lo = 20.0;
    g.out_hi = 36.0;
  } else {
    return errorf("unknown synth profile \"%.*s\": expected 12b, 31b, tiny, tiny6, tiny256 or demo",
                  static_cast<int>(name.size()), name.data());
  }
  return g;
}

Result<std::string> build_synth_model(const SynthOptions& opt, const gguf::GgufFile& vocab,
                                      gguf::GgufWriter* w) {
  const SynthGeometry& g = opt.geometry;
  if (opt.matrix_type != DType::kQ4_0 && opt.matrix_type != DType::kF32) {
    return errorf("synth: matrix type %.*s, expected Q4_0 or F32",
                  static_cast<int>(dtype_name(opt.matrix_type).size()), dtype_name(opt.matrix_type).data());
  }
  if (opt.embd_type != DType::kQ8_0 && opt.embd_type != DType::kQ6_K && opt.embd_type != DType::kF32) {
    return errorf("synth: embedding type %.*s, expected Q8_0, Q6_K or F32",
                  static_cast<int>(dtype_name(opt.embd_type).size()), dtype_name(opt.embd_type).data());
  }
  if (opt.embd_type == DType::kQ6_K && g.n_embd % kQK_K) {
    return errorf("synth: a Q6_K token_embd needs n_embd to be a multiple of 256, %s has %d", g.name.c_str(),
                  g.n_embd);
  }
  // The vocabulary: every tokenizer.* key, verbatim.
  const gguf::KeyValue* tokens = vocab.find_kv("tokenizer.ggml.tokens");
  if (!tokens || tokens->type != gguf::ValueType::kArray ||
      tokens->array_count != static_cast<uint64_t>(g.n_vocab)) {
    return errorf("%s: not a Gemma 4 vocabulary (tokenizer.ggml.tokens with %d tokens expected)",
                  vocab.path().c_str(), g.n_vocab);
  }

  const Config cfg = g.config();
  const std::vector<ManifestEntry> manifest = tensor_manifest(cfg);
  uint64_t n_params = 0;
  for (const ManifestEntry& e : manifest) {
    uint64_t n = 1;
    for (uint64_t d : e.ne) n *= d;
    n_params += n;
  }
  const bool fast = opt.fill == SynthFill::kFast || (opt.fill == SynthFill::kAuto && n_params >= 2000000000ull);
  const std::string fill = fast ? "fast" : "exact";

  const std::string layout = layout_label(opt);
  const std::string name =
      opt.name.empty() ? strprintf("gem-synth-%s-%s-s%llu", g.name.c_str(), opt.layout.c_str(),
                                   static_cast<unsigned long long>(opt.seed))
                       : opt.name;

  // Metadata: gguf_synth.py's model_items, in its order (llama.cpp's converter order).
  std::vector<int32_t> kv_heads;
  std::unique_ptr<bool[]> pattern(new bool[static_cast<size_t>(g.n_layer)]);
  for (int il = 0; il < g.n_layer; ++il) {
    pattern[static_cast<size_t>(il)] = cfg.sliding[static_cast<size_t>(il)];
    kv_heads.push_back(cfg.sliding[static_cast<size_t>(il)] ? g.n_head_kv_swa : g.n_head_kv_full);
  }
  auto u32 = [](int v) { return static_cast<uint32_t>(v); };
  w->add_string("general.architecture", "gemma4");
  w->add_string("general.type", "model");
  w->add_string("general.name", name);
  w->add_u32("gemma4.block_count", u32(g.n_layer));
  w->add_u32("gemma4.context_length", u32(g.n_ctx));
  w->add_u32("gemma4.embedding_length", u32(g.n_embd));
  w->add_u32("gemma4.feed_forward_length", u32(g.n_ff));
  w->add_u32("gemma4.attention.head_count", u32(g.n_head));
  w->add_i32_array("gemma4.attention.head_count_kv", kv_heads);
  w->add_f32("gemma4.rope.freq_base", static_cast<float>(g.rope_base_full));
  w->add_f32("gemma4.rope.freq_base_swa", static_cast<float>(g.rope_base_swa));
  w->add_f32("gemma4.attention.layer_norm_rms_epsilon", static_cast<float>(g.rms_eps));
  w->add_u32("gemma4.attention.key_length", u32(g.head_dim_full));
  w->add_u32("gemma4.attention.value_length", u32(g.head_dim_full));
  w->add_u32("general.file_type", file_type_of(opt.matrix_type));
  w->add_f32("gemma4.final_logit_softcapping", static_cast<float>(g.softcap));
  w->add_u32("gemma4.attention.sliding_window", u32(g.n_swa));
  w->add_u32("gemma4.attention.shared_kv_layers", 0);
  w->add_u32("gemma4.embedding_length_per_layer_input", 0);
  w->add_bool_array("gemma4.attention.sliding_window_pattern",
                    std::span<const bool>(pattern.get(), static_cast<size_t>(g.n_layer)));
  w->add_u32("gemma4.attention.key_length_swa", u32(g.head_dim_swa));
  w->add_u32("gemma4.attention.value_length_swa", u32(g.head_dim_swa));
  w->add_u32("gemma4.rope.dimension_count", u32(g.head_dim_full));
  w->add_u32("gemma4.rope.dimension_count_swa", u32(g.head_dim_swa));
  w->add_u32("general.quantization_version", 2);
  // Provenance of the synthetic file (ignored by loaders).
  w->add_u64("gem.synth.seed", opt.seed);
  w->add_string("gem.synth.layout", layout);
  w->add_string("gem.synth.fill", fill);
  w->add_string("gem.synth.geometry", geometry_json(g));
  for (const gguf::KeyValue& kv : vocab.kvs()) {
    if (kv.key.substr(0, 10) == "tokenizer.") w->add_kv_copy(kv);
  }

  // Tensors, in manifest order, each with its own random stream.
  std::shared_ptr<const FastPool> pool;
  if (fast && !opt.sparse) pool = std::make_shared<FastPool>(opt.seed);
  for (auto& [entry, gen] : plan_tensors(opt, manifest, pool)) {
    w->add_tensor(entry.name, gen.type, entry.ne, make_filler(std::move(gen)));
  }
  return fill;
}

Result<SynthSummary> write_synth_model(const SynthOptions& opt, const gguf::GgufFile& vocab,
                                       const std::string& path,
                                       const std::function<void(uint64_t, uint64_t)>& progress) {
  const auto t0 = std::chrono::steady_clock::now();
  gguf::GgufWriter w;
  GEM_ASSIGN_OR_RETURN(std::string fill, build_synth_model(opt, vocab, &w));
  GEM_RETURN_IF_ERROR(w.write(path, progress, opt.sparse));

  const std::vector<ManifestEntry> manifest = tensor_manifest(opt.geometry.config());
  SynthSummary s;
  s.fill = fill;
  s.n_tensors = manifest.size();
  for (const ManifestEntry& e : manifest) {
    uint64_t n = 1;
    for (uint64_t d : e.ne) n *= d;
    s.n_params += n;
  }
  s.file_bytes = w.file_size();
  if (opt.sparse) {
    // Write the small F32 vectors into the holes so the file validates (rope_freqs values are
    // checked at load). Offsets as the writer lays them out: in order, each padded to 32 bytes.
    const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) return errorf("%s: cannot reopen: %s", path.c_str(), std::strerror(errno));
    uint64_t off = w.data_offset();
    for (auto& [entry, gen] : plan_tensors(opt, manifest, nullptr)) {
      uint64_t n = 1;
      for (uint64_t d : entry.ne) n *= d;
      const uint64_t n_bytes = dtype_row_bytes(*dtype_info(static_cast<uint32_t>(gen.type)), n);
      if (entry.role == TensorRole::kVector) {
        std::vector<uint8_t> bytes(n_bytes);
        make_filler(std::move(gen))(0, bytes);
        if (::pwrite(fd, bytes.data(), bytes.size(), static_cast<off_t>(off)) != static_cast<ssize_t>(n_bytes)) {
          const int err = errno;
          ::close(fd);
          return errorf("%s: cannot write %s: %s", path.c_str(), entry.name.c_str(), std::strerror(err));
        }
      }
      off += (n_bytes + 31) / 32 * 32;
    }
    ::close(fd);
    if (off != s.file_bytes) return errorf("%s: internal: laid out %llu bytes, the writer wrote %llu", path.c_str(),
                                           static_cast<unsigned long long>(off),
                                           static_cast<unsigned long long>(s.file_bytes));
  }
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return s;
}

AssistantGeometry assistant_geometry_for(const SynthGeometry& t) {
  AssistantGeometry a;
  switch (t.n_embd) {
    case 64: a.a_embd = 32, a.a_ff = 128; break;    // tiny
    case 32: a.a_embd = 64, a.a_ff = 128; break;    // tiny6
    case 256: a.a_embd = 64, a.a_ff = 256; break;   // tiny256, demo
    default: a.a_embd = 1024, a.a_ff = 8192; break;  // 12B, 31B
  }
  return a;
}

SynthGeometry geometry_of(const Config& c, std::string name) {
  SynthGeometry g;
  g.name = std::move(name);
  g.n_layer = c.n_layers;
  g.n_embd = c.n_embd;
  g.n_head = c.n_heads;
  g.n_head_kv_swa = c.n_kv_heads_sliding;
  g.head_dim_swa = c.head_dim_sliding;
  g.n_head_kv_full = c.n_kv_heads_full;
  g.head_dim_full = c.head_dim_full;
  g.n_ff = c.n_ff;
  g.n_swa = c.sliding_window;
  g.n_ctx = c.context_length;
  g.n_vocab = c.n_vocab;
  g.rope_base_full = c.rope_theta_full;
  g.rope_base_swa = c.rope_theta_sliding;
  g.rms_eps = c.rms_eps;
  g.softcap = c.final_logit_softcap;
  return g;
}

Result<SynthSummary> write_synth_assistant(const SynthOptions& opt, const AssistantGeometry& a,
                                           const gguf::GgufFile& vocab, const std::string& path,
                                           const std::function<void(uint64_t, uint64_t)>& progress) {
  const auto t0 = std::chrono::steady_clock::now();
  const SynthGeometry& g = opt.geometry;
  if (a.a_embd == g.n_embd) {
    return errorf("synth: an assistant as wide as its target (%d) is refused by llama.cpp "
                  "(embedding_length_out must differ from embedding_length)", g.n_embd);
  }
  const DType mtype = opt.matrix_type, etype = opt.embd_type;
  const int rope_active = static_cast<int>(g.head_dim_full * g.partial_rotary_full / 2);
  auto swa = [&a](int il) { return il != a.a_layer - 1; };

  // Tensors in gguf_synth.py's build_assistant_tensors order.
  struct Item {
    std::string name;
    std::vector<uint64_t> ne;
    TensorGen gen;
  };
  std::vector<Item> items;
  uint64_t n_params = 0;
  auto add = [&](std::string name, std::vector<uint64_t> ne, DType type, Kind kind, double std, double lo,
                 double hi) {
    TensorGen t;
    t.type = type;
    t.kind = kind;
    t.rng = Pcg64::for_stream(opt.seed, "assistant/" + name);
    t.key = stream_key(opt.seed, "assistant/" + name);
    t.std = std, t.lo = lo, t.hi = hi;
    t.rope_active = rope_active;
    uint64_t n = 1;
    for (uint64_t d : ne) n *= d;
    n_params += n;
    items.push_back({std::move(name), std::move(ne), std::move(t)});
  };
  const auto E = static_cast<uint64_t>(a.a_embd), Et = static_cast<uint64_t>(g.n_embd);
  const auto V = static_cast<uint64_t>(g.n_vocab), F = static_cast<uint64_t>(a.a_ff);
  auto inv_sqrt = [](uint64_t n) { return std::pow(static_cast<double>(n), -0.5); };
  add("token_embd.weight", {E, V}, etype, Kind::kEmbedding, a.a_embd_rms / std::sqrt(static_cast<double>(E)), 0, 0);
  add("rope_freqs.weight", {static_cast<uint64_t>(g.head_dim_full / 2)}, DType::kF32, Kind::kRopeFreqs, 0, 0, 0);
  add("output_norm.weight", {E}, DType::kF32, Kind::kNorm, 0, a.a_out_lo, a.a_out_hi);
  add("nextn.pre_projection.weight", {2 * Et, E}, mtype, Kind::kMatrix,
      a.a_pre_gain / std::sqrt(static_cast<double>(2 * Et)), 0, 0);
  add("nextn.post_projection.weight", {E, Et}, mtype, Kind::kMatrix, inv_sqrt(E), 0, 0);
  for (int il = 0; il < a.a_layer; ++il) {
    const int hd = swa(il) ? g.head_dim_swa : g.head_dim_full;
    const auto q = static_cast<uint64_t>(g.n_head * hd);
    const std::string p = "blk." + std::to_string(il) + ".";
    const double qk = g.qk_gain * std::pow(static_cast<double>(hd), -0.25);
    add(p + "attn_norm.weight", {E}, DType::kF32, Kind::kNorm, 0, g.norm_lo, g.norm_hi);
    add(p + "attn_q.weight", {E, q}, mtype, Kind::kMatrix, inv_sqrt(E), 0, 0);
    add(p + "attn_q_norm.weight", {static_cast<uint64_t>(hd)}, DType::kF32, Kind::kNorm, 0, 0.8 * qk, 1.2 * qk);
    add(p + "attn_output.weight", {q, E}, mtype, Kind::kMatrix, inv_sqrt(q), 0, 0);
    add(p + "post_attention_norm.weight", {E}, DType::kF32, Kind::kNorm, 0, a.a_post_lo, a.a_post_hi);
    add(p + "layer_output_scale.weight", {1}, DType::kF32, Kind::kNorm, 0, g.scale_lo, g.scale_hi);
    add(p + "ffn_norm.weight", {E}, DType::kF32, Kind::kNorm, 0, g.norm_lo, g.norm_hi);
    add(p + "ffn_gate.weight", {E, F}, mtype, Kind::kMatrix, inv_sqrt(E), 0, 0);
    add(p + "ffn_up.weight", {E, F}, mtype, Kind::kMatrix, inv_sqrt(E), 0, 0);
    add(p + "ffn_down.weight", {F, E}, mtype, Kind::kMatrix, inv_sqrt(F), 0, 0);
    add(p + "post_ffw_norm.weight", {E}, DType::kF32, Kind::kNorm, 0, a.a_post_lo, a.a_post_hi);
  }
  const bool fast = opt.fill == SynthFill::kFast || (opt.fill == SynthFill::kAuto && n_params >= 2000000000ull);
  std::shared_ptr<const FastPool> pool;
  if (fast) pool = std::make_shared<FastPool>(opt.seed);
  for (Item& it : items) {
    TensorGen& t = it.gen;
    if (pool && (t.type == DType::kQ4_0 || t.type == DType::kQ8_0)) {
      t.fast = true;
      t.pool = pool;
      t.pool_key = stream_word(t.key, 0);
      t.pool_start = stream_word(t.key, 1) % kPoolWords;
    }
  }

  // Metadata: gguf_synth.py's assistant_items (spec §7.2), then provenance and the tokenizer.
  gguf::GgufWriter w;
  const std::string A = "gemma4-assistant";
  auto u32 = [](int v) { return static_cast<uint32_t>(v); };
  std::vector<int32_t> kv_heads;
  std::unique_ptr<bool[]> pattern(new bool[static_cast<size_t>(a.a_layer)]);
  for (int il = 0; il < a.a_layer; ++il) {
    pattern[static_cast<size_t>(il)] = swa(il);
    kv_heads.push_back(swa(il) ? g.n_head_kv_swa : g.n_head_kv_full);
  }
  const std::string name = opt.name.empty() ? strprintf("gem-synth-%s-assistant-s%llu", g.name.c_str(),
                                                        static_cast<unsigned long long>(opt.seed))
                                            : opt.name;
  w.add_string("general.architecture", A);
  w.add_string("general.type", "model");
  w.add_string("general.name", name);
  w.add_u32(A + ".block_count", u32(a.a_layer));
  w.add_u32(A + ".context_length", u32(g.n_ctx));
  w.add_u32(A + ".embedding_length", u32(a.a_embd));
  w.add_u32(A + ".embedding_length_out", u32(g.n_embd));
  w.add_u32(A + ".feed_forward_length", u32(a.a_ff));
  w.add_u32(A + ".attention.head_count", u32(g.n_head));
  w.add_i32_array(A + ".attention.head_count_kv", kv_heads);
  w.add_f32(A + ".rope.freq_base", static_cast<float>(g.rope_base_full));
  w.add_f32(A + ".rope.freq_base_swa", static_cast<float>(g.rope_base_swa));
  w.add_f32(A + ".attention.layer_norm_rms_epsilon", static_cast<float>(g.rms_eps));
  w.add_u32(A + ".attention.key_length", u32(g.head_dim_full));
  w.add_u32(A + ".attention.value_length", u32(g.head_dim_full));
  w.add_u32("general.file_type", file_type_of(mtype));
  w.add_u32(A + ".attention.sliding_window", u32(g.n_swa));
  w.add_u32(A + ".attention.shared_kv_layers", u32(a.a_layer));
  w.add_u32(A + ".embedding_length_per_layer_input", 0);
  w.add_bool_array(A + ".attention.sliding_window_pattern",
                   std::span<const bool>(pattern.get(), static_cast<size_t>(a.a_layer)));
  w.add_u32(A + ".attention.key_length_swa", u32(g.head_dim_swa));
  w.add_u32(A + ".attention.value_length_swa", u32(g.head_dim_swa));
  w.add_u32(A + ".rope.dimension_count", u32(g.head_dim_full));
  w.add_u32(A + ".rope.dimension_count_swa", u32(g.head_dim_swa));
  w.add_u32(A + ".nextn_predict_layers", u32(a.a_layer));
  w.add_u32("general.quantization_version", 2);
  w.add_u64("gem.synth.seed", opt.seed);
  w.add_string("gem.synth.layout", layout_label(opt));
  w.add_string("gem.synth.fill", fast ? "fast" : "exact");
  w.add_string("gem.synth.geometry", geometry_json(g));
  for (const gguf::KeyValue& kv : vocab.kvs()) {
    if (kv.key.substr(0, 10) == "tokenizer.") w.add_kv_copy(kv);
  }
  for (Item& it : items) w.add_tensor(it.name, it.gen.type, it.ne, make_filler(std::move(it.gen)));
  GEM_RETURN_IF_ERROR(w.write(path, progress, false));

  SynthSummary s;
  s.fill = fast ? "fast" : "exact";
  s.n_tensors = items.size();
  s.n_params = n_params;
  s.file_bytes = w.file_size();
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return s;
}

}  // namespace gem::model
