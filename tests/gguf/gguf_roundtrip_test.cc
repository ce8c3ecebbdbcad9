// Writer -> reader round trips: every value type, arrays (numeric, bool, string), alignments,
// tensor data and offsets, to_bytes() against write(), sparse files, progress callbacks.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "common/test_util.h"
#include "gguf/gguf.h"
#include "gguf/writer.h"

namespace gem::gguf {
namespace {

std::unique_ptr<GgufFile> parse_ok(const std::vector<uint8_t>& bytes) {
  auto f = GgufFile::parse(bytes.data(), bytes.size(), "roundtrip.gguf");
  EXPECT_TRUE(f.ok()) << f.message();
  return f.ok() ? std::move(f).value() : nullptr;
}

TEST(GgufRoundTrip, EveryScalarType) {
  GgufWriter w;
  w.add_u8("t.u8", 200);
  w.add_i8("t.i8", -100);
  w.add_u16("t.u16", 60000);
  w.add_i16("t.i16", -30000);
  w.add_u32("t.u32", 4000000000u);
  w.add_i32("t.i32", -2000000000);
  w.add_f32("t.f32", 1.5f);
  w.add_bool("t.bool_t", true);
  w.add_bool("t.bool_f", false);
  w.add_string("t.str", "h\xC3\xA9llo");
  w.add_u64("t.u64", 0xFFFFFFFFFFFFFFFFull);
  w.add_i64("t.i64", std::numeric_limits<int64_t>::min());
  w.add_f64("t.f64", 0.1);
  w.add_string("t.empty", "");
  const std::vector<uint8_t> bytes = w.to_bytes();
  auto f = parse_ok(bytes);
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->kvs().size(), 14u);
  EXPECT_EQ(f->tensors().size(), 0u);

  EXPECT_EQ(*f->get_u32("t.u8"), 200u);
  EXPECT_EQ(*f->get_i64("t.i8"), -100);
  EXPECT_EQ(*f->get_u32("t.u16"), 60000u);
  EXPECT_EQ(*f->get_i64("t.i16"), -30000);
  EXPECT_EQ(*f->get_u32("t.u32"), 4000000000u);
  EXPECT_EQ(*f->get_i64("t.i32"), -2000000000);
  EXPECT_EQ(*f->get_f32("t.f32"), 1.5f);
  EXPECT_TRUE(*f->get_bool("t.bool_t"));
  EXPECT_FALSE(*f->get_bool("t.bool_f"));
  EXPECT_EQ(*f->get_string("t.str"), "h\xC3\xA9llo");
  EXPECT_EQ(*f->get_u64("t.u64"), 0xFFFFFFFFFFFFFFFFull);
  EXPECT_EQ(*f->get_i64("t.i64"), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(f->find_kv("t.f64")->f64, 0.1);
  EXPECT_EQ(*f->get_f32("t.f64"), 0.1f);
  EXPECT_EQ(*f->get_string("t.empty"), "");
  EXPECT_EQ(f->find_kv("t.i16")->type, ValueType::kI16);

  // Range and type checks of the getters.
  EXPECT_EQ(f->get_u32("t.i8").message(), "key 't.i8': value -100 does not fit u32");
  EXPECT_EQ(f->get_u32("t.u64").message(),
            "key 't.u64': value 18446744073709551615 does not fit u32");
  EXPECT_EQ(f->get_i64("t.u64").message(),
            "key 't.u64': value 18446744073709551615 does not fit i64");
  EXPECT_EQ(f->get_u32("t.str").message(), "key 't.str': expected u32, found string");
  EXPECT_EQ(f->get_string("t.u32").message(), "key 't.u32': expected string, found u32");
  EXPECT_EQ(f->get_bool("t.u8").message(), "key 't.u8': expected bool, found u8");
  EXPECT_EQ(f->get_f32("t.i32").message(), "key 't.i32': expected f32, found i32");
  EXPECT_EQ(f->get_u32("absent").message(), "key 'absent' not found");
  EXPECT_EQ(f->find_kv("absent"), nullptr);
}

TEST(GgufRoundTrip, EveryArrayType) {
  GgufWriter w;
  const std::vector<uint8_t> u8 = {0, 1, 255};
  const std::vector<int8_t> i8 = {-128, 0, 127};
  const std::vector<uint16_t> u16 = {0, 65535};
  const std::vector<int16_t> i16 = {-32768, 32767};
  const std::vector<uint32_t> u32 = {0, 4294967295u};
  const std::vector<int32_t> i32 = {-5, 7, 1 << 30};
  const std::vector<float> f32 = {0.5f, -0.0f, 3e38f};
  const std::vector<uint64_t> u64 = {1, 1ull << 62};
  const std::vector<int64_t> i64 = {std::numeric_limits<int64_t>::min(), 9};
  const std::vector<double> f64 = {0.25, -1e300};
  const bool bools[] = {true, false, true};
  const std::vector<std::string_view> strs = {"a", "", "<0x0A>", std::string_view("\0z", 2)};
  w.add_array("a.u8", ValueType::kU8, u8.data(), u8.size());
  w.add_array("a.i8", ValueType::kI8, i8.data(), i8.size());
  w.add_array("a.u16", ValueType::kU16, u16.data(), u16.size());
  w.add_array("a.i16", ValueType::kI16, i16.data(), i16.size());
  w.add_array("a.u32", ValueType::kU32, u32.data(), u32.size());
  w.add_i32_array("a.i32", i32);
  w.add_f32_array("a.f32", f32);
  w.add_array("a.u64", ValueType::kU64, u64.data(), u64.size());
  w.add_array("a.i64", ValueType::kI64, i64.data(), i64.size());
  w.add_array("a.f64", ValueType::kF64, f64.data(), f64.size());
  w.add_bool_array("a.bool", bools);
  w.add_string_array("a.str", strs);
  w.add_i32_array("a.empty", {});
  const std::vector<uint64_t> too_big = {1ull << 63};
  w.add_array("a.u64big", ValueType::kU64, too_big.data(), too_big.size());
  const std::vector<uint8_t> bytes = w.to_bytes();
  auto f = parse_ok(bytes);
  ASSERT_NE(f, nullptr);

  EXPECT_EQ(*f->get_int_array("a.u8"), (std::vector<int64_t>{0, 1, 255}));
  EXPECT_EQ(*f->get_int_array("a.i8"), (std::vector<int64_t>{-128, 0, 127}));
  EXPECT_EQ(*f->get_int_array("a.u16"), (std::vector<int64_t>{0, 65535}));
  EXPECT_EQ(*f->get_int_array("a.i16"), (std::vector<int64_t>{-32768, 32767}));
  EXPECT_EQ(*f->get_int_array("a.u32"), (std::vector<int64_t>{0, 4294967295ll}));
  EXPECT_EQ(*f->get_int_array("a.i32"), (std::vector<int64_t>{-5, 7, 1 << 30}));
  const std::vector<float> got_f32 = *f->get_f32_array("a.f32");
  ASSERT_EQ(got_f32.size(), 3u);
  EXPECT_EQ(got_f32[0], 0.5f);
  EXPECT_TRUE(std::signbit(got_f32[1]));
  EXPECT_EQ(got_f32[2], 3e38f);
  EXPECT_EQ(*f->get_int_array("a.u64"), (std::vector<int64_t>{1, 1ll << 62}));
  EXPECT_EQ(*f->get_int_array("a.i64"),
            (std::vector<int64_t>{std::numeric_limits<int64_t>::min(), 9}));
  EXPECT_EQ(*f->get_f32_array("a.f64"), (std::vector<float>{0.25f, static_cast<float>(-1e300)}));
  EXPECT_EQ(*f->get_bool_array("a.bool"), (std::vector<bool>{true, false, true}));
  auto got_strs = f->get_string_array("a.str");
  ASSERT_TRUE(got_strs.ok()) << got_strs.message();
  EXPECT_EQ(**got_strs, strs);
  EXPECT_TRUE(f->get_int_array("a.empty")->empty());
  EXPECT_EQ(f->find_kv("a.i16")->array_type, ValueType::kI16);
  EXPECT_EQ(f->find_kv("a.i16")->array_count, 2u);

  EXPECT_EQ(f->get_int_array("a.u64big").message(),
            "key 'a.u64big': element #0 = 9223372036854775808 does not fit i64");
  EXPECT_EQ(f->get_int_array("a.f32").message(),
            "key 'a.f32': expected array of integers, found array of f32");
  EXPECT_EQ(f->get_string_array("a.i32").message(),
            "key 'a.i32': expected array of string, found array of i32");
  EXPECT_EQ(f->get_f32_array("a.bool").message(),
            "key 'a.bool': expected array of f32, found array of bool");

  // add_kv_copy reproduces every entry byte for byte.
  GgufWriter copy;
  for (const KeyValue& kv : f->kvs()) copy.add_kv_copy(kv);
  EXPECT_EQ(copy.to_bytes(), bytes);
}

// Fills tensor bytes with a position-dependent pattern so misplaced chunks show.
void pattern(uint64_t seed, uint64_t off, std::span<uint8_t> out) {
  for (size_t k = 0; k < out.size(); ++k) {
    out[k] = static_cast<uint8_t>((off + k) * 31 + seed * 7 + ((off + k) >> 8));
  }
}

std::string tensor_name(size_t k) {
  std::string name = "t";
  name += std::to_string(k);
  return name;
}

class GgufAlignmentTest : public ::testing::TestWithParam<uint64_t> {};

TEST_P(GgufAlignmentTest, TensorsLandAlignedWithTheirBytes) {
  const uint64_t alignment = GetParam();
  GgufWriter w(3, alignment);
  w.add_string("general.architecture", "test");
  const std::vector<std::vector<uint64_t>> shapes = {{7}, {32, 3}, {256, 2, 1, 2}, {5, 1, 3}};
  const DType types[] = {DType::kF32, DType::kQ8_0, DType::kQ6_K, DType::kF16};
  for (size_t k = 0; k < shapes.size(); ++k) {
    w.add_tensor(tensor_name(k), types[k], shapes[k],
                 [k](uint64_t off, std::span<uint8_t> out) { pattern(k, off, out); });
  }
  const std::vector<uint8_t> bytes = w.to_bytes();
  EXPECT_EQ(bytes.size(), w.file_size());
  auto f = parse_ok(bytes);
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->alignment(), alignment);
  EXPECT_EQ(f->data_offset(), w.data_offset());
  EXPECT_EQ(f->data_offset() % alignment, 0u);
  ASSERT_EQ(f->tensors().size(), shapes.size());
  for (size_t k = 0; k < shapes.size(); ++k) {
    const TensorInfo& t = f->tensors()[k];
    EXPECT_EQ(t.name, tensor_name(k));
    EXPECT_EQ(t.type, types[k]);
    EXPECT_EQ(t.n_dims, shapes[k].size());
    uint64_t n = 1;
    for (size_t d = 0; d < shapes[k].size(); ++d) {
      EXPECT_EQ(t.ne[d], shapes[k][d]);
      n *= shapes[k][d];
    }
    for (size_t d = shapes[k].size(); d < 4; ++d) EXPECT_EQ(t.ne[d], 1u);
    EXPECT_EQ(t.n_elements, n);
    EXPECT_EQ(t.offset % alignment, 0u);
    std::vector<uint8_t> want(t.n_bytes);
    pattern(k, 0, want);
    EXPECT_EQ(std::memcmp(t.data, want.data(), want.size()), 0) << t.name;
  }
}

INSTANTIATE_TEST_SUITE_P(Alignments, GgufAlignmentTest,
                         ::testing::Values(1u, 2u, 8u, 32u, 64u, 4096u));

TEST(GgufRoundTrip, Version2ReadsLikeVersion3) {
  GgufWriter w(2);
  w.add_u32("k", 5);
  w.add_tensor_bytes("x", DType::kI8, {3}, {1, 2, 3});
  const std::vector<uint8_t> bytes = w.to_bytes();
  auto f = parse_ok(bytes);
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->version(), 2u);
  EXPECT_EQ(f->tensors()[0].data[2], 3);
}

TEST(GgufRoundTrip, WriteMatchesToBytesAndChunksTheData) {
  // A tensor bigger than one 8 MiB chunk, so write() calls the filler several times.
  GgufWriter w;
  w.add_string("general.name", "chunks");
  const uint64_t n = (GgufWriter::kChunkBytes + 4096) / 4 + 3;
  int calls = 0;
  w.add_tensor("big", DType::kF32, {n}, [&calls](uint64_t off, std::span<uint8_t> out) {
    ++calls;
    pattern(1, off, out);
  });
  w.add_tensor_bytes("small", DType::kI8, {5}, {9, 8, 7, 6, 5});
  const std::string path = test::temp_dir() + "/chunks.gguf";
  uint64_t last_done = 0;
  uint64_t last_total = 0;
  int progress_calls = 0;
  Status s = w.write(path, [&](uint64_t done, uint64_t total) {
    EXPECT_GE(done, last_done);
    last_done = done;
    last_total = total;
    ++progress_calls;
  });
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(calls, 2);
  EXPECT_GE(progress_calls, 3);
  EXPECT_EQ(last_total, w.file_size());
  EXPECT_EQ(test::read_file(path), w.to_bytes());
  auto f = GgufFile::open(path);
  ASSERT_TRUE(f.ok()) << f.message();
  EXPECT_EQ((*f)->path(), path);
  EXPECT_EQ((*f)->find_tensor("small")->data[4], 5);
}

TEST(GgufRoundTrip, SparseWriteTakesNoDataBlocks) {
  GgufWriter w;
  w.add_string("general.name", "sparse");
  w.add_tensor("huge", DType::kQ4_0, {1ull << 20, 1024}, [](uint64_t, std::span<uint8_t>) {
    ADD_FAILURE() << "a sparse write must not call the filler";
  });
  const std::string path = test::temp_dir() + "/sparse.gguf";
  const Status s = w.write(path, {}, /*sparse_data=*/true);
  ASSERT_TRUE(s.ok()) << s.message();
  struct stat st;
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), w.file_size());
  EXPECT_GT(st.st_size, 500ll << 20);
  EXPECT_LT(st.st_blocks * 512, 1ll << 20);  // the data is a hole
  auto f = GgufFile::open(path);
  ASSERT_TRUE(f.ok()) << f.message();
  const TensorInfo* t = (*f)->find_tensor("huge");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->n_bytes, (1ull << 20) / 32 * 18 * 1024);
  EXPECT_EQ(t->data[t->n_bytes - 1], 0);
}

TEST(GgufRoundTrip, WriteToAMissingFolderFails) {
  GgufWriter w;
  const Status s = w.write("/nonexistent-gem-dir/x.gguf");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("/nonexistent-gem-dir/x.gguf: cannot create"), std::string::npos)
      << s.message();
}

}  // namespace
}  // namespace gem::gguf
