// load_model on the shared fixtures (test-class models) and on sparse synthetic 12B/31B files:
// profile, Config, LayerPlan, bound views, tensor counts and byte totals; KV-cache sizing.
#include <gtest/gtest.h>

#include "common/test_util.h"
#include "model/model.h"
#include "model/model_test_util.h"

namespace gem::model {
namespace {

using test::fixture;

std::unique_ptr<Model> load_ok(const std::string& path) {
  auto m = load_model(path);
  EXPECT_TRUE(m.ok()) << m.message();
  return m.ok() ? std::move(m).value() : nullptr;
}

std::vector<int> full_layers(const Model& m) {
  std::vector<int> out;
  for (const LayerPlan& p : m.plan) {
    if (p.kind == AttnKind::kFull) out.push_back(p.layer);
  }
  return out;
}

TEST(ModelLoad, TinyFixtureIsATestModelWithTheRightPlan) {
  GEM_REQUIRE_FIXTURE(fixture("tiny-q4_0.gguf"));
  auto m = load_ok(fixture("tiny-q4_0.gguf"));
  ASSERT_TRUE(m);
  const Config& c = m->config;
  EXPECT_EQ(c.profile, Profile::kTest);
  EXPECT_EQ(profile_name(c.profile), "test");
  EXPECT_EQ(c.n_layers, 12);
  EXPECT_EQ(c.n_embd, 64);
  EXPECT_EQ(c.n_ff, 192);
  EXPECT_EQ(c.n_heads, 4);
  EXPECT_EQ(c.n_vocab, 262144);
  EXPECT_EQ(c.context_length, 4096);
  EXPECT_EQ(c.sliding_window, 16);
  EXPECT_EQ(c.head_dim_sliding, 32);
  EXPECT_EQ(c.head_dim_full, 64);
  EXPECT_EQ(c.n_kv_heads_sliding, 2);
  EXPECT_EQ(c.n_kv_heads_full, 1);
  EXPECT_FLOAT_EQ(c.rope_theta_full, 1e6f);
  EXPECT_FLOAT_EQ(c.rope_theta_sliding, 1e4f);
  EXPECT_FLOAT_EQ(c.rms_eps, 1e-6f);
  EXPECT_FLOAT_EQ(c.final_logit_softcap, 30.0f);
  EXPECT_FALSE(c.sampling_temp.has_value());
  EXPECT_EQ(full_layers(*m), (std::vector<int>{5, 11}));

  ASSERT_EQ(m->plan.size(), 12u);
  const LayerPlan& s = m->plan[6];
  EXPECT_EQ(s.kind, AttnKind::kSliding);
  EXPECT_EQ(s.n_heads, 4);
  EXPECT_EQ(s.n_kv_heads, 2);
  EXPECT_EQ(s.head_dim, 32);
  EXPECT_EQ(s.window, 16);
  EXPECT_FLOAT_EQ(s.rope_theta, 1e4f);
  EXPECT_EQ(s.n_rot, 32);
  EXPECT_EQ(s.n_rot_pairs_active, 16);
  EXPECT_FALSE(s.v_from_k);
  EXPECT_EQ(s.kv_slot, 5);  // layers 0-4 are slots 0-4, layer 5 is full
  const LayerPlan& f = m->plan[11];
  EXPECT_EQ(f.kind, AttnKind::kFull);
  EXPECT_EQ(f.n_kv_heads, 1);
  EXPECT_EQ(f.head_dim, 64);
  EXPECT_EQ(f.window, 0);
  EXPECT_FLOAT_EQ(f.rope_theta, 1e6f);
  EXPECT_EQ(f.n_rot, 64);
  EXPECT_EQ(f.n_rot_pairs_active, 8);  // 64 * 0.25 / 2
  EXPECT_TRUE(f.v_from_k);
  EXPECT_EQ(f.kv_slot, 1);

  const Weights& w = m->weights;
  EXPECT_EQ(w.token_embd.type, DType::kQ8_0);
  EXPECT_EQ(w.token_embd.rows, 262144);
  EXPECT_EQ(w.token_embd.cols, 64);
  EXPECT_EQ(w.token_embd.row_bytes(), 64u / 32 * 34);
  EXPECT_EQ(w.rope_freqs.cols, 32);
  EXPECT_EQ(w.rope_freqs.f32()[7], 1.0f);
  EXPECT_GE(w.rope_freqs.f32()[8], 1e29f);
  ASSERT_EQ(w.layers.size(), 12u);
  EXPECT_TRUE(w.layers[0].attn_v.present());
  EXPECT_FALSE(w.layers[5].attn_v.present());
  EXPECT_EQ(w.layers[5].attn_q.type, DType::kQ4_0);
  EXPECT_EQ(w.layers[5].attn_q.rows, 4 * 64);
  EXPECT_EQ(w.layers[5].attn_q.cols, 64);
  EXPECT_EQ(w.layers[5].attn_k.rows, 64);
  EXPECT_EQ(w.layers[5].attn_output.rows, 64);
  EXPECT_EQ(w.layers[5].attn_output.cols, 256);
  EXPECT_EQ(w.layers[3].ffn_down.rows, 64);
  EXPECT_EQ(w.layers[3].ffn_down.cols, 192);
  EXPECT_EQ(w.layers[3].layer_output_scale.cols, 1);
  EXPECT_EQ(w.layers[3].attn_q_norm.cols, 32);
  // Views point into the mapping: the tensor's bytes, not a copy.
  const gguf::TensorInfo* t = m->file->find_tensor("blk.3.ffn_up.weight");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(w.layers[3].ffn_up.data, t->data);
  EXPECT_EQ(w.layers[3].ffn_up.name, "blk.3.ffn_up.weight");
}

TEST(ModelLoad, Tiny6F32Fixture) {
  GEM_REQUIRE_FIXTURE(fixture("tiny6-f32.gguf"));
  auto m = load_ok(fixture("tiny6-f32.gguf"));
  ASSERT_TRUE(m);
  EXPECT_EQ(m->config.profile, Profile::kTest);
  EXPECT_EQ(m->config.n_layers, 6);
  EXPECT_EQ(m->config.n_heads, 8);
  EXPECT_EQ(full_layers(*m), (std::vector<int>{5}));
  EXPECT_EQ(m->plan[0].n_kv_heads, 4);
  EXPECT_EQ(m->plan[5].n_kv_heads, 2);
  EXPECT_EQ(m->plan[5].head_dim, 64);
  EXPECT_EQ(m->weights.token_embd.type, DType::kF32);
  EXPECT_EQ(m->weights.layers[0].attn_q.type, DType::kF32);
  EXPECT_EQ(m->file->tensors().size(), 86u);
}

TEST(ModelLoad, Tiny256Q6KFixture) {
  GEM_REQUIRE_FIXTURE(fixture("tiny256-q6_k.gguf"));
  auto m = load_ok(fixture("tiny256-q6_k.gguf"));
  ASSERT_TRUE(m);
  EXPECT_EQ(m->config.profile, Profile::kTest);
  EXPECT_EQ(m->config.n_embd, 256);
  EXPECT_EQ(m->config.sliding_window, 8);
  EXPECT_EQ(m->weights.token_embd.type, DType::kQ6_K);
  EXPECT_EQ(m->weights.token_embd.row_bytes(), 210u);
  EXPECT_EQ(m->plan[5].n_rot_pairs_active, 16);  // 128 * 0.25 / 2
  EXPECT_EQ(m->plan[5].head_dim, 128);
}

// Bytes of the tensor data of a dense profile, from the spec's shapes (spec §3.1), independent of
// gem's manifest: per layer Q, K, (V), O, gate, up, down in the matrix type, 1-D tensors F32.
uint64_t spec_data_bytes(int n_layers, uint64_t e, uint64_t ff, uint64_t heads, uint64_t kv_s, uint64_t kv_f,
                         uint64_t embd_row_bytes) {
  auto q4 = [](uint64_t n) { return n / 32 * 18; };
  auto pad = [](uint64_t n) { return (n + 31) / 32 * 32; };
  uint64_t total = pad(embd_row_bytes * 262144) + pad(256 * 4) + pad(e * 4);
  for (int il = 0; il < n_layers; ++il) {
    const bool sliding = (il + 1) % 6 != 0;
    const uint64_t hd = sliding ? 256 : 512;
    const uint64_t kv = (sliding ? kv_s : kv_f) * hd;
    total += pad(q4(e * heads * hd)) + pad(q4(e * kv)) + (sliding ? pad(q4(e * kv)) : 0) +
             pad(q4(heads * hd * e)) + 3 * pad(q4(e * ff));
    total += 4 * pad(e * 4) + 2 * pad(hd * 4) + pad(4);  // 4 norms, q/k norms, layer_output_scale
  }
  return total;
}

uint64_t data_bytes(const gguf::GgufFile& f) { return f.file_size() - f.data_offset(); }

TEST(ModelLoad, Sparse12BValidatesAs12B) {
  auto m = load_ok(test::sparse_model("12b"));
  ASSERT_TRUE(m);
  EXPECT_EQ(m->config.profile, Profile::k12B);
  EXPECT_EQ(profile_name(m->config.profile), "12B");
  EXPECT_EQ(m->file->tensors().size(), 667u);
  EXPECT_EQ(full_layers(*m), (std::vector<int>{5, 11, 17, 23, 29, 35, 41, 47}));
  EXPECT_EQ(m->plan[47].n_rot_pairs_active, 64);
  EXPECT_EQ(m->plan[47].n_kv_heads, 1);
  EXPECT_EQ(m->plan[46].n_kv_heads, 8);
  EXPECT_EQ(m->plan[47].kv_slot, 7);
  EXPECT_EQ(m->plan[46].kv_slot, 39);
  EXPECT_EQ(data_bytes(*m->file), spec_data_bytes(48, 3840, 15360, 16, 8, 1, 3840 / 32 * 34));
}

TEST(ModelLoad, Sparse12BWithQ6KEmbeddingMatchesTheQatByteBudget) {
  auto m = load_ok(test::sparse_model("12b", DType::kQ6_K));
  ASSERT_TRUE(m);
  EXPECT_EQ(m->config.profile, Profile::k12B);
  EXPECT_EQ(m->weights.token_embd.type, DType::kQ6_K);
  // spec §3.3: Q4_0 matrices 6 131 220 480 + F32 vectors 3 080 384 + Q6_K embedding 825 753 600.
  uint64_t sum = 0;
  for (const gguf::TensorInfo& t : m->file->tensors()) sum += t.n_bytes;
  EXPECT_EQ(sum, 6960054464ull);
  EXPECT_EQ(data_bytes(*m->file), spec_data_bytes(48, 3840, 15360, 16, 8, 1, 3840 / 256 * 210));
}

TEST(ModelLoad, Sparse31BValidatesAs31B) {
  auto m = load_ok(test::sparse_model("31b"));
  ASSERT_TRUE(m);
  EXPECT_EQ(m->config.profile, Profile::k31B);
  EXPECT_EQ(m->file->tensors().size(), 833u);
  EXPECT_EQ(m->config.n_layers, 60);
  EXPECT_EQ(full_layers(*m).size(), 10u);
  EXPECT_EQ(m->plan[59].n_kv_heads, 4);
  EXPECT_EQ(m->plan[58].n_kv_heads, 16);
  EXPECT_EQ(m->plan[59].n_heads, 32);
  EXPECT_EQ(data_bytes(*m->file), spec_data_bytes(60, 5376, 21504, 32, 16, 4, 5376 / 32 * 34));
  // 31B parameters: 30.70 B (spec §0).
  uint64_t params = 0;
  for (const gguf::TensorInfo& t : m->file->tensors()) params += t.n_elements;
  EXPECT_NEAR(params / 1e9, 30.70, 0.005);
}

TEST(KvPlan, F16FullAt128KMatchesTheDesignFigures) {
  auto m12 = load_ok(test::sparse_model("12b"));
  auto m31 = load_ok(test::sparse_model("31b"));
  ASSERT_TRUE(m12 && m31);
  // The design's figures hold rings of exactly the window (1024); gem's rings add kRingSpare
  // slots (f32 in F16-full) so a sequence can be truncated.
  const uint64_t spare31 = 50ull * 2 * 16 * 256 * kRingSpare * 4;
  const uint64_t spare12 = 40ull * 2 * 8 * 256 * kRingSpare * 4;
  EXPECT_EQ(kv_cache_bytes(m31->plan, 131072, KvType::kF16Full), 12415139840ull + spare31);
  EXPECT_EQ(kv_cache_bytes(m12->plan, 131072, KvType::kF16Full), 2818572288ull + spare12);
  EXPECT_EQ(kv_cache_bytes(m12->plan, 131072, KvType::kF16Full, 4),
            4 * kv_cache_bytes(m12->plan, 131072, KvType::kF16Full));
  // F32 and F16 the same way: 2 (K,V) x kv_heads x head_dim x slots x bytes per layer.
  // 31B: 50 sliding x 16 x 256 x (1024 + spare) ring slots, 10 full x 4 x 512 x 131072 slots.
  const uint64_t ring = 1024 + kRingSpare;
  const uint64_t s31 = 50ull * 2 * 16 * 256 * ring, f31 = 10ull * 2 * 4 * 512 * 131072;
  const uint64_t s12 = 40ull * 2 * 8 * 256 * ring, f12 = 8ull * 2 * 1 * 512 * 131072;
  EXPECT_EQ(kv_cache_bytes(m31->plan, 131072, KvType::kF32), 4 * (s31 + f31));
  EXPECT_EQ(kv_cache_bytes(m31->plan, 131072, KvType::kF16), 2 * (s31 + f31));
  EXPECT_EQ(kv_cache_bytes(m12->plan, 131072, KvType::kF32), 4 * (s12 + f12));
  EXPECT_EQ(kv_cache_bytes(m12->plan, 131072, KvType::kF16), 2 * (s12 + f12));
  EXPECT_EQ(kv_cache_bytes(m12->plan, 131072, KvType::kF16Full), 4 * s12 + 2 * f12);
}

TEST(KvPlan, SlidingRingIsTheWindowWhateverTheContext) {
  LayerPlan s;
  s.kind = AttnKind::kSliding;
  s.n_kv_heads = 8;
  s.head_dim = 256;
  s.window = 1024;
  LayerPlan f = s;
  f.kind = AttnKind::kFull;
  f.n_kv_heads = 1;
  f.head_dim = 512;
  f.window = 0;
  const uint64_t ring = 1024 + kRingSpare;
  for (int ctx : {1, 100, 1024, 5000}) {
    EXPECT_EQ(kv_layer_bytes(s, ctx, KvType::kF32), 2ull * 8 * 256 * ring * 4) << ctx;
    EXPECT_EQ(kv_layer_bytes(s, ctx, KvType::kF16), 2ull * 8 * 256 * ring * 2) << ctx;
    EXPECT_EQ(kv_layer_bytes(s, ctx, KvType::kF16Full), 2ull * 8 * 256 * ring * 4) << ctx;
    EXPECT_EQ(kv_layer_bytes(f, ctx, KvType::kF32), 2ull * 512 * ctx * 4) << ctx;
    EXPECT_EQ(kv_layer_bytes(f, ctx, KvType::kF16Full), 2ull * 512 * ctx * 2) << ctx;
  }
}

TEST(KvPlan, ParseKvType) {
  EXPECT_EQ(*parse_kv_type("f32"), KvType::kF32);
  EXPECT_EQ(*parse_kv_type("f16"), KvType::kF16);
  EXPECT_EQ(*parse_kv_type("f16-full"), KvType::kF16Full);
  auto bad = parse_kv_type("q8_0");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("q8_0"), std::string::npos);
  EXPECT_NE(bad.message().find("f16-full"), std::string::npos);
  for (KvType t : {KvType::kF32, KvType::kF16, KvType::kF16Full}) {
    EXPECT_EQ(*parse_kv_type(kv_type_name(t)), t);
  }
}

TEST(Manifest, MatchesTheFixtureTensorTable) {
  // gem's manifest for tiny's Config lists the fixture's tensors: names, order, shapes.
  GEM_REQUIRE_FIXTURE(fixture("tiny-q4_0.gguf"));
  auto m = load_ok(fixture("tiny-q4_0.gguf"));
  ASSERT_TRUE(m);
  const auto manifest = tensor_manifest(m->config);
  const auto& tensors = m->file->tensors();
  ASSERT_EQ(manifest.size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    EXPECT_EQ(manifest[i].name, tensors[i].name) << i;
    EXPECT_EQ(manifest[i].ne, std::vector<uint64_t>(tensors[i].ne, tensors[i].ne + tensors[i].n_dims)) << i;
  }
}

}  // namespace
}  // namespace gem::model
