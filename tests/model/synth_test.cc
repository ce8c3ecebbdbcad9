// gem synth's writer: the files load as the intended profile, mirror the fixtures' key and tensor
// tables (gguf_synth.py's structure), are deterministic per seed, and their random weights have
// the documented scales in every fill (exact F32, exact Q4_0, fast Q4_0, Q6_K embedding).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "common/test_util.h"
#include "model/model.h"
#include "model/model_test_util.h"
#include "model/synth.h"

namespace gem::model {
namespace {

struct Written {
  std::string path;
  std::unique_ptr<Model> model;
};

Written synth(const std::string& profile, const std::string& tag, uint64_t seed,
              const std::function<void(SynthOptions&)>& tweak = {}) {
  auto g = synth_geometry(profile);
  EXPECT_TRUE(g.ok()) << g.message();
  SynthOptions opt;
  opt.geometry = *g;
  opt.seed = seed;
  if (tweak) tweak(opt);
  const gguf::GgufFile* vocab = test::shared_vocab();
  EXPECT_TRUE(vocab);
  Written w;
  w.path = test::temp_dir() + "/synth-" + tag + ".gguf";
  auto s = write_synth_model(opt, *vocab, w.path);
  EXPECT_TRUE(s.ok()) << s.message();
  auto m = load_model(w.path);
  EXPECT_TRUE(m.ok()) << m.message();
  if (m.ok()) w.model = std::move(m).value();
  return w;
}

// Dequantisation written here from spec §1, independent of gem's kernels.
std::vector<float> dequant(const TensorView& t, size_t max_values) {
  std::vector<float> out;
  const uint64_t n = std::min<uint64_t>(static_cast<uint64_t>(t.rows * t.cols), max_values);
  if (t.type == DType::kF32) {
    out.resize(n);
    std::memcpy(out.data(), t.data, n * 4);
  } else if (t.type == DType::kQ4_0 || t.type == DType::kQ8_0) {
    const bool q4 = t.type == DType::kQ4_0;
    const size_t bb = q4 ? 18 : 34;
    for (uint64_t b = 0; b * 32 < n; ++b) {
      const uint8_t* blk = t.data + b * bb;
      uint16_t h;
      std::memcpy(&h, blk, 2);
      const float d = fp16_to_f32(h);
      for (int j = 0; j < 32; ++j) {
        int q = q4 ? ((j < 16 ? blk[2 + j] & 15 : blk[2 + j - 16] >> 4) - 8) : static_cast<int8_t>(blk[2 + j]);
        out.push_back(static_cast<float>(q) * d);
      }
    }
  } else if (t.type == DType::kQ6_K) {
    for (uint64_t b = 0; b * 256 < n; ++b) {
      const uint8_t* blk = t.data + b * 210;
      const uint8_t* ql0 = blk;
      const uint8_t* qh0 = blk + 128;
      const int8_t* sc0 = reinterpret_cast<const int8_t*>(blk + 192);
      uint16_t h;
      std::memcpy(&h, blk + 208, 2);
      const float d = fp16_to_f32(h);
      float v[256];
      for (int half = 0; half < 2; ++half) {
        const uint8_t* ql = ql0 + 64 * half;
        const uint8_t* qh = qh0 + 32 * half;
        const int8_t* sc = sc0 + 8 * half;
        for (int l = 0; l < 32; ++l) {
          const int s = l / 16;
          v[128 * half + l] = d * sc[s + 0] * (((ql[l] & 15) | (((qh[l] >> 0) & 3) << 4)) - 32);
          v[128 * half + l + 32] = d * sc[s + 2] * (((ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4)) - 32);
          v[128 * half + l + 64] = d * sc[s + 4] * (((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
          v[128 * half + l + 96] = d * sc[s + 6] * (((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
        }
      }
      out.insert(out.end(), v, v + 256);
    }
  }
  out.resize(std::min<size_t>(out.size(), n));
  return out;
}

double rms(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += static_cast<double>(x) * x;
  return std::sqrt(s / static_cast<double>(v.size()));
}

TEST(Synth, TinyMirrorsTheFixtureTables) {
  GEM_REQUIRE_FIXTURE(test::fixture("tiny-q4_0.gguf"));
  Written w = synth("tiny", "mirror", 1);
  ASSERT_TRUE(w.model);
  auto fx = gguf::GgufFile::open(test::fixture("tiny-q4_0.gguf"));
  ASSERT_TRUE(fx.ok());
  const gguf::GgufFile& a = *w.model->file;
  const gguf::GgufFile& b = **fx;
  // Same keys, order and types; same values except the name and our provenance strings.
  ASSERT_EQ(a.kvs().size(), b.kvs().size());
  for (size_t i = 0; i < a.kvs().size(); ++i) {
    const gguf::KeyValue& x = a.kvs()[i];
    const gguf::KeyValue& y = b.kvs()[i];
    EXPECT_EQ(x.key, y.key) << i;
    EXPECT_EQ(x.type, y.type) << x.key;
    if (x.key == "general.name" || x.key.substr(0, 10) == "gem.synth.") continue;
    EXPECT_EQ(x.u64, y.u64) << x.key;
    EXPECT_EQ(x.f64, y.f64) << x.key;
    EXPECT_EQ(x.str, y.str) << x.key;
    EXPECT_EQ(x.array_count, y.array_count) << x.key;
    if (x.type == gguf::ValueType::kArray && x.array_type != gguf::ValueType::kString) {
      EXPECT_EQ(std::memcmp(x.array_data, y.array_data, x.array_count * gguf::value_type_size(x.array_type)), 0)
          << x.key;
    }
    if (x.type == gguf::ValueType::kArray && x.array_type == gguf::ValueType::kString) {
      EXPECT_EQ(x.array_strings, y.array_strings) << x.key;
    }
  }
  // Same tensor table: names, order, types, shapes, offsets.
  ASSERT_EQ(a.tensors().size(), b.tensors().size());
  for (size_t i = 0; i < a.tensors().size(); ++i) {
    const gguf::TensorInfo& x = a.tensors()[i];
    const gguf::TensorInfo& y = b.tensors()[i];
    EXPECT_EQ(x.name, y.name);
    EXPECT_EQ(x.type, y.type) << x.name;
    EXPECT_EQ(x.n_dims, y.n_dims) << x.name;
    EXPECT_EQ(std::memcmp(x.ne, y.ne, sizeof(x.ne)), 0) << x.name;
    EXPECT_EQ(x.offset, y.offset) << x.name;
  }
  // The geometry JSON names every field gguf_synth.py's --assistant-for reads back.
  auto geo = a.get_string("gem.synth.geometry");
  ASSERT_TRUE(geo.ok());
  for (const char* k : {"\"n_layer\": 12", "\"n_embd\": 64", "\"n_head\": 4", "\"n_ff\": 192", "\"period\": 6",
                        "\"head_dim_full\": 64", "\"n_swa\": 16"}) {
    EXPECT_NE(geo->find(k), std::string_view::npos) << k << " in " << *geo;
  }
}

TEST(Synth, TinyLoadsWithTheFixturePlan) {
  Written w = synth("tiny", "plan", 1);
  ASSERT_TRUE(w.model);
  EXPECT_EQ(w.model->config.profile, Profile::kTest);
  ASSERT_EQ(w.model->plan.size(), 12u);
  for (const LayerPlan& p : w.model->plan) {
    EXPECT_EQ(p.kind == AttnKind::kFull, p.layer == 5 || p.layer == 11) << p.layer;
  }
  EXPECT_EQ(w.model->weights.token_embd.type, DType::kQ8_0);
  EXPECT_EQ(w.model->weights.layers[0].attn_q.type, DType::kQ4_0);
}

TEST(Synth, DeterministicPerSeed) {
  Written a = synth("tiny", "seed1a", 1);
  Written b = synth("tiny", "seed1b", 1);
  Written c = synth("tiny", "seed2", 2);
  ASSERT_TRUE(a.model && b.model && c.model);
  EXPECT_EQ(test::read_file(a.path), test::read_file(b.path));
  // Another seed: every random tensor differs (rope_freqs is fixed by the architecture).
  for (const char* name : {"token_embd.weight", "blk.0.attn_q.weight", "blk.3.ffn_norm.weight", "output_norm.weight"}) {
    const gguf::TensorInfo* x = a.model->file->find_tensor(name);
    const gguf::TensorInfo* y = c.model->file->find_tensor(name);
    ASSERT_TRUE(x && y);
    EXPECT_NE(std::memcmp(x->data, y->data, x->n_bytes), 0) << name;
  }
  const gguf::TensorInfo* r1 = a.model->file->find_tensor("rope_freqs.weight");
  const gguf::TensorInfo* r2 = c.model->file->find_tensor("rope_freqs.weight");
  EXPECT_EQ(std::memcmp(r1->data, r2->data, r1->n_bytes), 0);
}

TEST(Synth, F32LayoutHasTheDocumentedScales) {
  Written w = synth("tiny", "f32", 3, [](SynthOptions& o) {
    o.layout = "f32";
    o.matrix_type = DType::kF32;
    o.embd_type = DType::kF32;
  });
  ASSERT_TRUE(w.model);
  const Weights& wt = w.model->weights;
  EXPECT_EQ(wt.layers[0].attn_q.type, DType::kF32);
  // Matrices: uniform, std 1/sqrt(fan_in); token_embd std 0.5/sqrt(n_embd).
  EXPECT_NEAR(rms(dequant(wt.layers[0].attn_q, 1 << 20)), 1.0 / 8.0, 0.05 / 8.0);
  EXPECT_NEAR(rms(dequant(wt.layers[2].ffn_down, 1 << 20)), 1.0 / std::sqrt(192.0), 0.05 / std::sqrt(192.0));
  EXPECT_NEAR(rms(dequant(wt.token_embd, 1 << 20)), 0.5 / 8.0, 0.02 / 8.0);
  auto in_range = [](const TensorView& t, float lo, float hi) {
    for (float v : dequant(t, 1 << 20)) {
      if (v < lo || v >= hi) return false;
    }
    return true;
  };
  EXPECT_TRUE(in_range(wt.output_norm, 5.0f, 9.0f));
  EXPECT_TRUE(in_range(wt.layers[1].attn_norm, 0.7f, 1.3f));
  EXPECT_TRUE(in_range(wt.layers[1].post_ffw_norm, 0.1f, 0.2f));
  EXPECT_TRUE(in_range(wt.layers[1].layer_output_scale, 0.95f, 1.0f));
  const float qk = std::pow(32.0f, -0.25f);
  EXPECT_TRUE(in_range(wt.layers[1].attn_q_norm, 0.8f * qk, 1.2f * qk));
  EXPECT_EQ(w.model->file->get_string("gem.synth.layout").value(), "f32");
}

TEST(Synth, FastFillKeepsTheScales) {
  Written w = synth("tiny", "fast", 4, [](SynthOptions& o) { o.fill = SynthFill::kFast; });
  ASSERT_TRUE(w.model);
  const Weights& wt = w.model->weights;
  EXPECT_EQ(w.model->file->get_string("gem.synth.fill").value(), "fast");
  EXPECT_NEAR(rms(dequant(wt.layers[0].ffn_gate, 1 << 20)), 1.0 / 8.0, 0.06 / 8.0);
  EXPECT_NEAR(rms(dequant(wt.layers[0].ffn_down, 1 << 20)), 1.0 / std::sqrt(192.0), 0.06 / std::sqrt(192.0));
  EXPECT_NEAR(rms(dequant(wt.token_embd, 1 << 20)), 0.5 / 8.0, 0.03 / 8.0);
  // Tensors of the same shape are not copies of each other.
  EXPECT_NE(std::memcmp(wt.layers[0].ffn_gate.data, wt.layers[0].ffn_up.data, wt.layers[0].ffn_up.n_bytes), 0);
}

TEST(Synth, DemoWithQ6KEmbedding) {
  Written w = synth("demo", "demo-q6k", 1, [](SynthOptions& o) { o.embd_type = DType::kQ6_K; });
  ASSERT_TRUE(w.model);
  const Config& c = w.model->config;
  EXPECT_EQ(c.profile, Profile::kTest);
  EXPECT_EQ(c.n_layers, 6);
  EXPECT_EQ(c.n_embd, 256);
  EXPECT_EQ(c.n_ff, 1024);
  EXPECT_EQ(c.sliding_window, 128);
  EXPECT_EQ(c.context_length, 8192);
  EXPECT_EQ(w.model->plan[5].n_rot_pairs_active, 16);
  EXPECT_EQ(w.model->weights.token_embd.type, DType::kQ6_K);
  // token_embd std 0.125/sqrt(256), over the first 4096 rows.
  EXPECT_NEAR(rms(dequant(w.model->weights.token_embd, 4096 * 256)), 0.125 / 16, 0.05 * 0.125 / 16);
  EXPECT_EQ(w.model->file->get_string("gem.synth.layout").value(), "prod(mat=Q4_0,embd=Q6_K)");
}

TEST(Synth, OtherPeriodIsATestModel) {
  // Any pattern whose last layer is full is a test model: a period of 3 gives full layers 2, 5, 8, 11.
  Written w = synth("tiny", "period3", 1, [](SynthOptions& o) { o.geometry.period = 3; });
  ASSERT_TRUE(w.model);
  std::vector<int> full;
  for (const LayerPlan& p : w.model->plan) {
    if (p.kind == AttnKind::kFull) full.push_back(p.layer);
  }
  EXPECT_EQ(full, (std::vector<int>{2, 5, 8, 11}));
  EXPECT_EQ(w.model->plan[8].kv_slot, 2);
  EXPECT_EQ(w.model->plan[9].kv_slot, 6);
}

TEST(Synth, UnknownProfile) {
  auto g = synth_geometry("7b");
  ASSERT_FALSE(g.ok());
  EXPECT_NE(g.message().find("7b"), std::string::npos);
}

}  // namespace
}  // namespace gem::model
