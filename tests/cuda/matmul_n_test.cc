// The n-token products (matmul_n.cuh) against CPU references on fresh random weights and
// activations at the 12B and 31B widths, n in {1, 2, 3, 4, 5, 8, 13, 16, 32} (and 40: groups of
// 32), every kernel
// (dp4a, mma, the automatic choice) and the mma kernel's splits of K. Each result is checked three
// ways: (1) against the same arithmetic in double on the CPU (the q8 copy the GPU made for dp4a;
// the f16 roundings of weights and x for mma): only float accumulation may differ; (2) against
// the exact product (cpu::matmul_ref's dequantised rows, f32 x) within a bound derived from the
// path's rounding of x and w; (3) against the decode matvec run once per token.
// Skips, saying so, on a machine without a CUDA device.
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "backend/cpu/matmul.h"
#include "backend/cpu/ops_ref.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/matmul_n.cuh"
#include "backend/cuda/matvec.cuh"
#include "backend/cuda/norm.cuh"
#include "base/dtype.h"
#include "cuda/cuda_test_util.h"

namespace gem {
namespace {

using test::Dev;
using test::randn;
using test::rng;

// Random GGUF Q4_0 / Q8_0 blocks (scales 0.001-0.02) or Q6_K super-blocks (d 1e-4-1e-3,
// sub-block scales in ±60) for a [rows, cols] matrix.
std::vector<uint8_t> random_weights(DType type, int64_t rows, int64_t cols) {
  std::uniform_int_distribution<int> byte(0, 255);
  if (type == DType::kQ6_K) {
    const int64_t nsb = rows * cols / 256;
    std::vector<uint8_t> out(nsb * 210);
    std::uniform_int_distribution<int> sc(-60, 60);
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
  const int64_t nb = rows * cols / 32;
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

float round_f16(float v) { return fp16_to_f32(f32_to_fp16(v)); }

// A weight matrix on both sides: the GGUF bytes for the CPU references, and the device layout the
// backend builds (raw upload + repack).
struct Matrix {
  DType type;
  int64_t rows, cols;
  std::vector<uint8_t> raw;
  model::TensorView view;
  std::unique_ptr<test::DevWeights> dev;  // the device layout the backend builds
  cuda::DevMatrix m;

  Matrix(DType t, int64_t r, int64_t c) : type(t), rows(r), cols(c) {
    raw = t == DType::kF32 ? std::vector<uint8_t>() : random_weights(t, r, c);
    if (t == DType::kF32) {
      const std::vector<float> f = randn(r * c);
      const auto* bytes = reinterpret_cast<const uint8_t*>(f.data());
      raw.assign(bytes, bytes + f.size() * sizeof(float));
    }
    view.name = "test";
    view.type = t;
    view.data = raw.data();
    view.rows = r;
    view.cols = c;
    view.n_bytes = raw.size();
    dev = std::make_unique<test::DevWeights>(t, raw, r, c);
    m = dev->m;
  }
  Matrix(const Matrix&) = delete;
  Matrix& operator=(const Matrix&) = delete;

  // Row r exactly (cpu::get_row), as the mma kernel rounds it to f16 (Q4_0/Q8_0: (q − z)·d
  // rounded once; Q6_K: (q − 32)·f16(d·sc) rounded), and the Q4_0 block scales d (the size of
  // matvec's −8·d·Σx term), else 0.
  void row(int64_t r, float* exact, float* half, float* d4) const {
    cpu::get_row(view, r, exact);
    if (type == DType::kQ6_K) {
      for (int64_t sb = 0; sb < cols / 256; ++sb) {
        const uint8_t* p = raw.data() + (r * (cols / 256) + sb) * 210;
        uint16_t dh;
        std::memcpy(&dh, p + 208, 2);
        const float d = fp16_to_f32(dh);
        for (int j = 0; j < 256; ++j) {
          const int h = j >> 7, jj = j & 127, u = jj >> 5, l = jj & 31;
          const uint8_t lo = p[64 * h + l + ((u & 1) ? 32 : 0)];
          const int q = ((u & 2) ? (lo >> 4) : (lo & 15)) | (((p[128 + 32 * h + l] >> (2 * u)) & 3) << 4);
          const int8_t sc = static_cast<int8_t>(p[192 + 8 * h + (l >> 4) + 2 * u]);
          half[sb * 256 + j] = round_f16(static_cast<float>(q - 32) * round_f16(d * static_cast<float>(sc)));
        }
      }
    } else {
      for (int64_t c = 0; c < cols; ++c) half[c] = round_f16(exact[c]);
    }
    for (int64_t b = 0; b < cols / 32; ++b) {
      float d = 0.0f;
      if (type == DType::kQ4_0) {
        uint16_t dh;
        std::memcpy(&dh, raw.data() + (r * (cols / 32) + b) * 18, 2);
        d = fp16_to_f32(dh);
      }
      for (int k = 0; k < 32; ++k) d4[b * 32 + k] = d;
    }
  }
};

template <typename F>
void parallel_for(int64_t count, F f) {
  const int n_threads = static_cast<int>(std::max(1u, std::min(32u, std::thread::hardware_concurrency())));
  std::atomic<int64_t> next{0};
  std::vector<std::thread> pool;
  for (int k = 0; k < n_threads; ++k) {
    pool.emplace_back([&] {
      for (int64_t i; (i = next.fetch_add(1)) < count;) f(i);
    });
  }
  for (std::thread& t : pool) t.join();
}

// The references of one (row, token): sums in double.
struct Ref {
  double exact;   // Σ w·x, exact weights and x
  double q8;      // Σ w·(q·s): the dp4a kernel's (and matvec's) arithmetic on the GPU's q8 copy
  double f16;     // Σ f16(w)·f16(x): the mma kernel's arithmetic
  double mag;     // Σ |w|·|x|
  double mag_q8;  // Σ (|w| + 8·d)·|x|: matvec's terms, the −8·d·Σx correction included
  double bound_q8, bound_f16;  // |path − exact| bounds, derived below
};

// The bounds, for a path that replaces x by x̃ and w by w̃ (errors independent of each other and
// of sign, so their sum has variance Σ w²·var(δx) + x²·var(δw); 7 standard deviations, as the
// suite checks ~1e8 values):
//   q8: x̃ = q·s, |δx| ≤ s/2 uniform: var = s²/12; w exact.
//   f16: |δx| ≤ 2^-11·|x| + 2^-25 (round to nearest; 2^-25 for subnormals), uniform: var = δ²/3;
//        w rounded once (Q4_0/Q8_0: δw ≤ 2^-11·|w|) or twice (Q6_K, d·sc first: 2·2^-11·|w|).
//   Both plus float accumulation: 1e-5 of the magnitude Σ|w||x| (f32 partial sums over at most
//   ~700 block terms per lane, tensor-core f32 accumulators), + 1e-6 absolute.
constexpr double kU16 = 1.0 / 2048;
constexpr double kAcc = 1e-5;

struct Case {
  const Matrix& w;
  const Matrix* up;  // gated form when set
  int n;
  float cap;
  std::string name;
};

// References for the rows `rows` of every token.
std::vector<Ref> references(const Matrix& w, const std::vector<int64_t>& rows, int n,
                            const std::vector<float>& x, const std::vector<int8_t>& xq,
                            const std::vector<cuda::Q8Ds>& xds) {
  const int64_t K = w.cols;
  const double wk = w.type == DType::kQ6_K ? 2 * kU16 : kU16;
  std::vector<Ref> out(rows.size() * n);
  std::vector<float> x16(x.size());
  for (size_t k = 0; k < x.size(); ++k) x16[k] = round_f16(x[k]);
  parallel_for(static_cast<int64_t>(rows.size()), [&](int64_t ri) {
    std::vector<float> ex(K), hf(K), d4(K);
    w.row(rows[ri], ex.data(), hf.data(), d4.data());
    for (int t = 0; t < n; ++t) {
      const float* xt = x.data() + t * K;
      const int8_t* qt = xq.data() + t * K;
      const cuda::Q8Ds* st = xds.data() + t * K / 32;
      double e = 0, q8 = 0, f16 = 0, mag = 0, magq = 0, var_q8 = 0, var_16 = 0;
      for (int64_t c = 0; c < K; ++c) {
        const double wc = ex[c], xc = xt[c], s = st[c / 32].s;
        e += wc * xc;
        q8 += wc * (static_cast<double>(qt[c]) * s);
        f16 += static_cast<double>(hf[c]) * x16[t * K + c];
        mag += std::fabs(wc * xc);
        magq += (std::fabs(wc) + 8.0 * d4[c]) * std::fabs(xc);
        var_q8 += wc * wc * s * s / 12.0;
        const double dx = kU16 * std::fabs(xc) + 0x1p-25, dw = wk * std::fabs(wc);
        var_16 += (wc * wc * dx * dx + xc * xc * dw * dw) / 3.0;
      }
      Ref& r = out[ri * n + t];
      r.exact = e;
      r.q8 = q8;
      r.f16 = f16;
      r.mag = mag;
      r.mag_q8 = magq;
      r.bound_q8 = 7.0 * std::sqrt(var_q8) + kAcc * magq + 1e-6;
      r.bound_f16 = 7.0 * std::sqrt(var_16) + kAcc * mag + 1e-6;
    }
  });
  return out;
}

// The rows the CPU checks: all of a matrix up to 4096 rows; else every third row and the last 64
// (every tile and every cluster rank's share of it is covered).
std::vector<int64_t> sample_rows(int64_t rows) {
  std::vector<int64_t> r;
  for (int64_t i = 0; i < rows; ++i) {
    if (rows <= 4096 || i % 3 == 0 || i >= rows - 64) r.push_back(i);
  }
  return r;
}

double softcap(double v, float cap) { return cap > 0.0f ? cap * std::tanh(v / cap) : v; }

// The arithmetic a run used: q8 activations and integer dots (dp4a, matvec on Q4_0/Q8_0/Q6_K),
// f16 weights and x (mma), or f32 (matvec on F32 weights).
enum class Arith { kQ8, kF16, kF32 };

// A value's reference and tolerance: against the run's own arithmetic in double (vs_path: only
// float accumulation differs), or against the exact product (the derived bound).
struct Check {
  double want, tol;
};
Check single(const Ref& r, Arith a, bool vs_path, float cap) {
  const double f32_tol = kAcc * r.mag + 1e-6;
  if (vs_path) {
    switch (a) {
      case Arith::kQ8: return {softcap(r.q8, cap), kAcc * r.mag_q8 + 1e-6};
      case Arith::kF16: return {softcap(r.f16, cap), kAcc * r.mag + 1e-6};
      default: return {softcap(r.exact, cap), f32_tol};
    }
  }
  const double bound = a == Arith::kQ8 ? r.bound_q8 : (a == Arith::kF16 ? r.bound_f16 : f32_tol);
  return {softcap(r.exact, cap), bound};  // soft-cap is 1-Lipschitz: the bound carries over
}
// The gated form from its (gate, up) references: d(gelu(g)·u) ≈ gelu'(g)·u·δg + gelu(g)·δu +
// δg·δu, |gelu'| ≤ 1.13.
Check gated(const Ref& g, const Ref& u, Arith a, bool vs_path) {
  const Check cg = single(g, a, vs_path, 0.0f), cu = single(u, a, vs_path, 0.0f);
  const double gg = cpu::gelu_tanh(static_cast<float>(cg.want));
  return {gg * cu.want, 1.13 * std::fabs(cu.want) * cg.tol + std::fabs(gg) * cu.tol + cg.tol * cu.tol + 1e-6};
}

std::string kernel_name(cuda::MatmulNKernel k) {
  return k == cuda::MatmulNKernel::kAuto ? "auto" : (k == cuda::MatmulNKernel::kDp4a ? "dp4a" : "mma");
}

// Runs case c on every kernel that supports it (and, for mma, each split in `splits`), checks
// every output written and finite, then the sampled rows against the references (1) and (2),
// and all rows of the automatic choice against matvec once per token (3).
void check_case(const Case& c, const std::vector<int>& splits = {0}) {
  const Matrix& w = c.w;
  const int n = c.n;
  const int64_t K = w.cols, R = w.rows;
  const std::vector<float> x = randn(static_cast<size_t>(n) * K);
  Dev<float> dx(x), dy(static_cast<size_t>(n) * R);
  Dev<int8_t> dq(static_cast<size_t>(n) * K);
  Dev<cuda::Q8Ds> dds(static_cast<size_t>(n) * K / 32);
  const cuda::Q8Act xq{dq.p, dds.p};
  if (w.type != DType::kF32) cuda::quantize_q8(dx.p, n, static_cast<int>(K), xq, nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const std::vector<int8_t> hq = w.type != DType::kF32 ? dq.get() : std::vector<int8_t>(n * K);
  const std::vector<cuda::Q8Ds> hds = w.type != DType::kF32 ? dds.get() : std::vector<cuda::Q8Ds>(n * K / 32);

  const std::vector<int64_t> rows = sample_rows(R);
  const std::vector<Ref> ref = references(w, rows, n, x, hq, hds);
  const std::vector<Ref> ref_up = c.up ? references(*c.up, rows, n, x, hq, hds) : std::vector<Ref>();

  std::vector<cuda::MatmulNVariant> runs = {{}};
  if (w.type != DType::kF32) {
    for (cuda::MatmulNKernel k : {cuda::MatmulNKernel::kDp4a, cuda::MatmulNKernel::kMma}) {
      if (!cuda::matmul_n_supports(k, w.m)) continue;
      for (int form = 0; form < cuda::matmul_n_forms(k); ++form) {
        if (k == cuda::MatmulNKernel::kMma && form == 0) {
          for (int s : splits) runs.push_back({k, s, form});
        } else {
          runs.push_back({k, 0, form});
        }
      }
    }
  }
  std::vector<float> y_auto;
  Arith auto_arith = Arith::kF32;
  for (const cuda::MatmulNVariant& run : runs) {
    dy.poison();
    cuda::matmul_n_variant(run, w.m, c.up ? &c.up->m : nullptr, dx.p, xq, n, dy.p, c.cap, nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << c.name;
    const std::vector<float> y = dy.get();
    Arith a = run.kernel == cuda::MatmulNKernel::kDp4a ? Arith::kQ8 : Arith::kF16;
    if (run.kernel == cuda::MatmulNKernel::kAuto) {
      if (n == 1) {
        a = Arith::kQ8;  // the decode matvec
      } else {
        a = cuda::matmul_n_reads_q8(w.m, n, c.up != nullptr) ? Arith::kQ8 : Arith::kF16;
      }
      y_auto = y;
    }
    if (w.type == DType::kF32) a = Arith::kF32;
    if (run.kernel == cuda::MatmulNKernel::kAuto) auto_arith = a;
    const std::string what = c.name + " n=" + std::to_string(n) + " " + kernel_name(run.kernel) +
                             " form " + std::to_string(run.form) +
                             (run.split ? " split=" + std::to_string(run.split) : "");
    int bad = 0;
    for (size_t i = 0; i < y.size(); ++i) {
      if (!std::isfinite(y[i]) && bad++ < 5) ADD_FAILURE() << what << ": output " << i << " = " << y[i];
    }
    for (int vs_path = 1; vs_path >= 0; --vs_path) {
      double worst = 0.0;
      for (size_t ri = 0; ri < rows.size(); ++ri) {
        for (int t = 0; t < n; ++t) {
          const Ref& r = ref[ri * n + t];
          const Check ch = c.up ? gated(r, ref_up[ri * n + t], a, vs_path) : single(r, a, vs_path, c.cap);
          const double got = y[static_cast<size_t>(t) * R + rows[ri]];
          const double err = std::fabs(got - ch.want);
          worst = std::max(worst, err / ch.tol);
          if (!(err <= ch.tol) && bad++ < 8) {
            ADD_FAILURE() << what << (vs_path ? " vs its arithmetic" : " vs exact") << ": row "
                          << rows[ri] << " token " << t << ": gpu " << got << " want " << ch.want
                          << " tol " << ch.tol;
          }
        }
      }
      if (bad) std::printf("%s: worst error/tol %.3g\n", what.c_str(), worst);
    }
    EXPECT_EQ(bad, 0) << what;
  }

  // (3) The automatic choice against matvec (matvec_gated for Q4_0 gate/up) once per token.
  Dev<float> dmv(static_cast<size_t>(n) * R);
  for (int t = 0; t < n; ++t) {
    const cuda::Q8Act qt{dq.p + t * K, dds.p + t * K / 32};
    if (c.up) {
      if (w.type != DType::kQ4_0) break;
      cuda::matvec_gated(w.m, c.up->m, qt, 1, dmv.p + t * R, nullptr);
    } else {
      cuda::matvec(w.m, dx.p + t * K, qt, 1, dmv.p + t * R, c.cap, nullptr);
    }
  }
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  if (c.up && w.type != DType::kQ4_0) return;
  const std::vector<float> mv = dmv.get();
  int bad = 0;
  const Arith mv_arith = w.type == DType::kF32 ? Arith::kF32 : Arith::kQ8;
  // Same arithmetic: float rounding only (twice the accumulation term). Else each within its bound
  // of the exact product.
  auto tol_of = [&](const Ref& r) {
    if (auto_arith == mv_arith) {
      return 2 * kAcc * (mv_arith == Arith::kQ8 ? r.mag_q8 : r.mag) + 1e-6;
    }
    return single(r, auto_arith, false, 0.0f).tol + single(r, mv_arith, false, 0.0f).tol;
  };
  for (size_t ri = 0; ri < rows.size(); ++ri) {
    for (int t = 0; t < n; ++t) {
      const Ref& r = ref[ri * n + t];
      const size_t i = static_cast<size_t>(t) * R + rows[ri];
      double tol = tol_of(r);
      if (c.up) {
        const Ref& u = ref_up[ri * n + t];
        const double gg = std::fabs(cpu::gelu_tanh(static_cast<float>(r.exact)));
        const double tu = tol_of(u);
        tol = 1.13 * std::fabs(u.exact) * tol + gg * tu + tol * tu + 1e-6;
      }
      if (!(std::fabs(y_auto[i] - mv[i]) <= tol) && bad++ < 5) {
        ADD_FAILURE() << c.name << " n=" << n << " vs matvec: row " << rows[ri] << " token " << t
                      << ": matmul_n " << y_auto[i] << " matvec " << mv[i] << " tol " << tol;
      }
    }
  }
  EXPECT_EQ(bad, 0) << c.name << " n=" << n << " vs matvec";

  // (4) The rows pass's products (matmul_rows, matmul_rows_gated for Q4_0 pairs) equal matvec
  // bit for bit, row by row, whatever n: the production rule, and the tensor-core kernel at
  // every n (where the rule takes dp4a).
  if (c.up && w.type != DType::kQ4_0) return;
  Dev<float> drows(static_cast<size_t>(n) * R);
  // The gated form's q8 copy of its output (the down product's input) against quantize_q8 of
  // matvec's, byte for byte.
  Dev<int8_t> dgq(static_cast<size_t>(n) * R), dmvq(static_cast<size_t>(n) * R);
  Dev<cuda::Q8Ds> dgds(static_cast<size_t>(n) * R / 32), dmvds(static_cast<size_t>(n) * R / 32);
  const bool gq = c.up && R % 32 == 0;
  if (gq) {
    cuda::quantize_q8(dmv.p, n, static_cast<int>(R), cuda::Q8Act{dmvq.p, dmvds.p}, nullptr);
  }
  for (const bool mma : {false, true}) {
    drows.poison();
    if (gq) {
      ASSERT_EQ(cudaMemset(dgq.p, 0x7f, static_cast<size_t>(n) * R), cudaSuccess);
      ASSERT_EQ(cudaMemset(dgds.p, 0x7f, sizeof(cuda::Q8Ds) * n * R / 32), cudaSuccess);
    }
    cuda::matmul_rows_variant(mma, w.m, c.up ? &c.up->m : nullptr, dx.p, xq, n, drows.p,
                              c.up ? 0.0f : c.cap, nullptr, cuda::kDefaultTuning,
                              gq ? cuda::Q8Act{dgq.p, dgds.p} : cuda::Q8Act{});
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    if (gq) {
      const std::vector<int8_t> a = dgq.get(), b = dmvq.get();
      const std::vector<cuda::Q8Ds> ad = dgds.get(), bd = dmvds.get();
      EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size()), 0)
          << c.name << " n=" << n << (mma ? " (tensor cores)" : "") << ": q8 of the gated rows";
      EXPECT_EQ(std::memcmp(ad.data(), bd.data(), ad.size() * sizeof(cuda::Q8Ds)), 0)
          << c.name << " n=" << n << (mma ? " (tensor cores)" : "") << ": (s, sum q) of the gated rows";
    }
    const std::vector<float> yr = drows.get();
    const char* what = mma ? "matmul_rows (tensor cores)" : "matmul_rows";
    int diff = 0;
    for (size_t i = 0; i < yr.size(); ++i) {
      if (std::memcmp(&yr[i], &mv[i], sizeof(float)) != 0 && diff++ < 5) {
        ADD_FAILURE() << c.name << " n=" << n << " " << what << " vs matvec: output " << i
                      << " (token " << i / R << ", row " << i % R << "): " << yr[i] << " vs "
                      << mv[i];
      }
    }
    EXPECT_EQ(diff, 0) << c.name << " n=" << n << " " << what << " is not matvec bit for bit";
  }
}

const std::vector<int> kTokens = {1, 2, 3, 4, 5, 8, 13, 16, 32};

void check_all_n(const Matrix& w, const Matrix* up, float cap, const std::string& name) {
  for (int n : kTokens) {
    check_case({w, up, n, cap, name});
    if (::testing::Test::HasFailure()) return;  // one shape's failures are enough to read
  }
}

TEST(CudaMatmulN, Q4_0At12BWidths) {
  REQUIRE_GPU();
  {
    const Matrix w(DType::kQ4_0, 4096 + 2048 + 2048, 3840);
    check_all_n(w, nullptr, 0.0f, "12B q|k|v Q4_0 8192x3840");
  }
  {
    const Matrix w(DType::kQ4_0, 3840, 15360);
    check_all_n(w, nullptr, 0.0f, "12B ffn_down Q4_0 3840x15360");
  }
  {
    const Matrix w(DType::kQ4_0, 3840, 8192);
    check_all_n(w, nullptr, 0.0f, "12B full attn_output Q4_0 3840x8192");
  }
}

TEST(CudaMatmulN, Q4_0At31BWidths) {
  REQUIRE_GPU();
  {
    const Matrix w(DType::kQ4_0, 16384 + 2048, 5376);
    check_all_n(w, nullptr, 0.0f, "31B full q|k Q4_0 18432x5376");
  }
  {
    const Matrix w(DType::kQ4_0, 5376, 21504);
    check_all_n(w, nullptr, 0.0f, "31B ffn_down Q4_0 5376x21504");
  }
}

TEST(CudaMatmulN, GatedGeluAt12BAnd31BWidths) {
  REQUIRE_GPU();
  {
    const Matrix g(DType::kQ4_0, 15360, 3840), u(DType::kQ4_0, 15360, 3840);
    check_all_n(g, &u, 0.0f, "12B gate|up Q4_0 15360x3840");
  }
  {
    const Matrix g(DType::kQ4_0, 21504, 5376), u(DType::kQ4_0, 21504, 5376);
    check_all_n(g, &u, 0.0f, "31B gate|up Q4_0 21504x5376");
  }
  {
    const Matrix g(DType::kQ8_0, 1000, 3840), u(DType::kQ8_0, 1000, 3840);
    check_all_n(g, &u, 0.0f, "gate|up Q8_0 1000x3840");
  }
}

// The output head: Q8_0 and Q6_K rows of the real widths, soft-capped at Gemma 4's 30.
TEST(CudaMatmulN, HeadRowsQ8_0AndQ6_KWithSoftCap) {
  REQUIRE_GPU();
  {
    const Matrix w(DType::kQ8_0, 3000, 3840);
    check_all_n(w, nullptr, 30.0f, "12B head Q8_0 3000x3840");
  }
  {
    const Matrix w(DType::kQ8_0, 2000, 5376);
    check_all_n(w, nullptr, 30.0f, "31B head Q8_0 2000x5376");
  }
  {
    const Matrix w(DType::kQ6_K, 3000, 3840);
    check_all_n(w, nullptr, 30.0f, "12B head Q6_K 3000x3840");
  }
  {
    const Matrix w(DType::kQ6_K, 2000, 5376);
    check_all_n(w, nullptr, 0.0f, "31B head Q6_K 2000x5376");
  }
  {
    // All-Q6_K files' ffn_down (12B, 31B): too wide to stage 8 tokens beside a tile, so matvec
    // takes their rows one token a grid row (still each equal to decode bit for bit).
    const Matrix w12(DType::kQ6_K, 200, 15360);
    check_all_n(w12, nullptr, 0.0f, "12B ffn_down Q6_K 200x15360");
    const Matrix w31(DType::kQ6_K, 200, 21504);
    check_all_n(w31, nullptr, 0.0f, "31B ffn_down Q6_K 200x21504");
  }
}

// The rows pass's tensor-core form (matmul_rows_mma.cu) at the shapes it meets apart from the
// widths above: 2 rows (dp4a), 5 (the fewest it takes), a verification of 9 rows, 17 and 24 rows
// (partial token tiles), 33 (a group of 32 and one), row counts that
// are no multiple of its 16-row tile, a last chunk of 8 blocks (5376 columns), Q8_0 with the
// soft cap, and the gated pair. check_case's part (4) asserts matmul_rows ≡ matvec bit for bit,
// by the production rule and on the tensor cores at every n.
TEST(CudaMatmulN, RowsOnTensorCoresAtVerifyAndBatchShapes) {
  REQUIRE_GPU();
  const Matrix w(DType::kQ4_0, 1000, 5376);
  const Matrix h(DType::kQ8_0, 1001, 3840);
  const Matrix g(DType::kQ4_0, 1000, 3840), u(DType::kQ4_0, 1000, 3840);
  for (int n : {2, 5, 9, 17, 24, 33}) {
    check_case({w, nullptr, n, 0.0f, "Q4_0 1000x5376"});
    check_case({h, nullptr, n, 30.0f, "Q8_0 1001x3840 capped"});
    check_case({g, &u, n, 0.0f, "gate|up Q4_0 1000x3840"});
  }
  // The 12B's qkv rows: enough 64-row tiles for every SM of an H200 (up to 8 rows), the
  // 1000-row matrices above stay on 32-row tiles.
  const Matrix qkv(DType::kQ4_0, 8192 + 32, 3840), qkv8(DType::kQ8_0, 8192 + 32, 3840);
  for (int n : {5, 8}) {
    check_case({qkv, nullptr, n, 0.0f, "Q4_0 8224x3840"});
    check_case({qkv8, nullptr, n, 0.0f, "Q8_0 8224x3840"});
  }
}

// The mma kernel's K split: each cluster size (3 too: ranks own uneven row shares; 16 where the
// device takes non-portable clusters, else clamped to 8), one
// matrix and the gated form, two and four n tiles.
TEST(CudaMatmulN, MmaSplitsOfK) {
  REQUIRE_GPU();
  const std::vector<int> splits = {1, 2, 3, 4, 8, 16};
  const Matrix w(DType::kQ4_0, 3840 + 64, 3840);
  const Matrix w8(DType::kQ8_0, 1000, 3840);
  const Matrix g(DType::kQ4_0, 1000, 5376), u(DType::kQ4_0, 1000, 5376);
  for (int n : {13, 32}) {
    check_case({w, nullptr, n, 0.0f, "Q4_0 3904x3840"}, splits);
    check_case({w8, nullptr, n, 0.0f, "Q8_0 1000x3840"}, splits);
    check_case({g, &u, n, 0.0f, "gate|up Q4_0 1000x5376"}, splits);
  }
}

// Shapes the mma kernel does not take (cols not a multiple of 128: dp4a in groups), a row count
// that is no multiple of any tile, and F32 weights (matvec over the tokens).
TEST(CudaMatmulN, RaggedShapesAndF32) {
  REQUIRE_GPU();
  const Matrix a(DType::kQ4_0, 37, 64), b(DType::kQ8_0, 45, 96), c(DType::kQ4_0, 77, 384);
  const Matrix f(DType::kF32, 50, 256);
  for (int n : {1, 3, 9, 40}) {
    check_case({a, nullptr, n, 0.0f, "Q4_0 37x64"});
    check_case({b, nullptr, n, 0.0f, "Q8_0 45x96"});
    check_case({c, nullptr, n, 0.0f, "Q4_0 77x384"});
    check_case({f, nullptr, n, 0.0f, "F32 50x256"});
  }
}

}  // namespace
}  // namespace gem
