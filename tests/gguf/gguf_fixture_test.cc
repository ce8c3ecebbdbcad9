// The shared fixtures parse: tensor counts, metadata and tensor extents are what the files hold.
#include <gtest/gtest.h>

#include <string>

#include "common/test_util.h"
#include "gguf/gguf.h"

namespace gem::gguf {
namespace {

struct FixtureCase {
  const char* rel;
  const char* arch;
  size_t n_tensors;  // fixtures/README.md
  bool has_tokenizer;
};

class GgufFixtureTest : public ::testing::TestWithParam<FixtureCase> {};

TEST_P(GgufFixtureTest, ParsesWithSaneContents) {
  const FixtureCase& c = GetParam();
  const std::string path = test::fixture(c.rel);
  GEM_REQUIRE_FIXTURE(path);
  auto f = GgufFile::open(path);
  ASSERT_TRUE(f.ok()) << f.message();
  const GgufFile& g = **f;
  EXPECT_EQ(g.version(), 3u);
  EXPECT_EQ(g.tensors().size(), c.n_tensors);
  EXPECT_EQ(g.data_offset() % g.alignment(), 0u);
  auto arch = g.get_string("general.architecture");
  ASSERT_TRUE(arch.ok()) << arch.message();
  EXPECT_EQ(*arch, c.arch);
  auto blocks = g.get_u32(std::string(c.arch) + ".block_count");
  ASSERT_TRUE(blocks.ok()) << blocks.message();
  EXPECT_GT(*blocks, 0u);
  if (c.has_tokenizer) {
    auto tokens = g.get_string_array("tokenizer.ggml.tokens");
    ASSERT_TRUE(tokens.ok()) << tokens.message();
    EXPECT_EQ((*tokens)->size(), 262144u);
    EXPECT_EQ((**tokens)[2], "<bos>");
    auto scores = g.get_f32_array("tokenizer.ggml.scores");
    ASSERT_TRUE(scores.ok()) << scores.message();
    EXPECT_EQ(scores->size(), 262144u);
    auto types = g.get_int_array("tokenizer.ggml.token_type");
    ASSERT_TRUE(types.ok()) << types.message();
    EXPECT_EQ(types->size(), 262144u);
    // A typed getter refuses the wrong type and says what it found.
    auto wrong = g.get_u32("tokenizer.ggml.tokens");
    ASSERT_FALSE(wrong.ok());
    EXPECT_EQ(wrong.message(), "key 'tokenizer.ggml.tokens': expected u32, found array of string");
  }
  // Every tensor lies inside the file, in order of the extent checks, and find_tensor agrees.
  uint64_t total = 0;
  for (const TensorInfo& t : g.tensors()) {
    EXPECT_GE(t.data, g.base() + g.data_offset());
    EXPECT_LE(t.data + t.n_bytes, g.base() + g.file_size());
    EXPECT_EQ(g.find_tensor(t.name), &t);
    total += t.n_bytes;
  }
  EXPECT_LE(total, g.file_size() - g.data_offset());
  EXPECT_GT(total, (g.file_size() - g.data_offset()) / 2);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GgufFixtureTest,
                         ::testing::Values(FixtureCase{"tiny-q4_0.gguf", "gemma4", 169, true},
                                           FixtureCase{"tiny6-f32.gguf", "gemma4", 86, true},
                                           FixtureCase{"tiny256-q6_k.gguf", "gemma4", 86, true},
                                           FixtureCase{"mtp/tiny-q4_0-assistant.gguf", "gemma4-assistant", 49, false},
                                           FixtureCase{"quant/q6_k-rows.gguf", "gemma4", 6, false}));

TEST(GgufFixture, TensorShapesMatchTheRowsManifest) {
  const std::string path = test::fixture("quant/q6_k-rows.gguf");
  GEM_REQUIRE_FIXTURE(path);
  auto f = GgufFile::open(path);
  ASSERT_TRUE(f.ok()) << f.message();
  const TensorInfo* q6 = (*f)->find_tensor("q6_k.from_f32.weight");
  ASSERT_NE(q6, nullptr);
  EXPECT_EQ(q6->type, DType::kQ6_K);
  EXPECT_EQ(q6->n_dims, 2u);
  EXPECT_EQ(q6->ne[0], 768u);
  EXPECT_EQ(q6->ne[1], 16u);
  EXPECT_EQ(q6->n_bytes, 768u / 256 * 210 * 16);
  auto missing = (*f)->get_tensor("nope.weight");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.message(), "tensor 'nope.weight' not found");
}

}  // namespace
}  // namespace gem::gguf
