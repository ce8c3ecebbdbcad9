// cuda::row_logprobs against the host reference row_logprobs (backend.cc) on random logits at the
// real vocabulary size (262,144) and awkward ones, with ties and -inf entries; and the CUDA
// backend's token_logprobs on the tiny model against the reference over its logits row.
// Skips, saying so, on a machine without a CUDA device.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/logprobs.cuh"
#include "common/test_util.h"
#include "cuda/cuda_test_util.h"
#include "model/model.h"

namespace gem {
namespace {

using test::Dev;

// The device sums exp(l - m_b) in f32 (four terms per thread, then a tree over the block: at
// most log2(n) + 2 roundings on any term's path, and expf within 2 ulp) and combines the blocks
// in double: the sum is within (log2(n) + 4)·eps relative, so lse within that absolutely. Each
// l - m_b is rounded too (eps·|l - m_b| on that term's exp, at most eps·spread over the row).
// A logprob l - lse adds the rounding of its f32 result, eps·|logprob|.
double tolerance(const std::vector<float>& row, double logprob) {
  constexpr double eps = 1.0 / (1 << 23);
  float lo = INFINITY, hi = -INFINITY;
  for (float v : row) {
    if (std::isfinite(v)) {
      lo = std::min(lo, v);
      hi = std::max(hi, v);
    }
  }
  const double spread = std::isfinite(hi - lo) ? hi - lo : 0.0;
  return eps * (std::log2(static_cast<double>(row.size())) + 4.0 + spread + std::fabs(logprob));
}

struct Case {
  int n;
  int top_n;
  float scale;
  const char* kind;  // "randn", "ties" (values on a 0.5 grid), "neg-inf" (a third at -inf)
};

std::string vars(const Case& c, int32_t token) {
  return "n=" + std::to_string(c.n) + " top_n=" + std::to_string(c.top_n) +
         " scale=" + std::to_string(c.scale) + " kind=" + c.kind + " token=" + std::to_string(token);
}

std::vector<float> make_row(const Case& c) {
  std::vector<float> row = test::randn(static_cast<size_t>(c.n), c.scale);
  if (std::strcmp(c.kind, "ties") == 0) {
    for (float& v : row) v = std::round(v * 2.0f) / 2.0f;
  } else if (std::strcmp(c.kind, "neg-inf") == 0) {
    for (size_t i = 0; i < row.size(); i += 3) row[i] = -INFINITY;
  }
  return row;
}

void check(const Case& c) {
  const std::vector<float> row = make_row(c);
  std::uniform_int_distribution<int32_t> pick(0, c.n - 1);
  int32_t token = pick(test::rng());
  if (std::strcmp(c.kind, "neg-inf") == 0 && c.n > 1) token = (token / 3) * 3 + 1;  // finite
  if (token >= c.n) token = 0;
  const std::string at = vars(c, token);
  const TokenLogprobs want = row_logprobs(row, token, c.top_n);

  Dev<float> d_row(row);
  Dev<float> scratch(static_cast<size_t>(cuda::row_logprobs_scratch_floats(c.n)));
  Dev<cuda::RowLogprobs> out(1);
  cuda::row_logprobs(d_row.p, c.n, token, c.top_n, scratch.p, out.p, nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << at;
  const cuda::RowLogprobs got = out.get()[0];

  EXPECT_NEAR(got.token_logprob, want.logprob, tolerance(row, want.logprob)) << at << ": token";
  ASSERT_EQ(static_cast<int>(want.top.size()), std::min(c.top_n, c.n)) << at;
  int bad = 0;
  for (size_t i = 0; i < want.top.size(); ++i) {
    const auto [id, lp] = want.top[i];
    // The order is exact: both sides compare the same f32 logits, ties by lower id.
    if (got.ids[i] != id || std::fabs(got.logprobs[i] - lp) > tolerance(row, lp)) {
      if (++bad <= 4) {
        ADD_FAILURE() << at << ": top[" << i << "] expected (" << id << ", " << lp << "), got ("
                      << got.ids[i] << ", " << got.logprobs[i] << ")";
      }
    }
  }
  EXPECT_EQ(bad, 0) << at;
}

TEST(CudaLogprobs, MatchesTheHostAtEveryShape) {
  REQUIRE_GPU();
  const int kVocab = 262144;  // Gemma 4's
  const Case cases[] = {
      {kVocab, 20, 1.0f, "randn"}, {kVocab, 20, 4.0f, "randn"}, {kVocab, 5, 8.0f, "randn"},
      {kVocab, 1, 1.0f, "randn"},  {kVocab, 0, 1.0f, "randn"},  {kVocab, 20, 2.0f, "ties"},
      {kVocab, 20, 2.0f, "neg-inf"}, {kVocab + 77, 20, 3.0f, "randn"},
      {1, 20, 1.0f, "randn"},      {3, 2, 1.0f, "randn"},       {3, 20, 1.0f, "ties"},
      {127, 20, 1.0f, "randn"},    {1000, 7, 2.0f, "ties"},     {1025, 20, 1.0f, "randn"},
      {300000, 20, 1.0f, "randn"},
  };
  for (const Case& c : cases) {
    for (int rep = 0; rep < 3; ++rep) check(c);
  }
}

// The backend's last row after a decode step (left on the device) against the reference over
// the same row read back with logits().
TEST(CudaLogprobs, BackendTokenLogprobsMatchItsLogitsRow) {
  REQUIRE_GPU();
  const std::string path = test::fixture("tiny-q4_0.gguf");
  GEM_REQUIRE_FIXTURE(path);
  auto m = model::load_model(path);
  ASSERT_TRUE(m.ok()) << m.message();
  BackendOptions o;
  o.n_ctx = 128;
  auto b = make_cuda_backend(**m, o);
  ASSERT_TRUE(b.ok()) << b.message();
  Backend& gpu = **b;
  const int32_t prompt[] = {2, 10, 20, 30, 40};
  ASSERT_TRUE(gpu.eval(prompt, false).ok());
  for (int step = 0; step < 4; ++step) {
    const int32_t one[] = {static_cast<int32_t>(50 + 7 * step)};
    ASSERT_TRUE(gpu.eval(one, false).ok());
    const int32_t token = 7 + step;
    const TokenLogprobs got = gpu.token_logprobs(token, 20);  // before the row is read back
    const std::span<const float> l = gpu.logits(-1);
    const std::vector<float> row(l.begin(), l.end());
    ASSERT_LT(token, static_cast<int32_t>(row.size()));
    const TokenLogprobs want = row_logprobs(row, token, 20);
    const std::string at = "step " + std::to_string(step);
    EXPECT_NEAR(got.logprob, want.logprob, tolerance(row, want.logprob)) << at;
    ASSERT_EQ(got.top.size(), want.top.size()) << at;
    for (size_t i = 0; i < want.top.size(); ++i) {
      EXPECT_EQ(got.top[i].first, want.top[i].first) << at << " top[" << i << "]";
      EXPECT_NEAR(got.top[i].second, want.top[i].second, tolerance(row, want.top[i].second))
          << at << " top[" << i << "]";
    }
  }
}

}  // namespace
}  // namespace gem
