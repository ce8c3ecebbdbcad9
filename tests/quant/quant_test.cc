// Q4_0 / Q8_0 / Q6_K: decoders bit-identical to the shared fixture's expected values; the Q8_0
// and Q4_0 quantisers byte-identical to gguf_synth.py's; round trips within each format's bound.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "base/quant.h"
#include "common/test_util.h"
#include "gguf/gguf.h"

namespace gem {
namespace {

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

TEST(QuantDecode, FixtureRowsAreBitIdentical) {
  const std::string gguf_path = test::fixture("quant/q6_k-rows.gguf");
  const std::string expected_path = test::fixture("quant/q6_k-rows.expected.f32");
  GEM_REQUIRE_FIXTURE(gguf_path);
  GEM_REQUIRE_FIXTURE(expected_path);
  auto f = gguf::GgufFile::open(gguf_path);
  ASSERT_TRUE(f.ok()) << f.message();
  const std::vector<uint8_t> raw = test::read_file(expected_path);
  ASSERT_EQ(raw.size(), 26880u * 4);
  std::vector<float> expected(raw.size() / 4);
  std::memcpy(expected.data(), raw.data(), raw.size());

  // The expected values are every tensor's values in the file's tensor order.
  size_t at = 0;
  int types_seen = 0;
  for (const gguf::TensorInfo& t : (*f)->tensors()) {
    ASSERT_TRUE(can_dequantize(t.type)) << t.name;
    types_seen |= 1 << static_cast<int>(t.type);
    const int64_t row = static_cast<int64_t>(t.ne[0]);
    const uint64_t row_bytes = dtype_row_bytes(*dtype_info(static_cast<uint32_t>(t.type)), t.ne[0]);
    std::vector<float> out(static_cast<size_t>(row));
    size_t mismatches = 0;
    for (uint64_t r = 0; r < t.n_elements / t.ne[0]; ++r) {
      dequantize_row(t.type, t.data + r * row_bytes, out.data(), row);
      for (int64_t j = 0; j < row; ++j, ++at) {
        ASSERT_LT(at, expected.size());
        if (bits(out[j]) != bits(expected[at]) && ++mismatches <= 5) {
          ADD_FAILURE() << t.name << " row " << r << " value " << j << ": got " << out[j]
                        << " (0x" << std::hex << bits(out[j]) << "), expected " << expected[at]
                        << " (0x" << bits(expected[at]) << std::dec << ")";
        }
      }
    }
    EXPECT_EQ(mismatches, 0u) << t.name;
  }
  EXPECT_EQ(at, expected.size());
  EXPECT_EQ(types_seen, (1 << 2) | (1 << 8) | (1 << 14));  // Q4_0, Q8_0, Q6_K all covered
}

TEST(QuantDecode, NegativeZeroScaleKeepsItsSign) {
  BlockQ4_0 b;
  b.d = 0x8000;  // -0
  std::memset(b.qs, 0x8F, sizeof(b.qs));  // low nibble 15 (+7), high nibble 8 (0)
  float out[32];
  dequantize_row_q4_0(&b, out, 32);
  EXPECT_EQ(bits(out[0]), 0x80000000u);   // -0 * 7
  EXPECT_EQ(bits(out[16]), 0x80000000u);  // -0 * +0
}

TEST(QuantDecode, PlainTypes) {
  const float x[4] = {1.0f, -2.5f, 0.0f, 65504.0f};
  uint16_t h[4];
  uint16_t bf[4];
  for (int k = 0; k < 4; ++k) {
    h[k] = f32_to_fp16(x[k]);
    bf[k] = f32_to_bf16(x[k]);
  }
  float out[4];
  dequantize_row(DType::kF16, h, out, 4);
  for (int k = 0; k < 4; ++k) EXPECT_EQ(out[k], x[k]);
  dequantize_row(DType::kBF16, bf, out, 4);
  for (int k = 0; k < 3; ++k) EXPECT_EQ(out[k], x[k]);
  EXPECT_EQ(out[3], 65536.0f);  // bf16 keeps 8 significant bits
  dequantize_row(DType::kF32, x, out, 4);
  for (int k = 0; k < 4; ++k) EXPECT_EQ(out[k], x[k]);
  EXPECT_FALSE(can_dequantize(DType::kQ4_K));
}

TEST(QuantEncode, MatchesGgufSynthByteForByte) {
  const std::string path = std::string(GEM_QUANT_DATA_DIR) + "/synth_quant_golden.bin";
  const std::vector<uint8_t> raw = test::read_file(path);
  ASSERT_GE(raw.size(), 8u) << path;
  uint32_t n_rows = 0;
  uint32_t row_len = 0;
  std::memcpy(&n_rows, raw.data(), 4);
  std::memcpy(&row_len, raw.data() + 4, 4);
  const size_t n = static_cast<size_t>(n_rows) * row_len;
  const size_t q8_bytes = n / 32 * 34;
  const size_t q4_bytes = n / 32 * 18;
  ASSERT_EQ(raw.size(), 8 + n * 4 + q8_bytes + q4_bytes);
  std::vector<float> x(n);
  std::memcpy(x.data(), raw.data() + 8, n * 4);
  const uint8_t* want_q8 = raw.data() + 8 + n * 4;
  const uint8_t* want_q4 = want_q8 + q8_bytes;

  std::vector<uint8_t> q8(q8_bytes);
  std::vector<uint8_t> q4(q4_bytes);
  quantize_row(DType::kQ8_0, x.data(), q8.data(), static_cast<int64_t>(n));
  quantize_row(DType::kQ4_0, x.data(), q4.data(), static_cast<int64_t>(n));
  for (size_t blk = 0; blk < n / 32; ++blk) {
    EXPECT_EQ(std::memcmp(q8.data() + blk * 34, want_q8 + blk * 34, 34), 0)
        << "Q8_0 block " << blk << " (row " << blk * 32 / row_len << ")";
    EXPECT_EQ(std::memcmp(q4.data() + blk * 18, want_q4 + blk * 18, 18), 0)
        << "Q4_0 block " << blk << " (row " << blk * 32 / row_len << ")";
  }
}

// Random rows of varied scale, with occasional outliers and zero groups.
std::vector<float> random_row(std::mt19937& rng, int64_t n) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> log_scale(-6.0f, 3.0f);  // fp16 subnormal scales too
  std::vector<float> x(static_cast<size_t>(n));
  const float scale = std::pow(10.0f, log_scale(rng));
  for (auto& v : x) v = normal(rng) * scale;
  x[rng() % x.size()] *= 20.0f;
  if (rng() % 3 == 0) std::fill(x.begin(), x.begin() + 16, 0.0f);
  return x;
}

// Largest |x| over [i0, i0 + len) of the block holding element j.
float block_amax(const std::vector<float>& x, size_t j, size_t len) {
  const size_t i0 = j / len * len;
  float m = 0.0f;
  for (size_t k = i0; k < i0 + len; ++k) m = std::fmax(m, std::fabs(x[k]));
  return m;
}

TEST(QuantRoundTrip, ErrorsWithinEachFormatsStep) {
  std::mt19937 rng(1234);
  const int64_t n = 768;
  for (int trial = 0; trial < 200; ++trial) {
    const std::vector<float> x = random_row(rng, n);
    std::vector<float> y(static_cast<size_t>(n));
    std::vector<uint8_t> buf(static_cast<size_t>(n) / 32 * 34);

    // Each bound adds the fp16 rounding of the scale: relative 2^-11, or absolute 2^-25 where
    // the scale is an fp16 subnormal, times the largest code.
    const float sub = std::ldexp(1.0f, -25);
    // Q8_0: step amax/127, error <= step/2 plus the scale's rounding.
    quantize_row_q8_0(x.data(), buf.data(), n);
    dequantize_row_q8_0(buf.data(), y.data(), n);
    for (size_t j = 0; j < x.size(); ++j) {
      const float step = block_amax(x, j, 32) / 127.0f;
      ASSERT_LE(std::fabs(x[j] - y[j]), step * (0.5f + 127.0f / 2048.0f) + 127.0f * sub)
          << "Q8_0 trial " << trial << " j " << j;
    }
    // Q4_0: step amax/8; one step at most (a value of the opposite sign to the largest one
    // maps to +8 and is clamped to +7), plus the scale's fp16 rounding.
    quantize_row_q4_0(x.data(), buf.data(), n);
    dequantize_row_q4_0(buf.data(), y.data(), n);
    for (size_t j = 0; j < x.size(); ++j) {
      const float step = block_amax(x, j, 32) / 8.0f;
      ASSERT_LE(std::fabs(x[j] - y[j]), step * (1.0f + 8.0f / 2048.0f) + 8.0f * sub)
          << "Q4_0 trial " << trial << " j " << j;
    }
    // Q6_K: step amax_group/32 (one step when clamped at +31), plus the sub-scale choice, at
    // most 1.5 super-block units (amax_block/(32*128)) per code, i.e. 48 units.
    quantize_row_q6_k(x.data(), buf.data(), n);
    dequantize_row_q6_k(buf.data(), y.data(), n);
    double sq_err = 0.0;
    double sq_x = 0.0;
    for (size_t j = 0; j < x.size(); ++j) {
      const float group_step = block_amax(x, j, 16) / 32.0f;
      const float unit = block_amax(x, j, 256) / (32.0f * 128.0f);
      ASSERT_LE(std::fabs(x[j] - y[j]), group_step * 1.01f + 49.0f * unit * 1.01f + 128.0f * 32.0f * sub)
          << "Q6_K trial " << trial << " j " << j << " x " << x[j] << " y " << y[j];
      sq_err += (x[j] - y[j]) * static_cast<double>(x[j] - y[j]);
      sq_x += x[j] * static_cast<double>(x[j]);
    }
    // Typical relative error of a 6-bit format: well under 5% (where the super-block scale,
    // amax/4096, is a normal fp16 number).
    if (block_amax(x, 0, n) > 0.5f) {
      EXPECT_LT(std::sqrt(sq_err / sq_x), 0.05) << "Q6_K trial " << trial;
    }
  }
}

// A GGUF with general.alignment 1 can place a tensor at an odd offset (the fuzzer found one):
// the decoders must read blocks there (no misaligned struct access; the sanitizer build checks)
// and give the same values as from an aligned copy.
TEST(QuantDecode, OddAddressesDecodeLikeAligned) {
  std::mt19937 rng(99);
  const int64_t n = 512;
  const std::vector<float> x = random_row(rng, n);
  std::vector<uint8_t> buf(static_cast<size_t>(n) / 32 * 34);
  std::vector<uint8_t> odd(buf.size() + 1);
  std::vector<float> want(static_cast<size_t>(n)), got(static_cast<size_t>(n));
  for (DType t : {DType::kQ8_0, DType::kQ4_0, DType::kQ6_K}) {
    quantize_row(t, x.data(), buf.data(), n);
    std::memcpy(odd.data() + 1, buf.data(), buf.size());
    dequantize_row(t, buf.data(), want.data(), n);
    dequantize_row(t, odd.data() + 1, got.data(), n);
    for (int64_t j = 0; j < n; ++j) ASSERT_EQ(bits(got[j]), bits(want[j])) << dtype_name(t) << " " << j;
  }
}

TEST(QuantRoundTrip, AllZeroBlocksDecodeToZero) {
  std::vector<float> x(256, 0.0f);
  std::vector<uint8_t> buf(256 / 32 * 34);  // the largest of the three encodings
  std::vector<float> y(256, 1.0f);
  for (DType t : {DType::kQ8_0, DType::kQ4_0, DType::kQ6_K}) {
    quantize_row(t, x.data(), buf.data(), 256);
    dequantize_row(t, buf.data(), y.data(), 256);
    for (float v : y) ASSERT_EQ(v, 0.0f) << dtype_name(t);
  }
}

}  // namespace
}  // namespace gem
