// load_model rejections: each broken file (a sparse synthetic 12B or the tiny fixture, rewritten
// with one change) fails with a message naming the key or tensor, what was expected and found.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>

#include "common/test_util.h"
#include "model/model.h"
#include "model/model_test_util.h"

namespace gem::model {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
using test::KvEdit;
using test::TensorDesc;
using test::TensorEdit;

class Reject12B : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto f = gguf::GgufFile::open(test::sparse_model("12b"));
    ASSERT_TRUE(f.ok()) << f.message();
    src_ = std::move(f).value().release();
  }
  static void TearDownTestSuite() {
    delete src_;
    src_ = nullptr;
  }
  // Rewrites the 12B with the edits and returns load_model's error.
  std::string error_after(const KvEdit& kv, const TensorEdit& tensors) {
    const std::string path = test::temp_dir() + "/reject-" +
                             ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".gguf";
    test::rewrite_gguf(*src_, path, kv, tensors);
    return test::load_error(path);
  }
  static gguf::GgufFile* src_;
};
gguf::GgufFile* Reject12B::src_ = nullptr;

TensorDesc* find(std::vector<TensorDesc>& ts, const std::string& name) {
  for (TensorDesc& t : ts) {
    if (t.name == name) return &t;
  }
  ADD_FAILURE() << "no tensor " << name;
  return nullptr;
}

TEST_F(Reject12B, UnchangedRewriteLoads) {
  // The control: the rewriting itself keeps a valid file valid.
  EXPECT_EQ(error_after(nullptr, nullptr), "");
}

TEST_F(Reject12B, TensorRetypedToF16) {
  std::string e = error_after(nullptr, [](std::vector<TensorDesc>& ts) { find(ts, "blk.7.attn_q.weight")->type = DType::kF16; });
  EXPECT_THAT(e, HasSubstr("tensor blk.7.attn_q.weight: dtype F16, gem accepts Q4_0 or F32 for layer matrices"));
}

TEST_F(Reject12B, NormRetypedToQ8_0IsNotAcceptedEither) {
  std::string e = error_after(nullptr, [](std::vector<TensorDesc>& ts) {
    TensorDesc* t = find(ts, "blk.0.attn_norm.weight");
    t->type = DType::kQ8_0;
  });
  EXPECT_THAT(e, HasSubstr("tensor blk.0.attn_norm.weight: dtype Q8_0, gem accepts F32"));
}

TEST_F(Reject12B, EmbeddingAsQ4_0) {
  std::string e = error_after(nullptr, [](std::vector<TensorDesc>& ts) { find(ts, "token_embd.weight")->type = DType::kQ4_0; });
  EXPECT_THAT(e, HasSubstr("tensor token_embd.weight: dtype Q4_0, gem accepts Q8_0, Q6_K or F32"));
}

TEST_F(Reject12B, TensorRemoved) {
  std::string e = error_after(nullptr, [](std::vector<TensorDesc>& ts) {
    std::erase_if(ts, [](const TensorDesc& t) { return t.name == "blk.3.ffn_up.weight"; });
  });
  EXPECT_THAT(e, HasSubstr("tensor blk.3.ffn_up.weight missing"));
}

TEST_F(Reject12B, ExtraTensor) {
  std::string e = error_after(nullptr, [](std::vector<TensorDesc>& ts) {
    ts.push_back({"output.weight", DType::kQ4_0, {3840, 262144}, nullptr, 0});
  });
  EXPECT_THAT(e, AllOf(HasSubstr("unexpected tensor output.weight"), HasSubstr("668 tensors, expected 667")));
}

TEST_F(Reject12B, VProjectionOnAFullLayer) {
  std::string e = error_after(nullptr, [](std::vector<TensorDesc>& ts) {
    ts.push_back({"blk.5.attn_v.weight", DType::kQ4_0, {3840, 512}, nullptr, 0});
  });
  EXPECT_THAT(e, AllOf(HasSubstr("unexpected tensor blk.5.attn_v.weight"), HasSubstr("full-attention layer")));
}

TEST_F(Reject12B, WrongShape) {
  std::string e = error_after(nullptr, [](std::vector<TensorDesc>& ts) {
    find(ts, "blk.2.attn_k.weight")->ne = {3840, 1024};
  });
  EXPECT_THAT(e, HasSubstr("tensor blk.2.attn_k.weight: shape [3840, 1024], expected [3840, 2048]"));
}

TEST_F(Reject12B, LayerCountChanged) {
  std::string e = error_after(
      [](const gguf::KeyValue& kv, gguf::GgufWriter& w) {
        if (kv.key != "gemma4.block_count") return false;
        w.add_u32("gemma4.block_count", 47);
        return true;
      },
      nullptr);
  EXPECT_THAT(e, HasSubstr("key gemma4.block_count: the 12B profile expects 48, found 47"));
}

TEST_F(Reject12B, WrongPattern) {
  std::string e = error_after(
      [](const gguf::KeyValue& kv, gguf::GgufWriter& w) {
        if (kv.key != "gemma4.attention.sliding_window_pattern") return false;
        bool p[48];
        for (int i = 0; i < 48; ++i) p[i] = (i + 1) % 6 != 0;
        std::swap(p[4], p[5]);  // full at 4, sliding at 5
        w.add_bool_array(kv.key, std::span<const bool>(p, 48));
        return true;
      },
      nullptr);
  EXPECT_THAT(e, HasSubstr("gemma4.attention.sliding_window_pattern: layer 4 is full, the 12B profile expects "
                           "sliding"));
}

TEST_F(Reject12B, WrongHeadCount) {
  std::string e = error_after(
      [](const gguf::KeyValue& kv, gguf::GgufWriter& w) {
        if (kv.key != "gemma4.attention.head_count") return false;
        w.add_u32(kv.key, 32);
        return true;
      },
      nullptr);
  EXPECT_THAT(e, HasSubstr("key gemma4.attention.head_count: the 12B profile expects 16, found 32"));
}

TEST_F(Reject12B, WrongKvHeadCount) {
  std::string e = error_after(
      [](const gguf::KeyValue& kv, gguf::GgufWriter& w) {
        if (kv.key != "gemma4.attention.head_count_kv") return false;
        std::vector<int32_t> v;
        for (int i = 0; i < 48; ++i) v.push_back((i + 1) % 6 != 0 ? 4 : 1);
        w.add_i32_array(kv.key, v);
        return true;
      },
      nullptr);
  EXPECT_THAT(e, HasSubstr("attention.head_count_kv (sliding layers): the 12B profile expects 8, found 4"));
}

TEST_F(Reject12B, KvHeadCountAsScalarIsAcceptedWhereItFits) {
  // Spec §2.2: a scalar broadcasts to every layer; for the 12B (8 sliding, 1 full) it cannot fit.
  std::string e = error_after(
      [](const gguf::KeyValue& kv, gguf::GgufWriter& w) {
        if (kv.key != "gemma4.attention.head_count_kv") return false;
        w.add_u32(kv.key, 8);
        return true;
      },
      nullptr);
  EXPECT_THAT(e, HasSubstr("attention.head_count_kv (full layers): the 12B profile expects 1, found 8"));
}

TEST_F(Reject12B, WrongArchitecture) {
  std::string e = error_after(
      [](const gguf::KeyValue& kv, gguf::GgufWriter& w) {
        if (kv.key != "general.architecture") return false;
        w.add_string(kv.key, "gemma3");
        return true;
      },
      nullptr);
  EXPECT_THAT(e, HasSubstr("general.architecture: expected \"gemma4\" (Gemma 4 dense), found \"gemma3\""));
}

TEST_F(Reject12B, MissingTokenizer) {
  std::string e = error_after(
      [](const gguf::KeyValue& kv, gguf::GgufWriter&) { return kv.key.substr(0, 10) == "tokenizer."; }, nullptr);
  EXPECT_THAT(e, HasSubstr("key tokenizer.ggml.model missing"));
}

TEST_F(Reject12B, WrongSoftcap) {
  std::string e = error_after(
      [](const gguf::KeyValue& kv, gguf::GgufWriter& w) {
        if (kv.key != "gemma4.final_logit_softcapping") return false;
        w.add_f32(kv.key, 50.0f);
        return true;
      },
      nullptr);
  EXPECT_THAT(e, HasSubstr("key gemma4.final_logit_softcapping: the 12B profile expects 30, found 50"));
}

TEST_F(Reject12B, MixtureOfExperts) {
  std::string e = error_after(
      [](const gguf::KeyValue& kv, gguf::GgufWriter& w) {
        if (kv.key != "gemma4.block_count") return false;
        w.add_kv_copy(kv);
        w.add_u32("gemma4.expert_count", 128);
        return true;
      },
      nullptr);
  EXPECT_THAT(e, HasSubstr("gemma4.expert_count"));
}

TEST(Reject, AssistantFileIsNamedAsSuch) {
  const std::string path = test::fixture("mtp/tiny-q4_0-assistant.gguf");
  GEM_REQUIRE_FIXTURE(path);
  std::string e = test::load_error(path);
  EXPECT_THAT(e, AllOf(HasSubstr("gemma4-assistant"), HasSubstr("MTP assistant"), HasSubstr("load_assistant"), Not(HasSubstr("--mtp"))));
}

TEST(Reject, VocabOnlyFileIsNotAModel) {
  std::string e = test::load_error(test::vocab_path());
  EXPECT_THAT(e, HasSubstr("key gemma4.block_count missing"));
}

// Test-class rules on the tiny fixture.
class RejectTiny : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto f = gguf::GgufFile::open(test::fixture("tiny-q4_0.gguf"));
    if (f.ok()) src_ = std::move(f).value().release();
  }
  static void TearDownTestSuite() {
    delete src_;
    src_ = nullptr;
  }
  std::string error_after(const KvEdit& kv, const TensorEdit& tensors) {
    EXPECT_TRUE(src_) << "fixture missing: " << test::fixture("tiny-q4_0.gguf");
    if (!src_) return "<no fixture>";
    const std::string path = test::temp_dir() + "/reject-tiny-" +
                             ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".gguf";
    test::rewrite_gguf(*src_, path, kv, tensors);
    return test::load_error(path);
  }
  static gguf::GgufFile* src_;
};
gguf::GgufFile* RejectTiny::src_ = nullptr;

TEST_F(RejectTiny, LastLayerSliding) {
  std::string e = error_after(
      [](const gguf::KeyValue& kv, gguf::GgufWriter& w) {
        if (kv.key != "gemma4.attention.sliding_window_pattern") return false;
        bool p[12];
        for (int i = 0; i < 12; ++i) p[i] = i != 5;
        w.add_bool_array(kv.key, std::span<const bool>(p, 12));
        return true;
      },
      nullptr);
  EXPECT_THAT(e, HasSubstr("the last layer (11) is sliding, expected full attention"));
}

TEST_F(RejectTiny, PatternChangedWithoutTheTensors) {
  // Layer 2 made full in the keys only (any pattern ending full is a valid test pattern): the
  // check then fails on layer 2's tensors, which still have the sliding shapes.
  std::string e = error_after(
      [](const gguf::KeyValue& kv, gguf::GgufWriter& w) {
        if (kv.key == "gemma4.attention.head_count_kv") {
          std::vector<int32_t> v = {2, 2, 1, 2, 2, 1, 2, 2, 2, 2, 2, 1};
          w.add_i32_array(kv.key, v);
          return true;
        }
        if (kv.key != "gemma4.attention.sliding_window_pattern") return false;
        bool p[12];
        for (int i = 0; i < 12; ++i) p[i] = !(i == 2 || i == 5 || i == 11);
        w.add_bool_array(kv.key, std::span<const bool>(p, 12));
        return true;
      },
      nullptr);
  EXPECT_THAT(e, HasSubstr("tensor blk.2.attn_q.weight: shape [64, 128], expected [64, 256]"));
}

TEST_F(RejectTiny, PatternArrayTooShort) {
  std::string e = error_after(
      [](const gguf::KeyValue& kv, gguf::GgufWriter& w) {
        if (kv.key != "gemma4.attention.sliding_window_pattern") return false;
        bool p[6] = {true, true, true, true, true, false};
        w.add_bool_array(kv.key, std::span<const bool>(p, 6));
        return true;
      },
      nullptr);
  EXPECT_THAT(e, HasSubstr("6 entries, expected one per layer (block_count 12)"));
}

TEST_F(RejectTiny, RopeFreqsNotProportional) {
  static const float kFreqs[32] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1};  // 10 ones, then zeros
  std::string e = error_after(nullptr, [](std::vector<TensorDesc>& ts) {
    TensorDesc* t = find(ts, "rope_freqs.weight");
    t->src = reinterpret_cast<const uint8_t*>(kFreqs);
    t->src_bytes = sizeof(kFreqs);
  });
  EXPECT_THAT(e, HasSubstr("tensor rope_freqs.weight: entry 10 is 0"));
}

TEST_F(RejectTiny, WrongVocabularySize) {
  std::string e = error_after(
      [](const gguf::KeyValue& kv, gguf::GgufWriter& w) {
        if (kv.key != "tokenizer.ggml.tokens") return false;
        std::vector<std::string_view> toks(kv.array_strings.begin(), kv.array_strings.begin() + 1000);
        w.add_string_array(kv.key, toks);
        return true;
      },
      nullptr);
  EXPECT_THAT(e, HasSubstr("tokenizer.ggml.tokens: 1000 tokens, the Gemma 4 vocabulary has 262144"));
}

TEST_F(RejectTiny, TooWideForATestModel) {
  std::string e = error_after(
      [](const gguf::KeyValue& kv, gguf::GgufWriter& w) {
        if (kv.key != "gemma4.embedding_length") return false;
        w.add_u32(kv.key, 4096);
        return true;
      },
      nullptr);
  EXPECT_THAT(e, HasSubstr("embedding_length: 4096 matches neither the 12B (3840) nor the 31B (5376)"));
}

TEST_F(RejectTiny, KvHeadsVaryWithinAKind) {
  std::string e = error_after(
      [](const gguf::KeyValue& kv, gguf::GgufWriter& w) {
        if (kv.key != "gemma4.attention.head_count_kv") return false;
        std::vector<int32_t> v = {2, 2, 4, 2, 2, 1, 2, 2, 2, 2, 2, 1};
        w.add_i32_array(kv.key, v);
        return true;
      },
      nullptr);
  EXPECT_THAT(e, HasSubstr("layer 2 has 4, earlier sliding layers have 2"));
}

}  // namespace
}  // namespace gem::model
