// The gemma4-assistant loader and its pairing check: the fixture assistant loads with the config
// of spec §7.2 and pairs with tiny-q4_0; a mismatched target is refused naming the key; broken
// assistant files (truncated, a wrong shape, a missing or extra tensor, bad keys) are refused
// with the tensor or key, the expected and the actual value.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace gem::model
