// Each CUDA kernel against the CPU reference (ops_ref.h, matmul_ref) on fresh random inputs at
// the 12B and 31B widths. Tolerances follow from the types: f32 math within ~1e-5 relative;
// the decode products round x to 8 bits per 32-block (bound derived below); f16 KV rounds K/V.
// Skips, saying so, on a machine without a CUDA device.
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "backend/cpu/matmul.h"
#include "backend/cpu/ops_ref.h"
#include "backend/cuda/attention.cuh"
#include "backend/cuda/attention_decode.cuh"
#include "backend/cuda/attention_prefill.cuh"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/matvec.cuh"
#include "backend/cuda/norm.cuh"
#include "backend/cuda/ops.cuh"
#include "backend/cuda/sample.cuh"
#include "backend/cuda/tuning.h"
#include "base/dtype.h"
#include "sampler/sampler.h"
#include "cuda/cuda_test_util.h"

namespace gem {
namespace {

using test::Dev;
using test::DevWeights;
using test::randn;
using test::rng;

#define CK(expr) ASSERT_EQ((expr), cudaSuccess) << #expr

// Random GGUF Q4_0 / Q8_0 blocks for a [rows, cols] matrix.
std::vector<uint8_t> random_blocks(DType type, int64_t rows, int64_t cols) {
  const int64_t nb = rows * cols / 32;
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(0.001f, 0.02f);
  const int bb = type == DType::kQ4_0 ? 18 : 34;
  std::vector<uint8_t> out(nb * bb);
  for (int64_t b = 0; b < nb; ++b) {
    uint8_t* p = out.data() + b * bb;
    const uint16_t d = f32_to_fp16(scale(rng()));
    std::memcpy(p, &d, 2);
    for (int k = 2; k < bb; ++k) p[k] = static_cast<uint8_t>(byte(rng()));
  }
  return out;
}

// Random Q6_K super-blocks (d kept small, scales moderate).
std::vector<uint8_t> random_q6k(int64_t rows, int64_t cols) {
  const int64_t nsb = rows * cols / 256;
  std::vector<uint8_t> out(nsb * 210);
  std::uniform_int_distribution<int> byte(0, 255), sc(-60, 60);
  std::uniform_real_distribution<float> scale(0.0001f, 0.001f);
  for (int64_t b = 0; b < nsb; ++b) {
    uint8_t* p = out.data() + b * 210;
    for (int k = 0; k < 192; ++k) p[k] = static_cast<uint8_t>(byte(rng()));
    for (int k = 0; k < 16; ++k) p[192 + k] = static_cast<uint8_t>(static_cast<int8_t>(sc(rng())));
    const uint16_t d = f32_to_fp16(scale(rng()));
    std::memcpy(p + 208, &d, 2);
  }
  return out;
}

model::TensorView view(DType type, const std::vector<uint8_t>& data, int64_t rows, int64_t cols) {
  model::TensorView v;
  v.name = "test";
  v.type = type;
  v.data = data.data();
  v.rows = rows;
  v.cols = cols;
  v.n_bytes = data.size();
  return v;
}


// Bound on |Σ w·x − Σ w·x̃| when x̃ rounds x to 8 bits per 32-block (step s = max|x|/127):
// the rounding errors are independent, uniform in ±s/2, so 6 standard deviations of the sum.
std::vector<double> q8_error_bound(const model::TensorView& w, const std::vector<float>& x) {
  std::vector<double> bound(w.rows);
  std::vector<float> row(w.cols);
  std::vector<double> step(w.cols / 32);
  for (int64_t b = 0; b < w.cols / 32; ++b) {
    float amax = 0.0f;
    for (int k = 0; k < 32; ++k) amax = std::max(amax, std::fabs(x[b * 32 + k]));
    step[b] = amax / 127.0;
  }
  for (int64_t r = 0; r < w.rows; ++r) {
    cpu::get_row(w, r, row.data());
    double var = 0.0, mag = 0.0;
    for (int64_t c = 0; c < w.cols; ++c) {
      var += static_cast<double>(row[c]) * row[c] * step[c / 32] * step[c / 32] / 12.0;
      mag += std::fabs(static_cast<double>(row[c]) * x[c]);
    }
    bound[r] = 6.0 * std::sqrt(var) + 1e-5 * mag + 1e-6;
  }
  return bound;
}

// The load forms of the quantised products: L2 evict-first and normal, with the first weights
// loaded after the wait instead of before it (preload off).
constexpr int kMatvecVariants = 3;
cuda::CudaTuning matvec_variant(int v) {
  cuda::CudaTuning t;
  t.mv_evict_first = v != 1;
  t.mv_preload = v != 2;
  return t;
}

void check_matvec(DType type, int64_t rows, int64_t cols) {
  const std::vector<uint8_t> raw =
      type == DType::kQ6_K ? random_q6k(rows, cols) : random_blocks(type, rows, cols);
  const model::TensorView w = view(type, raw, rows, cols);
  const std::vector<float> x = randn(cols);
  std::vector<float> ref(rows);
  cpu::matmul_ref(w, x.data(), 1, ref.data());

  DevWeights dw(type, raw, rows, cols);
  Dev<float> dx(x), dy(rows);
  Dev<int8_t> xq(cols);
  Dev<cuda::Q8Ds> xds(cols / 32);
  cuda::Q8Act q{xq.p, xds.p};
  cuda::quantize_q8(dx.p, 1, static_cast<int>(cols), q, nullptr);
  const bool q8 = type != DType::kF32;  // matvec_reads_q8
  const std::vector<double> bound = q8 ? q8_error_bound(w, x) : std::vector<double>(rows, 0.0);
  for (int variant = 0; variant < (q8 ? kMatvecVariants : 1); ++variant) {
    const cuda::CudaTuning c = matvec_variant(variant);
    cudaMemset(dy.p, 0xff, rows * sizeof(float));  // NaN: a row left unwritten fails
    cuda::matvec(dw.m, dx.p, q, 1, dy.p, 0.0f, nullptr, c);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<float> y = dy.get();
    int bad = 0;
    for (int64_t r = 0; r < rows; ++r) {
      const double tol = q8 ? bound[r] : 1e-4 * (std::fabs(ref[r]) + 1.0);
      if (!(std::fabs(y[r] - ref[r]) <= tol) && bad++ < 5) {
        ADD_FAILURE() << dtype_name(type) << " " << rows << "x" << cols << " variant " << variant
                      << " row " << r << ": gpu " << y[r] << " ref " << ref[r] << " tol " << tol;
      }
    }
    EXPECT_EQ(bad, 0);
  }
}

// The embedding lookup (a block per 256 columns of each token's row) against the CPU's row
// dequantisation times the scale: exact for Q4_0, Q8_0 and F32 (one product each way), within a
// rounding for Q6_K (d·sc·q grouped differently); widths with a partial last block of columns.
TEST(CudaEmbed, RowsEqualTheCpuLookup) {
  REQUIRE_GPU();
  const std::vector<int32_t> tokens = {5, 0, 97, 5};
  const float scale = std::sqrt(3840.0f);
  for (DType type : {DType::kQ4_0, DType::kQ8_0, DType::kQ6_K, DType::kF32}) {
    for (int64_t cols : {int64_t{3840}, int64_t{5376}, int64_t{800}}) {
      if (type == DType::kQ6_K && cols % 256 != 0) continue;  // Q6_K rows are whole super-blocks
      const int64_t rows = 100;
      std::vector<uint8_t> raw;
      if (type == DType::kQ6_K) {
        raw = random_q6k(rows, cols);
      } else if (type == DType::kF32) {
        const std::vector<float> f = randn(rows * cols);
        raw.resize(f.size() * sizeof(float));
        std::memcpy(raw.data(), f.data(), raw.size());
      } else {
        raw = random_blocks(type, rows, cols);
      }
      const model::TensorView w = view(type, raw, rows, cols);
      DevWeights dw(type, raw, rows, cols);
      Dev<int32_t> dt(tokens);
      Dev<float> dx(tokens.size() * cols);
      cuda::embed(dw.m, dt.p, static_cast<int>(tokens.size()), scale, dx.p, nullptr);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      const std::vector<float> x = dx.get();
      std::vector<float> row(cols);
      int bad = 0;
      for (size_t t = 0; t < tokens.size(); ++t) {
        cpu::get_row(w, tokens[t], row.data());
        for (int64_t c = 0; c < cols; ++c) {
          const float want = row[c] * scale, got = x[t * cols + c];
          const float tol = type == DType::kQ6_K ? 4e-7f * std::fabs(want) : 0.0f;
          if (!(std::fabs(got - want) <= tol) && bad++ < 5) {
            ADD_FAILURE() << dtype_name(type) << " width " << cols << " token " << t << " col "
                          << c << ": gpu " << got << " cpu " << want;
          }
        }
      }
      EXPECT_EQ(bad, 0) << dtype_name(type) << " width " << cols;
    }
  }
}

// The tuning record's environment overrides (host code: runs without a GPU): the defaults when
// unset, a listed value taken, anything else the default.
TEST(CudaTuning, EnvOverridesTakeOnlyListedValues) {
  auto with = [](std::map<std::string, std::string> env) {
    return cuda::tuning_from_env([env](const char* name) -> const char* {
      const auto it = env.find(name);
      return it == env.end() ? nullptr : it->second.c_str();
    });
  };
  const cuda::CudaTuning d = with({});
  EXPECT_EQ(d.pdl, cuda::PdlMode::kAll);
  EXPECT_EQ(d.res_cluster, 8);
  EXPECT_EQ(d.splits_per_sm, 2);
  EXPECT_EQ(d.attn_split_shape, 1);
  const cuda::CudaTuning t = with({{"GEM_CUDA_PDL", "prefill"}, {"GEM_CUDA_RES_CLUSTER", "4"},
                                   {"GEM_CUDA_SPLITS_PER_SM", "3"},
                                   {"GEM_CUDA_ATTN_SPLIT_SHAPE", "2"}});
  EXPECT_EQ(t.pdl, cuda::PdlMode::kPrefill);
  EXPECT_EQ(t.res_cluster, 4);
  EXPECT_EQ(t.splits_per_sm, 3);
  EXPECT_EQ(t.attn_split_shape, 2);
  EXPECT_EQ(with({{"GEM_CUDA_PDL", "0"}}).pdl, cuda::PdlMode::kOff);
  for (const char* bad : {"3", "16", "-2", "x", "4x", "false"}) {
    EXPECT_EQ(with({{"GEM_CUDA_RES_CLUSTER", bad}}).res_cluster, 8) << bad;
    EXPECT_EQ(with({{"GEM_CUDA_PDL", bad}}).pdl, cuda::PdlMode::kAll) << bad;
  }
  EXPECT_EQ(with({{"GEM_CUDA_SPLITS_PER_SM", "9"}}).splits_per_sm, 2);
  EXPECT_NE(cuda::describe(t).find("res_cluster = 4"), std::string::npos);
}

TEST(CudaMatvec, Q4_0At12BAnd31BWidths) {
  REQUIRE_GPU();
  check_matvec(DType::kQ4_0, 4096 + 2048 + 2048, 3840);  // 12B sliding q|k|v
  check_matvec(DType::kQ4_0, 5376, 21504);               // 31B ffn_down
  check_matvec(DType::kQ4_0, 3840, 15360);               // 12B ffn_down
  check_matvec(DType::kQ4_0, 16384 + 2048, 5376);        // 31B full q|k
  check_matvec(DType::kQ4_0, 37, 64);                    // ragged row count
}

// Matrices of at most 2,048 rows take one row a warp (the MTP assistant's products: its
// pre-projection, attention output and down over 1,024 rows); the boundary and one row past it.
TEST(CudaMatvec, ShortMatricesOneRowAWarp) {
  REQUIRE_GPU();
  for (DType t : {DType::kQ4_0, DType::kQ8_0}) {
    check_matvec(t, 1024, 8192);  // assistant ffn_down
    check_matvec(t, 1024, 7680);  // 12B assistant pre-projection
    check_matvec(t, 2048, 1024);
    check_matvec(t, 2049, 1024);
  }
}

TEST(CudaMatvec, Q8_0HeadRows) {
  REQUIRE_GPU();
  check_matvec(DType::kQ8_0, 4096, 5376);
  check_matvec(DType::kQ8_0, 1000, 3840);
}

TEST(CudaMatvec, Q6_KHeadRows) {
  REQUIRE_GPU();
  check_matvec(DType::kQ6_K, 2048, 3840);
}

TEST(CudaMatvec, Q6_KRaggedTail) {
  REQUIRE_GPU();
  check_matvec(DType::kQ6_K, 777, 5376);
}

// Enough 8-row tiles (5000) that every block of the one-wave grid takes many, reusing each of
// its shared-memory slots several times.
TEST(CudaMatvec, Q6_KManyTilesABlock) {
  REQUIRE_GPU();
  check_matvec(DType::kQ6_K, 40000, 3840);
}

// All-Q6_K files' ffn_down: a 12B's rows take two shared-memory slots, a 31B's one.
TEST(CudaMatvec, Q6_KWideRows) {
  REQUIRE_GPU();
  check_matvec(DType::kQ6_K, 300, 15360);
  check_matvec(DType::kQ6_K, 100, 21504);
}

TEST(CudaMatvec, GatedGeluMatchesSeparateProducts) {
  REQUIRE_GPU();
  const int64_t F = 15360, E = 3840;
  const auto graw = random_blocks(DType::kQ4_0, F, E), uraw = random_blocks(DType::kQ4_0, F, E);
  const model::TensorView gv = view(DType::kQ4_0, graw, F, E), uv = view(DType::kQ4_0, uraw, F, E);
  const std::vector<float> x = randn(E);
  std::vector<float> g(F), u(F);
  cpu::matmul_ref(gv, x.data(), 1, g.data());
  cpu::matmul_ref(uv, x.data(), 1, u.data());
  const auto gb = q8_error_bound(gv, x), ub = q8_error_bound(uv, x);
  DevWeights dg(DType::kQ4_0, graw, F, E), du(DType::kQ4_0, uraw, F, E);
  Dev<float> dx(x), dy(F);
  Dev<int8_t> xq(E);
  Dev<cuda::Q8Ds> xds(E / 32);
  cuda::Q8Act q{xq.p, xds.p};
  cuda::quantize_q8(dx.p, 1, static_cast<int>(E), q, nullptr);
  for (int variant = 0; variant < kMatvecVariants; ++variant) {
    const cuda::CudaTuning c = matvec_variant(variant);
    cudaMemset(dy.p, 0xff, F * sizeof(float));
    cuda::matvec_gated(dg.m, du.m, q, 1, dy.p, nullptr, c);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const auto y = dy.get();
    int bad = 0;
    for (int64_t i = 0; i < F; ++i) {
      const double ref = cpu::gelu_tanh(g[i]) * u[i];
      // d(gelu(g)·u) ≈ gelu'(g)·u·δg + gelu(g)·δu, |gelu'| ≤ 1.13.
      const double tol = 1.13 * std::fabs(u[i]) * gb[i] + std::fabs(cpu::gelu_tanh(g[i])) * ub[i] +
                         gb[i] * ub[i] + 1e-5;
      if (!(std::fabs(y[i] - ref) <= tol) && bad++ < 5) {
        ADD_FAILURE() << "variant " << variant << " row " << i << ": gpu " << y[i] << " ref "
                      << ref << " tol " << tol;
      }
    }
    EXPECT_EQ(bad, 0);
  }
}

TEST(CudaDequant, F16RowsMatchGetRow) {
  REQUIRE_GPU();
  for (DType type : {DType::kQ4_0, DType::kQ8_0, DType::kQ6_K}) {
    const int64_t rows = 300, cols = 5376;
    const auto raw = type == DType::kQ6_K ? random_q6k(rows, cols) : random_blocks(type, rows, cols);
    const model::TensorView w = view(type, raw, rows, cols);
    DevWeights dw(type, raw, rows, cols);
    Dev<__half> out(100 * cols);
    cuda::dequant_f16(dw.m, 150, 100, out.p, nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const auto h = out.get();
    std::vector<float> row(cols);
    for (int64_t r = 0; r < 100; ++r) {
      cpu::get_row(w, 150 + r, row.data());
      for (int64_t c = 0; c < cols; ++c) {
        const float g = __half2float(h[r * cols + c]);
        ASSERT_NEAR(g, row[c], std::fabs(row[c]) * 1e-3 + 1e-7)
            << dtype_name(type) << " row " << r << " col " << c;
      }
    }
  }
}

// The residual epilogues' launch forms: one block per row, or (one-row launches) a cluster of
// 2, 4 or 8 blocks per row (CudaTuning::res_cluster).
const int kResidualClusters[] = {1, 2, 4, 8};
cuda::CudaTuning res_cluster(int c) {
  cuda::CudaTuning t;
  t.res_cluster = c;
  return t;
}

// The q of value i of a 32-block of v by the CPU fast path's rounding (cpu::round_block_q8),
// which the GPU's q8 copies follow exactly.
int8_t cpu_q8(const std::vector<float>& v, size_t i) {
  int8_t q[32];
  cpu::round_block_q8(v.data() + i / 32 * 32, q);
  return q[i % 32];
}

// A q8 copy's block scales and sums as the products need them (types.cuh's Q8Ds): qsum the sum of
// the block's quants, s at most 22 significant bits (so that s·1.5·2^23 is exact: block_terms.cuh)
// and within 2^-21 of max|v|/127 (2^-22 from the rounding to 22 bits, up to 2^-23 from the
// float product max|v|·(1/127)).
void expect_q8_blocks(const std::vector<float>& v, const std::vector<int8_t>& q,
                      const std::vector<cuda::Q8Ds>& ds, const std::string& what) {
  int bad = 0;
  for (size_t b = 0; b < ds.size(); ++b) {
    int sum = 0;
    float amax = 0.0f;
    for (size_t k = 32 * b; k < 32 * b + 32; ++k) {
      sum += q[k];
      amax = std::max(amax, std::fabs(v[k]));
    }
    uint32_t bits;
    std::memcpy(&bits, &ds[b].s, 4);
    const double want = amax / 127.0;
    if ((ds[b].qsum != sum || (bits & 3u) != 0 ||
         std::fabs(ds[b].s - want) > 0x1p-21 * want) &&
        bad++ < 5) {
      ADD_FAILURE() << what << " block " << b << ": qsum " << ds[b].qsum << " want " << sum
                    << ", s " << ds[b].s << " (bits " << bits << ") want " << want;
    }
  }
  EXPECT_EQ(bad, 0);
}

TEST(CudaNorm, RmsNormAndQ8Copy) {
  REQUIRE_GPU();
  for (const int form : kResidualClusters) {
    const cuda::CudaTuning t = res_cluster(form);
    for (int cols : {3840, 5376, 64}) {
      const int n = form > 1 ? 1 : 3;
      const auto x = randn(static_cast<size_t>(n) * cols, 3.0f), w = randn(cols);
      std::vector<float> ref(x.size());
      cpu::rms_norm(x.data(), w.data(), n, cols, 1e-6f, ref.data());
      Dev<float> dx(x), dw(w), dy(x.size());
      Dev<int8_t> q(x.size());
      Dev<cuda::Q8Ds> ds(x.size() / 32);
      cuda::rms_norm(dx.p, dw.p, n, cols, 1e-6f, dy.p, cuda::Q8Act{q.p, ds.p}, nullptr, t);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      const auto y = dy.get();
      const auto qv = q.get();
      const auto dsv = ds.get();
      for (size_t i = 0; i < y.size(); ++i) {
        ASSERT_NEAR(y[i], ref[i], 1e-5 * std::fabs(ref[i]) + 1e-6)
            << "form " << form << " cols " << cols << " i " << i;
        // q8 copy: q·s reproduces y within half a step, and q is the CPU's q for this y.
        const cuda::Q8Ds s = dsv[i / 32];
        ASSERT_NEAR(qv[i] * s.s, y[i], 0.5f * s.s + 1e-6f) << "form " << form << " i " << i;
        ASSERT_EQ(qv[i], cpu_q8(y, i)) << "form " << form << " cols " << cols << " i " << i;
      }
      expect_q8_blocks(y, qv, dsv, "rms_norm form " + std::to_string(form));
    }
  }
}

TEST(CudaNorm, ResidualEpilogues) {
  REQUIRE_GPU();
  for (const int form : kResidualClusters) {
    const cuda::CudaTuning t = res_cluster(form);
    for (int E : {3840, 5376}) {
      const int n = form > 1 ? 1 : 2;
      const auto x = randn(n * E), a = randn(n * E, 5.0f), wp = randn(E), wn = randn(E);
      const float scale = 0.97f;
      // Reference: x' = (x + rms(a, wp))·scale, h = rms(x', wn).
      std::vector<float> ra(n * E), rx(x), rh(n * E);
      cpu::rms_norm(a.data(), wp.data(), n, E, 1e-6f, ra.data());
      cpu::add(rx.data(), ra.data(), n * E);
      cpu::scale(rx.data(), n * E, scale);
      cpu::rms_norm(rx.data(), wn.data(), n, E, 1e-6f, rh.data());
      Dev<float> dx(x), da(a), dwp(wp), dwn(wn), dh(n * E), ds(std::vector<float>{scale});
      Dev<int8_t> q(static_cast<size_t>(n) * E);
      Dev<cuda::Q8Ds> qd(n * E / 32);
      cuda::residual_norm_scale(dx.p, da.p, dwp.p, ds.p, dwn.p, n, E, 1e-6f, dh.p,
                                cuda::Q8Act{q.p, qd.p}, nullptr, t);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      const auto gx = dx.get(), gh = dh.get();
      const auto qv = q.get();
      const auto qdv = qd.get();
      for (int i = 0; i < n * E; ++i) {
        ASSERT_NEAR(gx[i], rx[i], 1e-5 * std::fabs(rx[i]) + 1e-5) << "form " << form << " x " << i;
        ASSERT_NEAR(gh[i], rh[i], 1e-4 * std::fabs(rh[i]) + 1e-5) << "form " << form << " h " << i;
        ASSERT_NEAR(qv[i] * qdv[i / 32].s, gh[i], 0.5f * qdv[i / 32].s + 1e-6f)
            << "form " << form << " q8 " << i;
        ASSERT_EQ(qv[i], cpu_q8(gh, i)) << "form " << form << " q8 of h " << i;
      }
      expect_q8_blocks(gh, qv, qdv, "residual form " + std::to_string(form));
    }
  }
}

// q/k/v prologue of a 31B full layer (D = 512, proportional RoPE) and a 12B sliding layer.
// With `store`, the prologue also writes k and v into a ring (or linear) cache, f16 or f32.
void check_prologue(int H, int G, int D, bool v_from_k, float theta, bool proportional, int pos0,
                    bool store = false, bool f16 = false) {
  const int n = 3;
  const int cols = (H + (v_from_k ? 1 : 2) * G) * D;
  const auto qkv = randn(static_cast<size_t>(n) * cols, 2.0f);
  const auto qn = randn(D), kn = randn(D);
  std::vector<float> ff(D / 2, 1.0f);
  if (proportional) {
    for (int i = D / 8; i < D / 2; ++i) ff[i] = 1e30f;
  }
  std::vector<double> inv(D / 2);
  cpu::rope_inv_freq(D, theta, ff.data(), inv.data());
  // Reference.
  std::vector<float> rq(n * H * D), rk(n * G * D), rv(n * G * D);
  std::vector<int32_t> pos(n);
  for (int t = 0; t < n; ++t) {
    pos[t] = pos0 + t;
    for (int j = 0; j < H * D; ++j) rq[t * H * D + j] = qkv[t * cols + j];
    for (int j = 0; j < G * D; ++j) {
      rk[t * G * D + j] = qkv[t * cols + H * D + j];
      rv[t * G * D + j] = qkv[t * cols + (v_from_k ? H : H + G) * D + j];
    }
  }
  cpu::rms_norm(rq.data(), qn.data(), n * H, D, 1e-6f, rq.data());
  cpu::rms_norm(rk.data(), kn.data(), n * G, D, 1e-6f, rk.data());
  cpu::rms_norm(rv.data(), nullptr, n * G, D, 1e-6f, rv.data());
  cpu::rope_neox(rq.data(), n, H, D, pos.data(), inv.data());
  cpu::rope_neox(rk.data(), n, G, D, pos.data(), inv.data());

  Dev<float> dqkv(qkv), dqn(qn), dkn(kn), q(n * H * D), k(n * G * D), v(n * G * D);
  Dev<double> dinv(inv);
  Dev<int32_t> sp(std::vector<int32_t>{pos0});
  const int n_slots = 7;  // a ring shorter than pos0: slots wrap
  const size_t es = f16 ? 2 : 4;
  Dev<uint8_t> kc(static_cast<size_t>(G) * n_slots * D * es), vc(kc.n);
  cuda::KvDest dest;
  if (store) dest = cuda::KvDest{kc.p, vc.p, f16, true, n_slots};
  cuda::qkv_prologue(dqkv.p, n, H, G, D, v_from_k, dqn.p, dkn.p, 1e-6f, dinv.p,
                     reinterpret_cast<const cuda::StepParams*>(sp.p), q.p, k.p, v.p, dest, nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const auto gq = q.get(), gk = k.get(), gv = v.get();
  if (store) {
    const auto ck = kc.get(), cv = vc.get();
    auto at = [&](const std::vector<uint8_t>& c, size_t e) {
      if (!f16) {
        float f;
        std::memcpy(&f, c.data() + 4 * e, 4);
        return f;
      }
      uint16_t h;
      std::memcpy(&h, c.data() + 2 * e, 2);
      return fp16_to_f32(h);
    };
    const double tol = f16 ? 1.0 / 1024 : 2e-5;  // f16 rounds to 11 significant bits
    for (int t = 0; t < n; ++t) {
      const int slot = (pos0 + t) % n_slots;
      for (int g = 0; g < G; ++g) {
        for (int d = 0; d < D; ++d) {
          const size_t e = (static_cast<size_t>(g) * n_slots + slot) * D + d;
          const size_t r = (static_cast<size_t>(t) * G + g) * D + d;
          ASSERT_NEAR(at(ck, e), rk[r], tol * (std::fabs(rk[r]) + 1)) << "k t" << t << " g" << g;
          ASSERT_NEAR(at(cv, e), rv[r], tol * (std::fabs(rv[r]) + 1)) << "v t" << t << " g" << g;
        }
      }
    }
  }
  for (size_t i = 0; i < gq.size(); ++i) ASSERT_NEAR(gq[i], rq[i], 2e-5 * (std::fabs(rq[i]) + 1)) << i;
  for (size_t i = 0; i < gk.size(); ++i) ASSERT_NEAR(gk[i], rk[i], 2e-5 * (std::fabs(rk[i]) + 1)) << i;
  for (size_t i = 0; i < gv.size(); ++i) ASSERT_NEAR(gv[i], rv[i], 2e-5 * (std::fabs(rv[i]) + 1)) << i;
}

TEST(CudaPrologue, NormsAndRope) {
  REQUIRE_GPU();
  check_prologue(32, 4, 512, true, 1e6f, true, 30000);   // 31B full
  check_prologue(16, 8, 256, false, 1e4f, false, 1000);  // 12B sliding
  check_prologue(4, 2, 32, false, 1e4f, false, 5);       // tiny sliding
}

TEST(CudaPrologue, StoresKvIntoTheCache) {
  REQUIRE_GPU();
  check_prologue(16, 1, 512, true, 1e6f, true, 40, true, true);  // 12B full, f16
  check_prologue(16, 8, 256, false, 1e4f, false, 9, true, false);  // 12B sliding, f32
}

// Values k/den for integers |k| <= 2·den·scale: exact in f16 and TF32, and dot products of them
// over D <= 512 are exact in f32 (the tensor-core path's scores then carry no rounding).
std::vector<float> grid_values(size_t n, int den, float scale) {
  std::uniform_int_distribution<int> d(-static_cast<int>(2 * den * scale), static_cast<int>(2 * den * scale));
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(d(rng())) / static_cast<float>(den);
  return v;
}

// Which implementation check_attention runs: the split kernel (tile keys from k/v), the decode
// kernel (n = 1, the token's K/V stored in the cache first) or the tensor-core prompt path.
enum class AttnPath { kSplit, kDecode, kPrefill };

// Attention of n queries at pos0.. over a cache (ring or full, f32 or f16) + the tile's K/V.
// A dim of a D-wide head that Gemma 4's proportional RoPE turns (pairs below D/8).
bool rotated_dim(int D, int d) { return d % (D / 2) < D / 8; }

// shared_kv: K = V ⊙ w on the dims that do not rotate (a full layer whose V is the raw K
// projection), AttnArgs::k_shared_w set; the device's copy of those K dims is then NaN, so a
// kernel that read them would fail.
void check_attention(int H, int G, int D, int window, int n_slots, bool f16, int pos0, int n,
                     int n_splits, AttnPath path = AttnPath::kSplit, bool shared_kv = false,
                     const cuda::CudaTuning& t = cuda::kDefaultTuning) {
  const bool ring = window > 0;
  const size_t cache_elems = static_cast<size_t>(G) * n_slots * D;
  // The tensor-core paths round Q and P to f16: they get inputs exact in f16 (see grid_values)
  // and the bound for P's rounding below. The decode takes that form for f16 caches with 8 or
  // 16 heads per KV head.
  const int r = H / G;
  // attn_form 0 turns the tensor-core forms off (the CUDA-core kernel takes every case).
  const bool mma = path == AttnPath::kDecode && f16 && t.attn_form != 0 && (r == 8 || r == 16) &&
                   (D == 256 || D == 512);
  const bool exact = path == AttnPath::kPrefill || mma;
  auto kc = exact ? grid_values(cache_elems, 16, 1.0f) : randn(cache_elems);
  auto vc = exact ? grid_values(cache_elems, 16, 1.0f) : randn(cache_elems);
  const auto q = exact ? grid_values(static_cast<size_t>(n) * H * D, 64, 0.25f)
                       : randn(static_cast<size_t>(n) * H * D, 0.2f);
  auto kt = exact ? grid_values(static_cast<size_t>(n) * G * D, 16, 1.0f)
                  : randn(static_cast<size_t>(n) * G * D);
  auto vt = exact ? grid_values(static_cast<size_t>(n) * G * D, 16, 1.0f)
                  : randn(static_cast<size_t>(n) * G * D);
  std::vector<float> kw(static_cast<size_t>(D), 1.0f);
  if (shared_kv) {
    // Powers of two with signs, so that q ⊙ w and V ⊙ w stay exact in f16.
    const float pick[] = {0.5f, 1.0f, 2.0f, -0.5f, -1.0f, -2.0f};
    std::uniform_int_distribution<int> u(0, 5);
    for (float& x : kw) x = pick[u(rng())];
    for (size_t e = 0; e < cache_elems; ++e) {
      const int d = static_cast<int>(e % D);
      if (!rotated_dim(D, d)) kc[e] = vc[e] * kw[d];
    }
    for (size_t e = 0; e < kt.size(); ++e) {
      const int d = static_cast<int>(e % D);
      if (!rotated_dim(D, d)) kt[e] = vt[e] * kw[d];
    }
  }
  if (path == AttnPath::kDecode && f16) {
    // The decode kernel reads the token's own K/V back from the f16 cache: round them as stored.
    for (float& x : kt) x = fp16_to_f32(f32_to_fp16(x));
    for (float& x : vt) x = fp16_to_f32(f32_to_fp16(x));
  }
  std::vector<uint16_t> kh(cache_elems), vh(cache_elems);
  for (size_t i = 0; i < cache_elems; ++i) {
    kh[i] = f32_to_fp16(kc[i]);
    vh[i] = f32_to_fp16(vc[i]);
  }
  // Reference segments: the cache (positions < pos0) and the tile.
  std::vector<int32_t> slot_pos(n_slots, -1);
  for (int s = 0; s < n_slots; ++s) {
    if (ring) {
      // Slot s holds the latest position < pos0 congruent to s.
      const int last = pos0 - 1;
      if (last >= s) slot_pos[s] = s + ((last - s) / n_slots) * n_slots;
    } else {
      slot_pos[s] = s < pos0 ? s : -1;
    }
  }
  cpu::KvSegment cache;
  cache.k = f16 ? static_cast<const void*>(kh.data()) : kc.data();
  cache.v = f16 ? static_cast<const void*>(vh.data()) : vc.data();
  cache.f16 = f16;
  cache.head_stride = static_cast<int64_t>(n_slots) * D;
  cache.slot_stride = D;
  cache.pos = slot_pos.data();
  cache.n_slots = n_slots;
  cpu::KvSegment tile;
  tile.k = kt.data();
  tile.v = vt.data();
  tile.head_stride = D;
  tile.slot_stride = static_cast<int64_t>(G) * D;
  tile.pos_base = pos0;
  tile.n_slots = n;
  const cpu::KvSegment segs[] = {cache, tile};
  std::vector<int32_t> qpos(n);
  for (int t = 0; t < n; ++t) qpos[t] = pos0 + t;
  std::vector<float> ref(static_cast<size_t>(n) * H * D);
  cpu::attention(q.data(), qpos.data(), n, H, G, D, window, 1.0f, segs, ref.data());

  // Paths that read the tile's keys from the cache get them stored first (decode: the ring slot
  // of pos0 holds a position the query no longer sees; prefill: full caches only).
  if (path == AttnPath::kDecode || (path == AttnPath::kPrefill && !ring)) {
    for (int t = 0; t < n; ++t) {
      const int slot = ring ? (pos0 + t) % n_slots : pos0 + t;
      for (int g = 0; g < G; ++g) {
        for (int d = 0; d < D; ++d) {
          const size_t e = (static_cast<size_t>(g) * n_slots + slot) * D + d;
          const size_t src = (static_cast<size_t>(t) * G + g) * D + d;
          kc[e] = kt[src];
          vc[e] = vt[src];
          kh[e] = f32_to_fp16(kt[src]);
          vh[e] = f32_to_fp16(vt[src]);
        }
      }
    }
  }
  if (shared_kv) {
    for (size_t e = 0; e < cache_elems; ++e) {
      if (!rotated_dim(D, static_cast<int>(e % D))) kh[e] = 0x7e00;  // f16 NaN: never read
    }
  }
  Dev<float> dq(q), dkt(kt), dvt(vt), out(ref.size()), dkw(kw);
  Dev<float> dkc(kc), dvc(vc);
  Dev<uint16_t> dkh(kh), dvh(vh);
  if (path == AttnPath::kPrefill) {
    const size_t score = static_cast<size_t>(256) << 10;  // small: several query sub-tiles
    const size_t bytes = cuda::attention_prefill_scratch_bytes(n, H, G, D, ring ? window : 0, f16,
                                                               score);
    Dev<uint8_t> scratch(bytes);
    Dev<uint16_t> out16(ref.size());
    cublasHandle_t h = nullptr;
    ASSERT_EQ(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
    const cuda::PrefillAttnArgs pa{dq.p, dkt.p, dvt.p,
                                   f16 ? static_cast<void*>(dkh.p) : dkc.p,
                                   f16 ? static_cast<void*>(dvh.p) : dvc.p,
                                   f16, ring, n_slots, pos0, n, n, H, G, D,
                                   ring ? window : 0, reinterpret_cast<__half*>(out16.p),
                                   scratch.p, bytes};
    cuda::attention_prefill(pa, h, nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    cublasDestroy(h);
    const auto o = out16.get();
    // Exact scores (grid inputs); P rounds to 11 significant bits (f16 or TF32), the output to
    // f16: |err| <= 2^-11·Σp|v| + 2^-11·|o| + f32 sums, bounded by 2^-10·(max|v| + |o|).
    float vmax = 0.0f;
    for (float x : vc) vmax = std::max(vmax, std::fabs(x));
    for (float x : vt) vmax = std::max(vmax, std::fabs(x));
    for (size_t i = 0; i < o.size(); ++i) {
      const float got = fp16_to_f32(o[i]);
      ASSERT_NEAR(got, ref[i], (vmax + std::fabs(ref[i])) / 1024.0f + 1e-5f)
          << "prefill H" << H << " G" << G << " D" << D << " window " << window << " f16 " << f16
          << " pos0 " << pos0 << " n " << n << " i " << i;
    }
    return;
  }
  Dev<float> part(cuda::attention_part_floats(n, H, D, n_splits));
  Dev<int32_t> sp(std::vector<int32_t>{pos0});
  Dev<int8_t> oq(ref.size());
  Dev<cuda::Q8Ds> ods(ref.size() / 32);
  cuda::AttnArgs a{dq.p, dkt.p, dvt.p,
                   f16 ? static_cast<const void*>(dkh.p) : dkc.p,
                   f16 ? static_cast<const void*>(dvh.p) : dvc.p,
                   f16, ring, n_slots, n, H, G, D, window, n_splits,
                   reinterpret_cast<const cuda::StepParams*>(sp.p), part.p, out.p,
                   cuda::Q8Act{oq.p, ods.p}};
  a.tile_in_cache = path == AttnPath::kDecode;
  if (shared_kv) a.k_shared_w = dkw.p;
  if (path == AttnPath::kDecode) {
    ASSERT_TRUE(cuda::attention_decode_supported(a));
    ASSERT_EQ(cuda::attention_decode_uses_mma(a, t), mma);
  }
  if (shared_kv) {
    ASSERT_TRUE(cuda::attention_decode_shares_kv(a, t)) << "the case must take that form";
  }
  cuda::attention(a, nullptr, t);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const auto o = out.get();
  float vmax = 0.0f;
  for (float x : vc) vmax = std::max(vmax, std::fabs(x));
  for (float x : vt) vmax = std::max(vmax, std::fabs(x));
  for (size_t i = 0; i < o.size(); ++i) {
    // f32 math: 2e-4 relative; the tensor-core decode: P rounded to f16 (exact scores).
    const double tol = mma ? (vmax + std::fabs(ref[i])) / 1024.0 + 1e-5
                           : 2e-4 * (std::fabs(ref[i]) + 0.1);
    ASSERT_NEAR(o[i], ref[i], tol)
        << "H" << H << " G" << G << " D" << D << " window " << window << " f16 " << f16
        << " pos0 " << pos0 << " n " << n << " i " << i;
  }
}

TEST(CudaAttention, DecodeOverRingAndFullCaches) {
  REQUIRE_GPU();
  check_attention(16, 8, 256, 1024, 1024, false, 5000, 1, 32);   // 12B sliding, wrapped ring
  check_attention(16, 8, 256, 1024, 1024, true, 700, 1, 32);     // 12B sliding, f16, not full yet
  check_attention(16, 1, 512, 0, 40000, true, 33000, 1, 625);    // 12B full at depth 33K
  check_attention(32, 4, 512, 0, 9000, false, 8191, 1, 141);     // 31B full
  check_attention(32, 16, 256, 1024, 1024, true, 1500, 1, 32);   // 31B sliding
}

// The decode kernel's cases: the CUDA-core form on rings and full caches, then the tensor-core
// forms and the merge in 32-element chunks; `base` sets the fields these cases leave alone.
void check_decode_cases(const cuda::CudaTuning& base) {
  const auto P = AttnPath::kDecode;
  auto with = [&](int form, int shape, int merge_chunk = 0) {
    cuda::CudaTuning t = base;
    t.attn_form = form;
    t.attn_split_shape = shape;
    t.merge_chunk = merge_chunk;
    return t;
  };
  const cuda::CudaTuning d = with(-1, 1);
  check_attention(16, 8, 256, 1024, 1024, false, 5000, 1, 33, P, false, d);  // 12B sliding, wrapped
  check_attention(16, 8, 256, 1024, 1024, true, 700, 1, 33, P, false, d);    // 12B sliding, f16
  check_attention(16, 1, 512, 0, 40000, true, 33000, 1, 264, P, false, d);   // 12B full, depth 33K
  check_attention(16, 1, 512, 0, 40000, false, 70, 1, 264, P, false, d);     // short: few splits busy
  check_attention(32, 4, 512, 0, 9000, false, 8191, 1, 66, P, false, d);     // 31B full
  check_attention(32, 16, 256, 1024, 1024, true, 1500, 1, 17, P, false, d);  // 31B sliding
  check_attention(4, 4, 64, 0, 300, true, 0, 1, 3, P, false, d);             // r = 1, first token
  check_attention(8, 2, 32, 16, 16, false, 40, 1, 1, P, false, d);           // r = 4, tiny ring
  // Tensor-core forms (f16, 8 or 16 heads per KV head): partial tiles, one split, many splits;
  // the form that computes S whole in every warp, then the split form in each tile shape.
  for (const auto& [form, shape] : {std::pair{1, 0}, {2, 0}, {2, 1}, {2, 2}, {2, 3}}) {
    const cuda::CudaTuning t = with(form, shape);
    SCOPED_TRACE("tensor-core form " + std::to_string(form) + ":" + std::to_string(shape));
    check_attention(32, 4, 512, 0, 9000, true, 8191, 1, 66, P, false, t);     // 31B full, f16
    check_attention(32, 4, 512, 0, 9000, true, 20, 1, 66, P, false, t);       // a partial tile
    check_attention(16, 1, 512, 0, 40000, true, 33000, 1, 132, P, false, t);  // 12B full, 33K
    check_attention(16, 1, 256, 0, 3000, true, 2500, 1, 7, P, false, t);      // r = 16, D = 256
    check_attention(16, 2, 256, 1024, 1024, true, 3000, 1, 33, P, false, t);  // r = 8, wrapped ring
  }
  // The split form reading only K's rotated dims besides V (full layers whose V is the raw K
  // projection), in each tile shape.
  for (int shape : {0, 1, 2, 3}) {
    const cuda::CudaTuning t = with(2, shape);
    SCOPED_TRACE("shared K/V, split form shape " + std::to_string(shape));
    check_attention(16, 1, 512, 0, 40000, true, 33000, 1, 264, P, true, t);  // 12B full, 33K
    check_attention(32, 4, 512, 0, 9000, true, 8191, 1, 66, P, true, t);     // 31B full
    check_attention(32, 4, 512, 0, 9000, true, 20, 1, 66, P, true, t);       // a partial tile
    check_attention(16, 1, 256, 0, 3000, true, 2500, 1, 7, P, true, t);      // r = 16, D = 256
  }
  // The merge in 32-element chunks where the rule takes 64 (at most 128 splits) and in 64 where it
  // takes 32 (264 splits).
  check_attention(16, 8, 256, 1024, 1024, true, 700, 1, 33, P, false, with(-1, 1, 32));
  check_attention(32, 4, 512, 0, 9000, false, 8191, 1, 66, P, false, with(-1, 1, 32));
  check_attention(8, 2, 32, 16, 16, false, 40, 1, 1, P, false, with(-1, 1, 32));  // one chunk
  check_attention(16, 1, 512, 0, 40000, true, 33000, 1, 264, P, false, with(-1, 1, 64));
  // The CUDA-core kernel (one ring modulo per tile, __expf, vector loads of q and stores of the
  // parts) on every group size and head width: tensor cores off.
  {
    const cuda::CudaTuning t = with(0, 1);
    SCOPED_TRACE("CUDA cores only");
    check_attention(16, 8, 256, 1024, 1024, false, 5000, 1, 33, P, false, t);  // 12B sliding
    check_attention(16, 8, 256, 1024, 1024, true, 700, 1, 33, P, false, t);    // 12B sliding, f16
    check_attention(32, 16, 256, 1024, 1024, true, 1500, 1, 17, P, false, t);  // 31B sliding
    check_attention(16, 1, 512, 0, 40000, true, 33000, 1, 264, P, false, t);   // r = 16, 33K
    check_attention(32, 4, 512, 0, 9000, false, 8191, 1, 66, P, false, t);     // r = 8
    check_attention(4, 4, 64, 0, 300, true, 0, 1, 3, P, false, t);             // r = 1
    check_attention(8, 2, 32, 16, 16, false, 40, 1, 1, P, false, t);           // r = 4, tiny ring
  }
}

TEST(CudaAttention, DecodeKernelSharesKvTilesAcrossTheGroup) {
  REQUIRE_GPU();
  check_decode_cases(cuda::kDefaultTuning);
}

// The first K/V copies issued after pdl_wait in every block (attn_early_kv off; by default the
// blocks whose range does not hold the token's position issue them before it).
TEST(CudaAttention, DecodeWithLateFirstCopies) {
  REQUIRE_GPU();
  cuda::CudaTuning t;
  t.attn_early_kv = false;
  const auto P = AttnPath::kDecode;
  check_attention(16, 8, 256, 1024, 1024, false, 5000, 1, 33, P, false, t);  // 12B sliding
  cuda::CudaTuning split = t;
  split.attn_form = 2;
  check_attention(32, 4, 512, 0, 9000, true, 8191, 1, 66, P, true, split);  // 31B full, split
  check_attention(16, 1, 256, 0, 3000, true, 2500, 1, 7, P, false, t);      // r = 16, D = 256
  check_attention(32, 4, 512, 0, 9000, false, 8191, 1, 66, P, false, t);    // CUDA cores, r = 8
}

TEST(CudaAttention, PrefillOnTensorCores) {
  REQUIRE_GPU();
  const auto P = AttnPath::kPrefill;
  check_attention(16, 8, 256, 1024, 1024, true, 2000, 64, 0, P);   // tile over a wrapped ring
  check_attention(16, 8, 256, 1024, 1024, false, 0, 48, 0, P);     // first tile, f32 (TF32)
  check_attention(16, 1, 512, 0, 4096, true, 1000, 40, 0, P);      // 12B full
  check_attention(32, 4, 512, 0, 2048, false, 300, 33, 0, P);      // 31B full, f32
  check_attention(4, 2, 32, 16, 16, false, 40, 24, 0, P);          // tile longer than the ring
  check_attention(8, 2, 64, 0, 256, true, 10, 30, 0, P);
}

TEST(CudaAttention, PromptTiles) {
  REQUIRE_GPU();
  check_attention(16, 8, 256, 1024, 1024, false, 2000, 37, 4);   // tile over a wrapped ring
  check_attention(16, 8, 256, 1024, 1024, true, 0, 64, 1);       // first tile
  check_attention(16, 1, 512, 0, 4096, true, 1000, 20, 3);
  check_attention(4, 2, 32, 16, 16, false, 40, 24, 1);           // tile longer than the ring
  check_attention(8, 2, 64, 0, 256, false, 10, 30, 2);
  // More splits than 32-key chunks fill (kSplitMinKeys, the rule shared with decode): the last
  // splits are empty.
  check_attention(16, 8, 256, 1024, 1024, false, 2000, 5, 80);   // ring
  check_attention(8, 2, 64, 0, 256, false, 10, 3, 8);            // more splits than keys
}

TEST(CudaSample, GreedyWithPenaltiesMatchesHostSampler) {
  REQUIRE_GPU();
  const int V = 262144;
  for (int trial = 0; trial < 4; ++trial) {
    auto logits = randn(V, 3.0f);
    std::vector<int32_t> hist;
    std::uniform_int_distribution<int> id(0, V - 1);
    // Put the top tokens in the history so the penalties change the winner.
    int best = 0;
    for (int i = 1; i < V; ++i) best = logits[i] > logits[best] ? i : best;
    hist = {best, best, id(rng()), best, id(rng())};
    SamplingParams p;
    p.temperature = 0.0f;
    p.repeat_penalty = trial == 0 ? 1.0f : 1.3f;
    p.frequency_penalty = trial >= 2 ? 0.5f : 0.0f;
    p.presence_penalty = trial == 3 ? 0.7f : 0.0f;
    const int32_t want = sample_token(logits, p, hist, 0.5);
    Dev<float> dl(logits), scratch(cuda::argmax_scratch_floats(V));
    Dev<int32_t> dh(hist), out(1);
    const bool pen = p.repeat_penalty != 1.0f || p.frequency_penalty != 0 || p.presence_penalty != 0;
    cuda::PenaltyArgs pa{dh.p, pen ? static_cast<int>(hist.size()) : 0, p.repeat_penalty,
                         p.presence_penalty, p.frequency_penalty};
    cuda::argmax_penalized(dl.p, V, pa, out.p, scratch.p, nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(out.get()[0], want) << "trial " << trial;
  }
}

// The device chain (penalties, top-k, top-p, min-p, temperature, draw) against the host
// sampler with the same coin: the same token, over vocabulary sizes of one and many sort
// blocks, exact ties (tie-break by id), k = 1..256 and each truncation on and off.
TEST(CudaSample, TopKChainMatchesHostSampler) {
  REQUIRE_GPU();
  std::uniform_real_distribution<double> coin01(0.0, 1.0);
  int checked = 0, distinct = 0;
  for (int V : {1000, 5000, 262144}) {
    auto logits = randn(static_cast<size_t>(V), 3.0f);
    // Exact ties among the leaders: round a slice to a coarse grid.
    for (int i = 0; i < V; i += 3) logits[static_cast<size_t>(i)] = std::round(logits[static_cast<size_t>(i)] * 2) / 2;
    int best = 0;
    for (int i = 1; i < V; ++i) best = logits[i] > logits[best] ? i : best;
    std::uniform_int_distribution<int> id(0, V - 1);
    const std::vector<int32_t> hist = {best, best, id(rng()), best, id(rng()), id(rng())};
    Dev<float> dl(logits), scratch(cuda::argmax_scratch_floats(V));
    Dev<int32_t> dh(hist), out(1);
    for (int k : {1, 7, 64, 256}) {
      for (float top_p : {1.0f, 0.9f, 0.3f}) {
        for (float min_p : {0.0f, 0.05f}) {
          for (float temp : {0.4f, 1.0f, 2.5f}) {
            for (int pen_case = 0; pen_case < 2; ++pen_case) {
              SamplingParams p;
              p.top_k = k;
              p.top_p = top_p;
              p.min_p = min_p;
              p.temperature = temp;
              p.repeat_penalty = pen_case ? 1.3f : 1.0f;
              p.frequency_penalty = pen_case ? 0.25f : 0.0f;
              p.presence_penalty = pen_case ? 0.5f : 0.0f;
              cuda::PenaltyArgs pa{dh.p, pen_case ? static_cast<int>(hist.size()) : 0,
                                   p.repeat_penalty, p.presence_penalty, p.frequency_penalty};
              std::set<int32_t> seen;
              for (double coin : {0.0, 0.5, 0.999999, coin01(rng()), coin01(rng())}) {
                const int32_t want = sample_token(logits, p, hist, coin);
                cuda::DrawArgs d{k, top_p, min_p, temp, coin};
                cuda::sample_top_k(dl.p, V, pa, d, out.p, scratch.p, nullptr);
                ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
                ASSERT_EQ(out.get()[0], want) << "V=" << V << " k=" << k << " top_p=" << top_p
                                              << " min_p=" << min_p << " temp=" << temp
                                              << " pen=" << pen_case << " coin=" << coin;
                seen.insert(want);
                ++checked;
              }
              distinct += static_cast<int>(seen.size()) > 1;
            }
          }
        }
      }
    }
  }
  // The cases must actually sample (not collapse to the arg-max everywhere).
  EXPECT_GT(distinct, checked / 20);
}

}  // namespace
}  // namespace gem
