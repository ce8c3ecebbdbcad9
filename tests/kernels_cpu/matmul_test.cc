// matmul (SIMD fast path), matmul_scalar (portable path) and get_row against the references:
// seeded random weights of every type at Gemma-4-like shapes (scaled down) and awkward ones,
// 1..64 tokens, 1 and 3 threads; get_row bit-exact against a direct decoder and the fixture.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/cpu/matmul.h"
#include "backend/cpu/thread_pool.h"
#include "base/dtype.h"
#include "common/test_util.h"

namespace gem::cpu {
namespace {

uint64_t base_seed() {
  const char* s = std::getenv("GEM_TEST_SEED");
  return s != nullptr ? std::strtoull(s, nullptr, 10) : 20261130ull;
}

// A weight matrix with random contents: random quant codes and scales over their whole range
// (including Q8_0's -128 and Q6_K's -128 sub-scale), so every bit of the format is exercised.
struct RandomWeights {
  std::vector<uint8_t> bytes;
  model::TensorView view;
};

int64_t block_elems(DType t) {
  return t == DType::kQ6_K ? kQK_K : (t == DType::kF32 ? 1 : 32);
}
int64_t block_bytes(DType t) {
  switch (t) {
    case DType::kF32: return 4;
    case DType::kQ4_0: return sizeof(BlockQ4_0);
    case DType::kQ8_0: return sizeof(BlockQ8_0);
    case DType::kQ6_K: return sizeof(BlockQ6_K);
    default: return 0;
  }
}

RandomWeights make_weights(DType t, int64_t rows, int64_t cols, std::mt19937_64& rng) {
  RandomWeights w;
  const int64_t nb = cols / block_elems(t);
  w.bytes.resize(static_cast<size_t>(rows * nb * block_bytes(t)));
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(0.002f, 0.03f);
  std::normal_distribution<float> normal(0.0f, 1.0f / std::sqrt(static_cast<float>(cols)));
  uint8_t* p = w.bytes.data();
  for (int64_t i = 0; i < rows * nb; ++i) {
    switch (t) {
      case DType::kF32: {
        const float v = normal(rng);
        std::memcpy(p, &v, 4);
        break;
      }
      case DType::kQ4_0:
      case DType::kQ8_0:
      case DType::kQ6_K: {
        const int64_t bb = block_bytes(t);
        for (int64_t j = 0; j < bb; ++j) p[j] = static_cast<uint8_t>(byte(rng));
        // A sane fp16 scale, sometimes negative (the formats allow it).
        const float s = (byte(rng) & 1 ? 1.0f : -1.0f) * scale(rng);
        const uint16_t h = f32_to_fp16(t == DType::kQ6_K ? s / 64.0f : s);
        if (t == DType::kQ6_K) {
          std::memcpy(p + offsetof(BlockQ6_K, d), &h, 2);
        } else {
          std::memcpy(p, &h, 2);
        }
        break;
      }
      default:
        break;
    }
    p += block_bytes(t);
  }
  w.view.name = "test.weight";
  w.view.type = t;
  w.view.data = w.bytes.data();
  w.view.rows = rows;
  w.view.cols = cols;
  w.view.n_bytes = w.bytes.size();
  return w;
}

// Activations like a normed hidden state: mostly N(0, 1) with a few large outliers, so blocks
// have different scales.
std::vector<float> make_x(int n_tokens, int64_t cols, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> pick(0, 63);
  std::vector<float> x(static_cast<size_t>(n_tokens * cols));
  for (float& v : x) v = normal(rng) * (pick(rng) == 0 ? 8.0f : 1.0f);
  return x;
}

// Σ_c |w_rc| |x_tc| for every output: the scale of every accumulation error below.
std::vector<double> abs_products(const model::TensorView& w, const std::vector<float>& x,
                                 int n_tokens) {
  std::vector<double> out(static_cast<size_t>(n_tokens * w.rows));
  std::vector<float> row(static_cast<size_t>(w.cols));
  for (int64_t r = 0; r < w.rows; ++r) {
    get_row(w, r, row.data());
    for (int t = 0; t < n_tokens; ++t) {
      double s = 0.0;
      for (int64_t c = 0; c < w.cols; ++c) s += std::fabs(static_cast<double>(row[c]) * x[t * w.cols + c]);
      out[t * w.rows + r] = s;
    }
  }
  return out;
}

// Bound on |W·x - W·x̂| from the activation rounding (matmul.h), per output:
//   32-blocks (Q4_0, Q8_0): q = round(x·127/amax) is within 1/2 (+ a few ulps of the product)
//   of x·127/amax, and x̂ = q·d̃ with d̃ = fp16(amax/127) = (amax/127)(1+ε), |ε| ≤ 2^-11. So
//   |x̂ - x| ≤ (amax/127)·(1/2 + 2^-16) + |q|·(amax/127)·2^-11 ≤ amax·(0.50002/127 + 2^-11),
//   and |Σ_i w_i (x̂_i - x_i)| ≤ Σ_i |w_i| · amax_b · (0.50002/127 + 2^-11) per block b:
//   about 2^-8 of Σ|w|·amax per block, the "~2^-8 per block" rule.
//   256-blocks (Q6_K): the same with d = 1/(-127/m) in f32 (ε ≤ 2^-22) over the super-block.
std::vector<double> rounding_bound(const model::TensorView& w, const std::vector<float>& x,
                                   int n_tokens) {
  std::vector<double> out(static_cast<size_t>(n_tokens * w.rows), 0.0);
  if (w.type == DType::kF32) return out;
  const int64_t blk = w.type == DType::kQ6_K ? 256 : 32;
  const double per_amax = 0.50002 / 127.0 + (w.type == DType::kQ6_K ? std::ldexp(1.0, -22)
                                                                      : std::ldexp(1.0, -11));
  std::vector<float> row(static_cast<size_t>(w.cols));
  for (int64_t r = 0; r < w.rows; ++r) {
    get_row(w, r, row.data());
    for (int t = 0; t < n_tokens; ++t) {
      double s = 0.0;
      for (int64_t b = 0; b < w.cols / blk; ++b) {
        double amax = 0.0, wsum = 0.0;
        for (int64_t i = b * blk; i < (b + 1) * blk; ++i) {
          amax = std::max(amax, static_cast<double>(std::fabs(x[t * w.cols + i])));
          wsum += std::fabs(static_cast<double>(row[i]));
        }
        s += wsum * amax * per_amax;
      }
      out[t * w.rows + r] = s;
    }
  }
  return out;
}

// Float accumulation in the kernels: each block product dw·dx·isum is rounded twice and added
// into one of 8 lanes (AVX2) or one scalar sum, at most cols/block + 8 additions deep, then
// lanes are summed. With unit roundoff u = 2^-24, |error| ≤ (depth + 3)·u·Σ|terms|; Σ|terms| ≤
// Σ|w||x̂| ≤ 1.01·Σ|w||x|. F32 weights: depth ≤ cols/8 + 8 (8 lanes) or cols (scalar).
double accumulation_factor(DType t, int64_t cols) {
  const int64_t depth = t == DType::kF32 ? cols : cols / block_elems(t) + 8;
  return 1.01 * static_cast<double>(depth + 3) * std::ldexp(1.0, -24);
}

struct Case {
  DType type;
  int64_t rows;
  int64_t cols;
  int n_tokens;
};

std::string describe(const Case& c, uint64_t seed, int threads, const char* path) {
  return std::string("type=") + std::string(dtype_name(c.type)) + " rows=" + std::to_string(c.rows) +
         " cols=" + std::to_string(c.cols) + " n_tokens=" + std::to_string(c.n_tokens) +
         " threads=" + std::to_string(threads) + " path=" + path + " seed=" + std::to_string(seed);
}

// Shapes: Gemma 4 widths (3840 = 12B n_embd, 5376 = 31B n_embd; both 15/21 super-blocks)
// and small ones; rows 1, 3, 127, 256, and 5, 19, 37 (not multiples of the 2/4-row tiles or
// the 16-row work unit); tokens 1, 2, 7 (a 4-token tile plus 3), 64 (the token-split path when
// rows < threads), 80 at 15360 cols (the 12B's ffn_down width; 37 rows = 3 work units, so 3
// threads still split rows): several token chunks of up to 1 MiB of rounded x, the last one
// shorter, for every type.
// 32-value blocks also get odd block counts (the AVX2 Q4_0 tile works on block pairs and has a
// separate last-block path) with 1..9 tokens (every tile width and remainder) and odd rows.
std::vector<Case> cases_for(DType t) {
  std::vector<Case> cases = {{t, 1, 256, 1},   {t, 3, 512, 2},    {t, 127, 256, 7}, {t, 256, 512, 64},
                             {t, 37, 3840, 7}, {t, 19, 5376, 2},  {t, 256, 3840, 1}, {t, 127, 512, 64},
                             {t, 5, 5376, 64}, {t, 3, 256, 64},  {t, 37, 15360, 80},
                             // 12B widths with rows in 16-row groups (the packed layout):
                             // decode, a tile remainder, and more tokens than one chunk.
                             {t, 64, 3840, 1},  {t, 48, 15360, 9}, {t, 32, 4096, 3},
                             {t, 16, 3840, 130}};
  if (t != DType::kQ6_K) {
    for (int n = 1; n <= 9; ++n) cases.push_back({t, 5 + 2 * n, 32 * (2 * n + 1), n});
    cases.push_back({t, 3, 32, 1});
    cases.push_back({t, 33, 1056, 13});
    cases.push_back({t, 40, 3872, 66});
  }
  return cases;
}

class MatmulTest : public ::testing::TestWithParam<DType> {};

TEST_P(MatmulTest, FastAndScalarMatchReference) {
  const DType type = GetParam();
  ThreadPool pool1(1), pool3(3);
  uint64_t seed = base_seed() + static_cast<uint64_t>(type) * 1000;
  for (const Case& c : cases_for(type)) {
    ++seed;
    std::mt19937_64 rng(seed);
    RandomWeights w = make_weights(c.type, c.rows, c.cols, rng);
    const std::vector<float> x = make_x(c.n_tokens, c.cols, rng);
    // The x the fast path multiplies with, and the two references.
    std::vector<float> xr(x.size());
    for (int t = 0; t < c.n_tokens; ++t) {
      round_activations(c.type, x.data() + t * c.cols, c.cols, xr.data() + t * c.cols);
    }
    std::vector<float> y_ref(static_cast<size_t>(c.n_tokens * c.rows));
    std::vector<float> y_ref_rounded(y_ref.size());
    matmul_ref(w.view, x.data(), c.n_tokens, y_ref.data());
    matmul_ref(w.view, xr.data(), c.n_tokens, y_ref_rounded.data());
    const std::vector<double> mag = abs_products(w.view, x, c.n_tokens);
    const std::vector<double> bound = rounding_bound(w.view, x, c.n_tokens);
    const double acc = accumulation_factor(c.type, c.cols);

    // Every path this CPU runs, on the file's layout and (x86 SIMD paths) the packed one.
    OwnedPacked packed;
    if (packable(w.view)) packed = pack_owned(w.view, pool3);
    struct Run {
      Isa isa;
      ThreadPool* pool;
      const PackedMatrix* packed;
    };
    std::vector<Run> runs;
    for (Isa isa : kAllIsas) {
      if (!isa_supported(isa)) continue;
      runs.push_back({isa, &pool1, nullptr});
      runs.push_back({isa, &pool3, nullptr});
      if (packed.storage && (isa == Isa::kAvx2 || isa == Isa::kAvxVnni || isa == Isa::kAvx512 ||
                              isa == Isa::kAmx)) {
        runs.push_back({isa, &pool1, &packed.view});
        runs.push_back({isa, &pool3, &packed.view});
      }
    }
    for (const Run& run : runs) {
      const std::string path = std::string(isa_name(run.isa)) + (run.packed ? "+packed" : "");
      const std::string what = describe(c, seed, run.pool->size(), path.c_str());
      SCOPED_TRACE(what);
      std::vector<float> y(y_ref.size(), std::nanf(""));
      matmul_on(run.isa, w.view, x.data(), c.n_tokens, y.data(), *run.pool, run.packed);
      int bad_tight = 0, bad_bound = 0;
      double worst = 0.0;
      for (size_t i = 0; i < y.size(); ++i) {
        // (1) Against the reference on the rounded x: only float accumulation differs.
        const double tol_tight = acc * mag[i] + 1e-30;
        const double e_tight = std::fabs(static_cast<double>(y[i]) - y_ref_rounded[i]);
        // (2) Against the exact reference: the rounding bound on top.
        const double tol = bound[i] + 2 * acc * mag[i] + 1e-30;
        const double e = std::fabs(static_cast<double>(y[i]) - y_ref[i]);
        worst = std::max(worst, e / tol);
        if (!(e_tight <= tol_tight) && bad_tight++ < 3) {
          ADD_FAILURE() << "vs reference(rounded x) at token " << i / c.rows << " row "
                        << i % c.rows << ": got " << y[i] << " want " << y_ref_rounded[i]
                        << " |err| " << e_tight << " > tol " << tol_tight;
        }
        if (!(e <= tol) && bad_bound++ < 3) {
          ADD_FAILURE() << "vs reference(x) at token " << i / c.rows << " row " << i % c.rows
                        << ": got " << y[i] << " want " << y_ref[i] << " |err| " << e
                        << " > bound " << tol;
        }
      }
      EXPECT_EQ(bad_tight, 0);
      EXPECT_EQ(bad_bound, 0);
      // The bound is not vacuous: 8-bit rounding must actually be visible on big cases.
      if (c.type != DType::kF32 && c.rows * c.n_tokens >= 64) {
        EXPECT_GT(worst, 1e-4) << what;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Types, MatmulTest,
                         ::testing::Values(DType::kF32, DType::kQ4_0, DType::kQ8_0, DType::kQ6_K),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// Extremes: the largest codes and activations everywhere (maddubs saturates at 2^15 if the
// kernel pairs operands wrongly; Q8_0 -128 weights, Q6_K code 0 and 63 with sub-scale -128).
TEST(MatmulExtremes, NoSaturation) {
  ThreadPool pool(2);
  const int64_t cols = 512;
  for (DType t : {DType::kQ4_0, DType::kQ8_0, DType::kQ6_K}) {
    for (int pattern = 0; pattern < 4; ++pattern) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " pattern " + std::to_string(pattern));
      const int64_t rows = 16;
      std::vector<uint8_t> bytes(static_cast<size_t>(rows * cols / block_elems(t) * block_bytes(t)));
      const uint16_t one = f32_to_fp16(pattern & 1 ? -0.5f : 0.25f);
      for (size_t off = 0; off < bytes.size(); off += static_cast<size_t>(block_bytes(t))) {
        uint8_t* p = bytes.data() + off;
        const uint8_t code = pattern < 2 ? 0x00 : 0xFF;  // most negative / most positive
        if (t == DType::kQ8_0) {
          std::memcpy(p, &one, 2);
          std::memset(p + 2, pattern < 2 ? 0x80 : 0x7F, 32);  // -128 or 127
        } else if (t == DType::kQ4_0) {
          std::memcpy(p, &one, 2);
          std::memset(p + 2, code, 16);
        } else {
          std::memset(p, code, 192);  // ql, qh: codes 0 or 63
          std::memset(p + 192, 0x80, 16);  // sub-scales -128
          std::memcpy(p + 208, &one, 2);
        }
      }
      model::TensorView w{"extreme.weight", t, bytes.data(), rows, cols, bytes.size()};
      std::vector<float> x(static_cast<size_t>(cols), pattern & 2 ? -3.0f : 3.0f);
      std::vector<float> y(rows), y_ref(rows);
      matmul_ref(w, x.data(), 1, y_ref.data());
      OwnedPacked packed;
      if (packable(w)) packed = pack_owned(w, pool);
      for (Isa isa : kAllIsas) {
        if (!isa_supported(isa)) continue;
        const PackedMatrix* with = packed.storage ? &packed.view : nullptr;
        for (const PackedMatrix* pm : {static_cast<const PackedMatrix*>(nullptr), with}) {
          matmul_on(isa, w, x.data(), 1, y.data(), pool, pm);
          for (int64_t r = 0; r < rows; ++r) {
            // x is constant, so rounding is exact up to the fp16 scale (2^-11 relative).
            EXPECT_NEAR(y[r], y_ref[r], std::fabs(y_ref[r]) * 1e-3)
                << isa_name(isa) << (pm ? "+packed" : "") << " row " << r;
          }
        }
      }
    }
  }
}

// ---- get_row ----

// A direct decoder written from the format description (shared/fixtures/quant/q6_k-rows.json),
// in the 32-lane loop shape of the original C decoders rather than matmul.cc's per-element one.
void decode_direct(DType t, const uint8_t* row, int64_t cols, float* out) {
  auto f16 = [](const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return fp16_to_f32(h);
  };
  if (t == DType::kF32) {
    std::memcpy(out, row, static_cast<size_t>(cols) * 4);
  } else if (t == DType::kQ8_0) {
    for (int64_t b = 0; b < cols / 32; ++b) {
      const uint8_t* p = row + 34 * b;
      for (int j = 0; j < 32; ++j) out[32 * b + j] = static_cast<float>(static_cast<int8_t>(p[2 + j])) * f16(p);
    }
  } else if (t == DType::kQ4_0) {
    for (int64_t b = 0; b < cols / 32; ++b) {
      const uint8_t* p = row + 18 * b;
      for (int j = 0; j < 32; ++j) {
        const int nib = j < 16 ? (p[2 + j] & 15) : (p[2 + j - 16] >> 4);
        out[32 * b + j] = static_cast<float>(nib - 8) * f16(p);
      }
    }
  } else if (t == DType::kQ6_K) {
    for (int64_t b = 0; b < cols / 256; ++b) {
      const uint8_t* p = row + 210 * b;
      const uint8_t* ql = p;
      const uint8_t* qh = p + 128;
      const int8_t* sc = reinterpret_cast<const int8_t*>(p + 192);
      const float d = f16(p + 208);
      float* o = out + 256 * b;
      for (int half = 0; half < 2; ++half) {
        for (int l = 0; l < 32; ++l) {
          const int c0 = (ql[l] & 15) | ((qh[l] >> 0) & 3) << 4;
          const int c1 = (ql[l + 32] & 15) | ((qh[l] >> 2) & 3) << 4;
          const int c2 = (ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4;
          const int c3 = (ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4;
          o[l] = d * static_cast<float>(sc[(l + 0) / 16]) * static_cast<float>(c0 - 32);
          o[l + 32] = d * static_cast<float>(sc[(l + 32) / 16]) * static_cast<float>(c1 - 32);
          o[l + 64] = d * static_cast<float>(sc[(l + 64) / 16]) * static_cast<float>(c2 - 32);
          o[l + 96] = d * static_cast<float>(sc[(l + 96) / 16]) * static_cast<float>(c3 - 32);
        }
        ql += 64;
        qh += 32;
        sc += 8;
        o += 128;
      }
    }
  }
}

TEST(GetRow, BitExactAgainstDirectDecoder) {
  const uint64_t seed = base_seed() + 77;
  std::mt19937_64 rng(seed);
  SCOPED_TRACE("seed=" + std::to_string(seed));
  for (DType t : {DType::kF32, DType::kQ4_0, DType::kQ8_0, DType::kQ6_K}) {
    RandomWeights w = make_weights(t, 9, 768, rng);
    std::vector<float> got(768), want(768);
    for (int64_t r = 0; r < w.view.rows; ++r) {
      get_row(w.view, r, got.data());
      decode_direct(t, w.view.data + r * w.view.row_bytes(), 768, want.data());
      ASSERT_EQ(std::memcmp(got.data(), want.data(), 768 * 4), 0)
          << dtype_name(t) << " row " << r;
    }
  }
}

// The fixture's rows (crafted extremes: ±65504 and subnormal scales, -0, all codes) decoded by
// gguf-py, compared bit for bit.
TEST(GetRow, BitExactAgainstFixture) {
  const std::string gguf_path = test::fixture("quant/q6_k-rows.gguf");
  const std::string json_path = test::fixture("quant/q6_k-rows.json");
  const std::string exp_path = test::fixture("quant/q6_k-rows.expected.f32");
  GEM_REQUIRE_FIXTURE(gguf_path);
  GEM_REQUIRE_FIXTURE(json_path);
  GEM_REQUIRE_FIXTURE(exp_path);
  const std::vector<uint8_t> file = test::read_file(gguf_path);
  const std::vector<uint8_t> expected = test::read_file(exp_path);
  const auto meta = nlohmann::json::parse(test::read_text(json_path));
  // The data section is the file's tail: it ends with the last tensor's bytes.
  uint64_t data_bytes = 0;
  for (const auto& t : meta["tensors"]) {
    data_bytes = std::max<uint64_t>(data_bytes, t["data_offset"].get<uint64_t>() +
                                                    t["rows"].get<uint64_t>() * t["bytes_per_row"].get<uint64_t>());
  }
  ASSERT_GE(file.size(), data_bytes);
  const uint64_t data_start = file.size() - data_bytes;
  int n_tensors = 0;
  for (const auto& t : meta["tensors"]) {
    const std::string type = t["type"];
    const DType dt = type == "Q4_0" ? DType::kQ4_0 : type == "Q8_0" ? DType::kQ8_0 : DType::kQ6_K;
    const int64_t rows = t["rows"], cols = t["row_values"];
    const uint64_t off = data_start + t["data_offset"].get<uint64_t>();
    const std::string name = t["name"];
    model::TensorView w{name, dt, file.data() + off, rows, cols,
                        static_cast<uint64_t>(rows) * t["bytes_per_row"].get<uint64_t>()};
    ASSERT_EQ(w.row_bytes(), t["bytes_per_row"].get<uint64_t>()) << name;
    std::vector<float> got(static_cast<size_t>(cols));
    for (int64_t r = 0; r < rows; ++r) {
      get_row(w, r, got.data());
      const uint64_t eo = (t["expected_offset_values"].get<uint64_t>() + r * cols) * 4;
      ASSERT_LE(eo + cols * 4, expected.size());
      ASSERT_EQ(std::memcmp(got.data(), expected.data() + eo, static_cast<size_t>(cols) * 4), 0)
          << name << " row " << r;
    }
    ++n_tensors;
  }
  EXPECT_EQ(n_tensors, 6);
}

// The vector rounding matmul runs is round_activations bit for bit: random blocks of every
// magnitude, an all-zero block, a block with one non-zero value, and exact .5 ties (amax 127,
// so x·127/amax = x: 2.5 -> 2, 3.5 -> 4, -0.5 -> -0).
TEST(Matmul, SimdRoundingIsRoundActivations) {
  std::mt19937_64 rng(base_seed() + 77);
  std::normal_distribution<float> n(0.0f, 1.0f);
  const int64_t cols = 3840;
  std::vector<float> x(static_cast<size_t>(cols));
  for (int64_t i = 0; i < cols; ++i) x[i] = std::ldexp(n(rng), static_cast<int>((i / 32) % 13) - 6);
  for (int64_t i = 0; i < 32; ++i) x[32 + i] = 0.0f;
  for (int64_t i = 0; i < 32; ++i) x[64 + i] = i == 9 ? -3.0f : 0.0f;
  for (int64_t i = 0; i < 32; ++i) {
    x[96 + i] = i == 0 ? 127.0f : (i % 2 ? 0.5f : 1.0f) + static_cast<float>(i);
  }
  x[96 + 5] = -0.5f;
  for (DType t : {DType::kF32, DType::kQ4_0, DType::kQ8_0, DType::kQ6_K}) {
    std::vector<float> want(x.size()), got(x.size());
    round_activations(t, x.data(), cols, want.data());
    round_activations_simd(t, x.data(), cols, got.data());
    int bad = 0;
    for (int64_t i = 0; i < cols; ++i) {
      uint32_t gw, ww;
      std::memcpy(&gw, &got[i], 4);
      std::memcpy(&ww, &want[i], 4);
      if (gw != ww && bad++ < 5) {
        ADD_FAILURE() << dtype_name(t) << " element " << i << ": got " << got[i] << " want "
                      << want[i];
      }
    }
    EXPECT_EQ(bad, 0) << dtype_name(t);
  }
}

// Paths whose Q4_0/Q8_0 products equal the AVX-512 packed kernel's bit for bit, checked on fresh
// random weights and activations at `shapes` and on the extreme codes (every Q4_0 nibble 0 or
// 15, every Q8_0 weight -128 or 127) under the largest activations (per-block amax: all q =
// ±127), with 1 and 3 threads.
struct BitShape {
  int64_t rows, cols;
  int n_tokens;
};
void expect_equals_avx512(Isa isa, std::initializer_list<BitShape> shapes, uint64_t seed) {
  ThreadPool pool1(1), pool3(3);
  for (DType t : {DType::kQ4_0, DType::kQ8_0}) {
    for (const BitShape& sh : shapes) {
      for (int extreme = 0; extreme < 2; ++extreme) {
        std::mt19937_64 rng(++seed);
        RandomWeights w = make_weights(t, sh.rows, sh.cols, rng);
        std::vector<float> x = make_x(sh.n_tokens, sh.cols, rng);
        if (extreme == 1) {
          // Largest codes of one sign per row, activations at ±3.
          const int64_t bb = block_bytes(t);
          for (size_t off = 0; off < w.bytes.size(); off += static_cast<size_t>(bb)) {
            const bool hi = (off / static_cast<size_t>(bb)) % 3 != 0;
            if (t == DType::kQ4_0) {
              std::memset(w.bytes.data() + off + 2, hi ? 0xFF : 0x00, 16);
            } else {
              std::memset(w.bytes.data() + off + 2, hi ? 0x7F : 0x80, 32);
            }
          }
          for (size_t i = 0; i < x.size(); ++i) x[i] = (i / 32) % 2 ? -3.0f : 3.0f;
        }
        ASSERT_TRUE(packable(w.view));
        const OwnedPacked packed = pack_owned(w.view, pool3);
        const size_t n = static_cast<size_t>(sh.n_tokens * sh.rows);
        std::vector<float> want(n, std::nanf("")), got(n, std::nanf(""));
        matmul_on(Isa::kAvx512, w.view, x.data(), sh.n_tokens, want.data(), pool1, &packed.view);
        for (ThreadPool* pool : {&pool1, &pool3}) {
          std::fill(got.begin(), got.end(), std::nanf(""));
          matmul_on(isa, w.view, x.data(), sh.n_tokens, got.data(), *pool, &packed.view);
          int bad = 0;
          for (size_t i = 0; i < n; ++i) {
            if (std::memcmp(&got[i], &want[i], sizeof(float)) != 0 && bad++ < 3) {
              ADD_FAILURE() << dtype_name(t) << " rows=" << sh.rows << " cols=" << sh.cols
                            << " tokens=" << sh.n_tokens << " extreme=" << extreme
                            << " threads=" << pool->size() << ": token " << i / sh.rows
                            << " row " << i % sh.rows << ": " << isa_name(isa) << " " << got[i]
                            << ", avx512 " << want[i];
            }
          }
          EXPECT_EQ(bad, 0);
        }
      }
    }
  }
}

// The AMX path (tile products for ranges of 16 and more tokens, the AVX-512 kernel for the rest)
// equals the AVX-512 packed kernel bit for bit: the same exact integer block sums, scaled by the
// same float operations in the same order (matmul_amx.cc). At the 12B/31B widths and the 12B's
// ffn_down width: token counts that are whole 16-token tiles, tiles plus a remainder, and more
// than one chunk.
TEST(Matmul, AmxEqualsAvx512BitForBit) {
  if (!isa_supported(Isa::kAmx)) {
    GTEST_SKIP() << "no AMX-INT8 here (" << isa_description() << "): the AMX path is compiled, "
                 << "not run";
  }
  expect_equals_avx512(Isa::kAmx,
                       {{48, 3840, 16}, {64, 3840, 130}, {32, 15360, 37}, {32, 5376, 64},
                        {16, 256, 17}, {80, 4096, 512}},
                       base_seed() + 7000);
}

// The AVX-VNNI path's packed Q4_0/Q8_0 kernels are the AVX-512 kernel at half the width
// (matmul_avxvnni.cc), so the two agree bit for bit. Decode (both halves in one pass), 4-token
// tiles with remainders, more than one chunk.
TEST(Matmul, AvxVnniEqualsAvx512BitForBit) {
  if (!isa_supported(Isa::kAvxVnni) || !isa_supported(Isa::kAvx512)) {
    GTEST_SKIP() << "needs AVX-VNNI and AVX-512 VNNI (" << isa_description() << ")";
  }
  expect_equals_avx512(Isa::kAvxVnni,
                       {{48, 3840, 1}, {64, 3840, 7}, {32, 15360, 9}, {32, 5376, 130},
                        {16, 256, 2}, {80, 4096, 1}},
                       base_seed() + 8000);
}

// The runtime dispatch: matmul runs the path isa.cc chose, which is the best one this CPU and
// binary support unless GEM_CPU_ISA lowered it; every x86 build carries both SIMD paths.
TEST(Matmul, DispatchChoosesTheBestSupportedPath) {
  const std::string_view isa = matmul_isa();
  EXPECT_EQ(isa, isa_name(active_isa()));
  EXPECT_TRUE(isa_supported(active_isa()));
  EXPECT_TRUE(isa_supported(Isa::kScalar));
  const char* forced = std::getenv("GEM_CPU_ISA");
  if (forced != nullptr && forced[0] != '\0') {
    // The override (ctest's kernels_cpu_test_avx2 sets it): taken when this CPU has that path.
    for (Isa i : kAllIsas) {
      if (isa_name(i) == forced && isa_supported(i)) {
        EXPECT_EQ(active_isa(), i);
      }
    }
  } else {
    for (Isa better : {Isa::kAmx, Isa::kAvx512, Isa::kAvxVnni, Isa::kAvx2, Isa::kNeon}) {
      if (isa_supported(better)) {
        EXPECT_EQ(active_isa(), better);
        break;
      }
    }
  }
#if defined(__x86_64__)
  EXPECT_FALSE(isa_supported(Isa::kNeon));
  if (__builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bw")) {
    EXPECT_TRUE(isa_supported(Isa::kAvx512));
  }
  if (__builtin_cpu_supports("avx2")) {
    EXPECT_TRUE(isa_supported(Isa::kAvx2));
  }
#endif
  std::printf("matmul path: %s\n", isa_description().c_str());
}

// The packed layout is the file's bytes rearranged (packed.h): every quant byte and scale of
// every row lands where the layout says, and nothing else is written.
TEST(Packed, LayoutIsThePermutedFileBytes) {
  std::mt19937_64 rng(base_seed() + 99);
  ThreadPool pool(2);
  for (DType t : {DType::kQ4_0, DType::kQ8_0}) {
    RandomWeights w = make_weights(t, 48, 3840, rng);
    ASSERT_TRUE(packable(w.view));
    const OwnedPacked p = pack_owned(w.view, pool);
    const int64_t nb = 3840 / 32, qb = t == DType::kQ4_0 ? 16 : 32;
    const int64_t bb = block_bytes(t);
    EXPECT_EQ(packed_bytes(w.view), w.bytes.size());
    int bad = 0;
    for (int64_t r = 0; r < 48; ++r) {
      const int64_t g = r / 16, lane = r % 16;
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* blk = w.bytes.data() + r * nb * bb + b * bb;
        uint16_t d;
        std::memcpy(&d, blk, 2);
        if (p.view.d[(g * nb + b) * 16 + lane] != d) ++bad;
        for (int64_t i = 0; i < qb; ++i) {
          const uint8_t got = p.view.qs[(g * nb + b) * p.view.group_block_bytes() + 64 * (i / 4) + 4 * lane + i % 4];
          if (got != blk[2 + i]) ++bad;
        }
      }
    }
    EXPECT_EQ(bad, 0) << dtype_name(t);
  }
  RandomWeights odd = make_weights(DType::kQ4_0, 40, 256, rng);
  EXPECT_FALSE(packable(odd.view));  // 40 rows: not whole groups, stays on the file's layout
}

// Q6_K's packed form, read back as packed.h describes it: every row's codes (low nibbles from
// the ql slices, high bits from the qh slices), group scales and d equal the file block's.
TEST(Packed, Q6KLayoutHoldsEveryCodeScaleAndD) {
  std::mt19937_64 rng(base_seed() + 98);
  ThreadPool pool(2);
  const int64_t rows = 48, cols = 3840, ns = cols / 256;
  RandomWeights w = make_weights(DType::kQ6_K, rows, cols, rng);
  ASSERT_TRUE(packable(w.view));
  const OwnedPacked p = pack_owned(w.view, pool);
  EXPECT_EQ(packed_bytes(w.view), w.bytes.size());
  ASSERT_NE(p.view.sc, nullptr);
  int bad = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t g = r / 16, lane = r % 16;
    for (int64_t s = 0; s < ns; ++s) {
      BlockQ6_K blk;
      std::memcpy(&blk, w.bytes.data() + (r * ns + s) * sizeof(BlockQ6_K), sizeof(blk));
      const int64_t gs = g * ns + s;
      if (p.view.d[gs * 16 + lane] != blk.d) ++bad;
      for (int j = 0; j < 16; ++j) {
        if (p.view.sc[gs * 256 + 16 * j + lane] != blk.scales[j]) ++bad;
      }
      for (int e = 0; e < 256; ++e) {
        const int b = e / 32, l = e % 32;
        const bool upper = l >= 16;       // the slice's high nibble
        const int k = (l % 16) / 4, i = l % 4;
        const uint8_t* base = p.view.qs + gs * 3072 + 384 * b + 4 * lane + i;
        const int low = upper ? base[64 * k] >> 4 : base[64 * k] & 15;
        const int high = (base[256 + 64 * (k / 2)] >> (4 * (k % 2) + (upper ? 2 : 0))) & 3;
        if ((low | high << 4) != q6k_code(blk, e) && bad++ < 5) {
          ADD_FAILURE() << "row " << r << " super-block " << s << " element " << e << ": packed code "
                        << (low | high << 4) << ", file code " << q6k_code(blk, e);
        }
      }
    }
  }
  EXPECT_EQ(bad, 0);
  RandomWeights odd = make_weights(DType::kQ6_K, 24, 256, rng);
  EXPECT_FALSE(packable(odd.view));
}

// Every path multiplies each token on its own: an n-token product equals the n one-token
// products (decode) bit for bit, on the file's layout and the packed one, for every quantised
// type at the 12B's widths and token counts that cover every tile width and remainder. The
// speculative verification and the batched rows pass rely on it (their rows equal decode).
TEST(Matmul, TokensEqualTheirOneTokenProductsBitForBit) {
  ThreadPool pool(2);
  uint64_t seed = base_seed() + 5000;
  for (DType t : {DType::kQ4_0, DType::kQ8_0, DType::kQ6_K}) {
    for (int n : {2, 3, 5, 8, 9}) {
      std::mt19937_64 rng(++seed);
      const int64_t rows = 48, cols = t == DType::kQ6_K ? 3840 : 4096;
      RandomWeights w = make_weights(t, rows, cols, rng);
      const std::vector<float> x = make_x(n, cols, rng);
      const OwnedPacked packed = pack_owned(w.view, pool);
      for (Isa isa : kAllIsas) {
        if (!isa_supported(isa)) continue;
        for (const PackedMatrix* pm : {static_cast<const PackedMatrix*>(nullptr), &packed.view}) {
          std::vector<float> all(static_cast<size_t>(n * rows)), one(static_cast<size_t>(rows));
          matmul_on(isa, w.view, x.data(), n, all.data(), pool, pm);
          int bad = 0;
          for (int tok = 0; tok < n; ++tok) {
            matmul_on(isa, w.view, x.data() + tok * cols, 1, one.data(), pool, pm);
            for (int64_t r = 0; r < rows; ++r) {
              if (std::memcmp(&one[r], &all[tok * rows + r], sizeof(float)) != 0 && bad++ < 3) {
                ADD_FAILURE() << dtype_name(t) << " " << isa_name(isa) << (pm ? "+packed" : "")
                              << " n=" << n << " token " << tok << " row " << r << ": "
                              << all[tok * rows + r] << " in the batch, " << one[r] << " alone";
              }
            }
          }
          EXPECT_EQ(bad, 0);
        }
      }
    }
  }
}

}  // namespace
}  // namespace gem::cpu
