// The gemma4-assistant loader and its pairing check: the fixture assistant loads with the config
// of spec §7.2 and pairs with tiny-q4_0; a mismatched target is refused naming the key; broken
// assistant files (truncated, a wrong shape, a missing or extra tensor, bad keys) are refused
// with the tensor or key, the expected and the actual value.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "common/test_util.h"
#include "model/assistant.h"
#include "model/model.h"
#include "model/model_test_util.h"

namespace gem::model {
namespace {

using ::testing::HasSubstr;
using test::KvEdit;
using test::TensorDesc;
using test::TensorEdit;

std::string assistant_path() { return test::fixture("mtp/tiny-q4_0-assistant.gguf"); }

std::string assistant_error(const std::string& path) {
  auto a = load_assistant(path);
  return a.ok() ? "" : a.message();
}

// Rewrites the fixture assistant with the edits and returns load_assistant's error.
std::string error_after(const KvEdit& kv, const TensorEdit& tensors) {
  auto src = gguf::GgufFile::open(assistant_path());
  EXPECT_TRUE(src.ok()) << src.message();
  if (!src.ok()) return "open failed";
  const std::string path = test::temp_dir() + "/asst-" +
                           ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".gguf";
  test::rewrite_gguf(**src, path, kv, tensors);
  return assistant_error(path);
}

TensorDesc* find(std::vector<TensorDesc>& ts, const std::string& name) {
  for (TensorDesc& t : ts) {
    if (t.name == name) return &t;
  }
  ADD_FAILURE() << "no tensor " << name;
  return nullptr;
}

TEST(Assistant, FixtureLoadsWithItsConfig) {
  GEM_REQUIRE_FIXTURE(assistant_path());
  auto a = load_assistant(assistant_path());
  ASSERT_TRUE(a.ok()) << a.message();
  const AssistantConfig& c = (*a)->config;
  EXPECT_EQ(c.n_layers, 4);
  EXPECT_EQ(c.n_embd, 32);
  EXPECT_EQ(c.n_embd_out, 64);
  EXPECT_EQ(c.n_ff, 128);
  EXPECT_EQ(c.n_heads, 4);
  EXPECT_EQ(c.n_kv_heads_sliding, 2);
  EXPECT_EQ(c.n_kv_heads_full, 1);
  EXPECT_EQ(c.head_dim_sliding, 32);
  EXPECT_EQ(c.head_dim_full, 64);
  EXPECT_EQ(c.sliding_window, 16);
  EXPECT_EQ(c.n_vocab, 262144);
  EXPECT_EQ(c.sliding, (std::vector<bool>{true, true, true, false}));
  EXPECT_EQ((*a)->file->tensors().size(), 49u);
  EXPECT_EQ(assistant_manifest(c).size(), 49u);
  EXPECT_EQ((*a)->weights.pre_projection.rows, 32);
  EXPECT_EQ((*a)->weights.pre_projection.cols, 128);
  EXPECT_EQ((*a)->weights.post_projection.rows, 64);
  EXPECT_EQ((*a)->weights.layers[3].attn_q.rows, 4 * 64);
  // The target loader still refuses it, naming what it is.
  EXPECT_THAT(test::load_error(assistant_path()), HasSubstr("MTP assistant"));
}

TEST(Assistant, PairsWithItsTargetOnly) {
  GEM_REQUIRE_FIXTURE(assistant_path());
  GEM_REQUIRE_FIXTURE(test::fixture("tiny-q4_0.gguf"));
  auto a = load_assistant(assistant_path());
  ASSERT_TRUE(a.ok()) << a.message();
  auto target = load_model(test::fixture("tiny-q4_0.gguf"));
  ASSERT_TRUE(target.ok()) << target.message();
  EXPECT_TRUE(check_pairing(**a, **target).ok()) << check_pairing(**a, **target).message();
  EXPECT_EQ(assistant_target_layer(true, 12), 10);
  EXPECT_EQ(assistant_target_layer(false, 12), 11);

  auto tiny6 = load_model(test::fixture("tiny6-f32.gguf"));
  ASSERT_TRUE(tiny6.ok()) << tiny6.message();
  EXPECT_EQ(check_pairing(**a, **tiny6).message(),
            "assistant key gemma4-assistant.embedding_length_out: expected 32 (the target's embedding_length), "
            "found 64");
  auto tiny256 = load_model(test::fixture("tiny256-q6_k.gguf"));
  ASSERT_TRUE(tiny256.ok()) << tiny256.message();
  EXPECT_THAT(check_pairing(**a, **tiny256).message(),
              HasSubstr("gemma4-assistant.embedding_length_out: expected 256 (the target's embedding_length), "
                        "found 64"));
}

TEST(Assistant, RefusesATruncatedFile) {
  GEM_REQUIRE_FIXTURE(assistant_path());
  const std::string path = test::temp_dir() + "/asst-truncated.gguf";
  const auto size = std::filesystem::file_size(assistant_path());
  std::filesystem::copy_file(assistant_path(), path, std::filesystem::copy_options::overwrite_existing);
  std::filesystem::resize_file(path, size - 1000);
  const std::string e = assistant_error(path);
  EXPECT_NE(e, "");
  EXPECT_THAT(e, HasSubstr(path));
}

TEST(Assistant, UnchangedRewriteLoads) {
  GEM_REQUIRE_FIXTURE(assistant_path());
  EXPECT_EQ(error_after(nullptr, nullptr), "");
}

TEST(Assistant, RefusesAWrongShape) {
  GEM_REQUIRE_FIXTURE(assistant_path());
  std::string e = error_after(nullptr, [](std::vector<TensorDesc>& ts) {
    find(ts, "nextn.pre_projection.weight")->ne = {96, 32};
  });
  EXPECT_THAT(e, HasSubstr("tensor nextn.pre_projection.weight: shape [96, 32], expected [128, 32]"));
  e = error_after(nullptr, [](std::vector<TensorDesc>& ts) { find(ts, "blk.3.attn_q.weight")->ne = {32, 128}; });
  EXPECT_THAT(e, HasSubstr("tensor blk.3.attn_q.weight: shape [32, 128], expected [32, 256]"));
}

TEST(Assistant, RefusesAMissingOrExtraTensor) {
  GEM_REQUIRE_FIXTURE(assistant_path());
  std::string e = error_after(nullptr, [](std::vector<TensorDesc>& ts) {
    ts.erase(ts.begin() + static_cast<std::ptrdiff_t>(find(ts, "blk.2.ffn_up.weight") - ts.data()));
  });
  EXPECT_THAT(e, HasSubstr("tensor blk.2.ffn_up.weight missing"));
  e = error_after(nullptr, [](std::vector<TensorDesc>& ts) {
    ts.push_back({"blk.0.attn_k.weight", DType::kF32, {32, 64}, nullptr, 0});
  });
  EXPECT_THAT(e, HasSubstr("unexpected tensor blk.0.attn_k.weight"));
}

TEST(Assistant, RefusesAnUnsupportedMatrixType) {
  GEM_REQUIRE_FIXTURE(assistant_path());
  std::string e = error_after(nullptr, [](std::vector<TensorDesc>& ts) { find(ts, "blk.1.ffn_down.weight")->type = DType::kF16; });
  EXPECT_THAT(e, HasSubstr("tensor blk.1.ffn_down.weight: dtype F16, gem accepts Q4_0, Q8_0 or F32 for assistant matrices"));
}

TEST(Assistant, RefusesBadKeys) {
  GEM_REQUIRE_FIXTURE(assistant_path());
  // embedding_length_out equal to the assistant's width.
  std::string e = error_after(
      [](const gguf::KeyValue& kv, gguf::GgufWriter& w) {
        if (kv.key != "gemma4-assistant.embedding_length_out") return false;
        w.add_u32(kv.key, 32);
        return true;
      },
      nullptr);
  EXPECT_THAT(e, HasSubstr("gemma4-assistant.embedding_length_out: 32, equal to embedding_length"));
  // nextn_predict_layers missing.
  e = error_after([](const gguf::KeyValue& kv, gguf::GgufWriter&) { return kv.key == "gemma4-assistant.nextn_predict_layers"; },
                  nullptr);
  EXPECT_THAT(e, HasSubstr("key gemma4-assistant.nextn_predict_layers missing"));
  // A target file is not an assistant.
  EXPECT_THAT(assistant_error(test::fixture("tiny-q4_0.gguf")),
              HasSubstr("general.architecture: expected \"gemma4-assistant\""));
}

// The fixture assistant rewritten with a production assistant's keys and shapes (spec §7.2,
// §7.3): header real, matrices holes (test::rewrite_gguf), rope_freqs written for real.
struct ProdShape {
  int n_embd_out, n_heads, kv_sliding, kv_full, n_ff;
};
std::string prod_assistant(const ProdShape& p, const std::string& tag) {
  auto src = gguf::GgufFile::open(assistant_path());
  EXPECT_TRUE(src.ok()) << src.message();
  if (!src.ok()) return "";
  AssistantConfig c;
  c.n_layers = 4;
  c.n_embd = 1024;
  c.n_embd_out = p.n_embd_out;
  c.n_ff = p.n_ff;
  c.n_heads = p.n_heads;
  c.n_vocab = 262144;
  c.head_dim_sliding = 256;
  c.head_dim_full = 512;
  c.sliding = {true, true, true, false};
  static std::vector<float> rope(256, 1e30f);
  std::fill(rope.begin(), rope.begin() + 64, 1.0f);
  const std::string A = "gemma4-assistant.";
  auto kv = [&](const gguf::KeyValue& k, gguf::GgufWriter& w) {
    const std::string key(k.key);
    auto u = [&](const char* suffix, int v) {
      if (key != A + suffix) return false;
      w.add_u32(key, static_cast<uint32_t>(v));
      return true;
    };
    if (key == A + "attention.head_count_kv") {
      w.add_i32_array(key, std::vector<int32_t>{p.kv_sliding, p.kv_sliding, p.kv_sliding, p.kv_full});
      return true;
    }
    return u("embedding_length", 1024) || u("embedding_length_out", p.n_embd_out) ||
           u("feed_forward_length", p.n_ff) || u("attention.head_count", p.n_heads) ||
           u("attention.key_length", 512) || u("attention.value_length", 512) || u("attention.key_length_swa", 256) ||
           u("attention.value_length_swa", 256) || u("rope.dimension_count", 512) ||
           u("rope.dimension_count_swa", 256) || u("attention.sliding_window", 1024);
  };
  auto tensors = [&](std::vector<TensorDesc>& ts) {
    std::vector<TensorDesc> out;
    for (const ManifestEntry& e : assistant_manifest(c)) {
      TensorDesc* old = find(ts, e.name);
      if (old == nullptr) return;
      TensorDesc t{e.name, old->type, e.ne, nullptr, 0};
      if (e.name == "rope_freqs.weight") {
        t.src = reinterpret_cast<const uint8_t*>(rope.data());
        t.src_bytes = rope.size() * sizeof(float);
      } else if (e.role == TensorRole::kVector) {
        t.src = old->src;  // norms: the fixture's first values, zeros beyond (holes)
        t.src_bytes = old->src_bytes;
      }
      out.push_back(std::move(t));
    }
    ts = std::move(out);
  };
  const std::string path = test::temp_dir() + "/asst-prod-" + tag + ".gguf";
  test::rewrite_gguf(**src, path, kv, tensors);
  return path;
}

TEST(Assistant, ProductionShapesLoadAndPairWithTheirTargets) {
  GEM_REQUIRE_FIXTURE(assistant_path());
  const std::string a12 = prod_assistant({3840, 16, 8, 1, 8192}, "12b");
  const std::string a31 = prod_assistant({5376, 32, 16, 4, 8192}, "31b");
  auto l12 = load_assistant(a12);
  ASSERT_TRUE(l12.ok()) << l12.message();
  auto l31 = load_assistant(a31);
  ASSERT_TRUE(l31.ok()) << l31.message();
  EXPECT_EQ((*l12)->config.profile, Profile::k12B);
  EXPECT_EQ((*l31)->config.profile, Profile::k31B);
  EXPECT_EQ((*l12)->weights.pre_projection.cols, 7680);
  EXPECT_EQ((*l31)->weights.layers[3].attn_q.rows, 32 * 512);

  auto t12 = load_model(test::sparse_model("12b"));
  ASSERT_TRUE(t12.ok()) << t12.message();
  auto t31 = load_model(test::sparse_model("31b"));
  ASSERT_TRUE(t31.ok()) << t31.message();
  EXPECT_TRUE(check_pairing(**l12, **t12).ok()) << check_pairing(**l12, **t12).message();
  EXPECT_TRUE(check_pairing(**l31, **t31).ok()) << check_pairing(**l31, **t31).message();
  EXPECT_EQ(check_pairing(**l12, **t31).message(),
            "assistant key gemma4-assistant.embedding_length_out: expected 5376 (the target's embedding_length), "
            "found 3840");
  EXPECT_EQ(assistant_target_layer(true, 48), 46);
  EXPECT_EQ(assistant_target_layer(false, 60), 59);
}

TEST(Assistant, ProductionProfileValuesAreChecked) {
  GEM_REQUIRE_FIXTURE(assistant_path());
  EXPECT_THAT(assistant_error(prod_assistant({3840, 16, 8, 1, 4096}, "12b-ff")),
              HasSubstr("key gemma4-assistant.feed_forward_length: the 12B assistant profile expects 8192, found 4096"));
  EXPECT_THAT(assistant_error(prod_assistant({5376, 32, 8, 4, 8192}, "31b-kv")),
              HasSubstr("the 31B assistant profile expects 16, found 8"));
  EXPECT_THAT(assistant_error(prod_assistant({4096, 16, 8, 1, 8192}, "wide")),
              HasSubstr("matches neither the 12B (3840) nor the 31B (5376) target"));
}

}  // namespace
}  // namespace gem::model
