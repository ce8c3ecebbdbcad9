// Sampler tests: each method's draw frequencies against the distribution computed independently
// here (chi-square at alpha = 0.001 with a fixed seed), exclusion of truncated tokens, greedy
// ties, penalties, and seed reproducibility.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <numeric>
#include <vector>

#include "sampler/sampler.h"

namespace gem {
namespace {

const std::vector<float> kLogits = {2.0f, 1.5f, 1.2f, 0.9f, 0.5f, 0.0f, -0.4f, -1.0f, 1.8f, 0.2f};

std::vector<double> softmax_of(const std::vector<float>& l, const std::vector<int>& ids,
                               double temp) {
  std::vector<double> p(l.size(), 0.0);
  double mx = -1e300;
  for (int i : ids) mx = std::max(mx, static_cast<double>(l[i]));
  double s = 0.0;
  for (int i : ids) s += (p[i] = std::exp((l[i] - mx) / temp));
  for (double& q : p) q /= s;
  return p;
}

// Ids sorted by descending logit.
std::vector<int> ranked(const std::vector<float>& l) {
  std::vector<int> ids(l.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::stable_sort(ids.begin(), ids.end(), [&](int a, int b) { return l[a] > l[b]; });
  return ids;
}

// Wilson-Hilferty approximation of the chi-square quantile at 1 - 0.001 (z = 3.0902).
double chi2_critical(int df) {
  const double z = 3.0902, k = df;
  const double t = 1.0 - 2.0 / (9.0 * k) + z * std::sqrt(2.0 / (9.0 * k));
  return k * t * t * t;
}

// Draws n tokens with sample_token and checks the histogram against `expected`: zero-probability
// ids must never appear; the rest pass a chi-square test.
void expect_distribution(const std::vector<float>& logits, const SamplingParams& params,
                         const std::vector<int32_t>& history, const std::vector<double>& expected,
                         const char* what) {
  const int n = 40000;
  Rng rng(12345);
  std::vector<int> counts(logits.size(), 0);
  for (int i = 0; i < n; ++i) {
    int32_t t = sample_token(logits, params, history, rng.next_double());
    ASSERT_GE(t, 0);
    ASSERT_LT(t, static_cast<int32_t>(logits.size()));
    counts[t]++;
  }
  double chi2 = 0.0;
  int df = -1;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (expected[i] == 0.0) {
      EXPECT_EQ(counts[i], 0) << what << ": token " << i << " should be excluded";
      continue;
    }
    const double e = expected[i] * n;
    chi2 += (counts[i] - e) * (counts[i] - e) / e;
    ++df;
  }
  if (df > 0) {
    EXPECT_LT(chi2, chi2_critical(df)) << what << ": chi2 " << chi2 << " df " << df;
  }
}

TEST(Sampler, GreedyPicksArgmaxLowestIdOnTies) {
  SamplingParams p;
  p.temperature = 0.0f;
  std::vector<float> l = {0.1f, 3.0f, -2.0f, 3.0f};
  EXPECT_EQ(sample_token(l, p, {}, 0.99), 1);
  l[3] = 3.5f;
  EXPECT_EQ(sample_token(l, p, {}, 0.0), 3);
}

// Random test rows: n logits on a quarter-step grid in [-5, 5] (many ties); penalties and a
// window chosen by the trial; a history of up to 39 ids, some outside the row (-1, n, n + 1).
std::vector<float> tied_row(Rng& rng, int n) {
  std::vector<float> l(n);
  for (float& x : l) x = static_cast<float>(static_cast<int>(rng.next_u64() % 41) - 20) / 4.0f;
  return l;
}
void trial_penalties(SamplingParams& p, int trial, int no_repeat_mod) {
  p.repeat_penalty = trial % 3 == no_repeat_mod ? 1.0f : 1.3f;
  p.frequency_penalty = trial % 4 == 1 ? 0.5f : 0.0f;
  p.presence_penalty = trial % 4 == 2 ? 0.7f : 0.0f;
  p.repeat_last_n = trial % 6 == 0 ? -1 : trial % 6 == 1 ? 0 : 16;
}
std::vector<int32_t> random_history(Rng& rng, int n) {
  std::vector<int32_t> history(rng.next_u64() % 40);
  for (int32_t& t : history) t = static_cast<int32_t>(rng.next_u64() % (n + 3)) - 1;
  return history;
}

// Greedy picks skip building the distribution: the pick equals the distribution's (all mass on
// one id) on random rows with ties, NaN and -inf entries, under every penalty and window.
TEST(Sampler, GreedyEqualsTheDistributionsPick) {
  Rng rng(7);
  for (int trial = 0; trial < 400; ++trial) {
    const int n = 1 + static_cast<int>(rng.next_u64() % 300);
    std::vector<float> l = tied_row(rng, n);
    if (trial % 5 == 1) l[rng.next_u64() % n] = std::nanf("");
    if (trial % 5 == 2) l[0] = std::nanf("");
    if (trial % 7 == 3) l[rng.next_u64() % n] = -INFINITY;
    SamplingParams p;
    p.temperature = 0.0f;
    trial_penalties(p, trial, 0);
    const std::vector<int32_t> history = random_history(rng, n);
    const auto dist = sampling_distribution(l, p, history);
    ASSERT_EQ(dist.size(), 1u);
    EXPECT_EQ(sample_token(l, p, history, 0.3), dist[0].first) << "trial " << trial;
  }
}

// With a top-k below the row's size the candidates come from one pass over the row: the
// distribution equals the plain reference's bit for bit (ids, order, probabilities) on random
// rows with ties and -inf entries, under every penalty and window, top-k, top-p and min-p; on
// rows with NaN entries the pass keeps none of them, and its other candidates are the
// reference's on the row with the NaNs at -inf (a top-k of the row's size or more takes the
// reference itself).
TEST(Sampler, TopKPassEqualsTheReference) {
  Rng rng(11);
  for (int trial = 0; trial < 600; ++trial) {
    const int n = 2 + static_cast<int>(rng.next_u64() % 400);
    std::vector<float> l = tied_row(rng, n);
    if (trial % 7 == 3) l[rng.next_u64() % n] = -INFINITY;
    const bool with_nan = trial % 5 == 1;
    if (with_nan) l[rng.next_u64() % n] = std::nanf("");
    SamplingParams p;
    p.temperature = trial % 4 == 0 ? 0.7f : 1.0f;
    const int ks[] = {1, 2, 5, 40, 64, n - 1};
    p.top_k = ks[trial % 6];
    p.top_p = trial % 3 == 0 ? 1.0f : 0.9f;
    p.min_p = trial % 5 == 2 ? 0.05f : 0.0f;
    trial_penalties(p, trial, 1);
    const std::vector<int32_t> history = random_history(rng, n);
    const auto got = sampling_distribution(l, p, history);
    const std::string what = "trial " + std::to_string(trial) + " n " + std::to_string(n) +
                             " top_k " + std::to_string(p.top_k);
    if (!with_nan) {
      const auto want = sampling_distribution_reference(l, p, history);
      ASSERT_EQ(got.size(), want.size()) << what;
      for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_EQ(got[i].first, want[i].first) << what << " rank " << i;
        EXPECT_EQ(got[i].second, want[i].second) << what << " rank " << i;
      }
      continue;
    }
    if (p.top_k >= n) continue;
    for (const auto& [id, q] : got) EXPECT_FALSE(std::isnan(l[static_cast<size_t>(id)])) << what;
    std::vector<float> no_nan = l;
    for (float& x : no_nan) x = std::isnan(x) ? -INFINITY : x;
    auto want = sampling_distribution_reference(no_nan, p, history);
    std::vector<std::pair<int32_t, float>> got_pos, want_pos;  // the candidates with mass
    for (const auto& e : got) if (e.second > 0.0f) got_pos.push_back(e);
    for (const auto& e : want) if (e.second > 0.0f) want_pos.push_back(e);
    EXPECT_EQ(got_pos, want_pos) << what;
  }
  // The real vocabulary: 262,144 random logits, Gemma 4's recommended sampling, a penalty window.
  std::vector<float> row(262144);
  for (int trial = 0; trial < 3; ++trial) {
    for (float& x : row) x = static_cast<float>(rng.next_double() * 20.0 - 10.0);
    SamplingParams p;
    p.temperature = 1.0f;
    p.top_k = 64;
    p.top_p = 0.95f;
    p.repeat_penalty = trial == 0 ? 1.0f : 1.1f;
    std::vector<int32_t> history(64);
    for (int32_t& t : history) t = static_cast<int32_t>(rng.next_u64() % row.size());
    EXPECT_EQ(sampling_distribution(row, p, history), sampling_distribution_reference(row, p, history));
  }
}

TEST(Sampler, TemperatureMatchesScaledSoftmax) {
  SamplingParams p;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.temperature = 0.7f;
  std::vector<int> all(kLogits.size());
  std::iota(all.begin(), all.end(), 0);
  expect_distribution(kLogits, p, {}, softmax_of(kLogits, all, 0.7), "temperature 0.7");
  p.temperature = 1.6f;
  expect_distribution(kLogits, p, {}, softmax_of(kLogits, all, 1.6), "temperature 1.6");
}

TEST(Sampler, TopKKeepsTheKLargest) {
  SamplingParams p;
  p.top_k = 3;
  p.top_p = 1.0f;
  p.temperature = 1.0f;
  std::vector<int> ids = ranked(kLogits);
  ids.resize(3);
  expect_distribution(kLogits, p, {}, softmax_of(kLogits, ids, 1.0), "top-k 3");
}

TEST(Sampler, TopPKeepsTheShortestPrefixReachingP) {
  SamplingParams p;
  p.top_k = 0;
  p.top_p = 0.6f;
  p.temperature = 1.0f;
  // Independently: softmax at T=1 over all, walk in rank order until the sum reaches 0.6.
  std::vector<int> all = ranked(kLogits);
  std::vector<double> full = softmax_of(kLogits, all, 1.0);
  std::vector<int> kept;
  double cum = 0.0;
  for (int id : all) {
    kept.push_back(id);
    cum += full[id];
    if (cum >= 0.6) break;
  }
  ASSERT_GT(kept.size(), 1u);
  ASSERT_LT(kept.size(), kLogits.size());
  expect_distribution(kLogits, p, {}, softmax_of(kLogits, kept, 1.0), "top-p 0.6");
}

TEST(Sampler, MinPKeepsTokensAboveFractionOfTop) {
  SamplingParams p;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.3f;
  p.temperature = 1.0f;
  std::vector<int> kept;
  const float mx = *std::max_element(kLogits.begin(), kLogits.end());
  for (int i = 0; i < static_cast<int>(kLogits.size()); ++i) {
    if (std::exp(kLogits[i] - mx) >= 0.3) kept.push_back(i);
  }
  ASSERT_GT(kept.size(), 1u);
  ASSERT_LT(kept.size(), kLogits.size());
  expect_distribution(kLogits, p, {}, softmax_of(kLogits, kept, 1.0), "min-p 0.3");
}

TEST(Sampler, PenaltiesFollowLlamaCppFormula) {
  SamplingParams p;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.temperature = 1.0f;
  p.repeat_penalty = 1.3f;
  p.frequency_penalty = 0.2f;
  p.presence_penalty = 0.5f;
  p.repeat_last_n = 4;
  // Only the last 4 history tokens count: 0 (twice), 7, 2. Token 5 is outside the window.
  const std::vector<int32_t> history = {5, 5, 0, 7, 0, 2};
  std::vector<float> l = kLogits;
  auto penalise = [&](int id, int count) {
    l[id] = l[id] <= 0 ? l[id] * 1.3f : l[id] / 1.3f;
    l[id] -= count * 0.2f + 0.5f;
  };
  penalise(0, 2);
  penalise(7, 1);
  penalise(2, 1);
  std::vector<int> all(l.size());
  std::iota(all.begin(), all.end(), 0);
  expect_distribution(kLogits, p, history, softmax_of(l, all, 1.0), "penalties");
}

TEST(Sampler, CombinedChainTruncatesThenAppliesTemperature) {
  SamplingParams p;
  p.top_k = 5;
  p.top_p = 0.9f;
  p.min_p = 0.05f;
  p.temperature = 0.5f;
  auto dist = sampling_distribution(kLogits, p, {});
  ASSERT_FALSE(dist.empty());
  ASSERT_LE(dist.size(), 5u);
  double sum = 0.0;
  for (auto& [id, q] : dist) sum += q;
  EXPECT_NEAR(sum, 1.0, 1e-6);
  // Sorted by probability; the top token is the arg-max.
  EXPECT_EQ(dist.front().first, 0);
  for (size_t i = 1; i < dist.size(); ++i) EXPECT_GE(dist[i - 1].second, dist[i].second);
  std::vector<int> kept;
  for (auto& [id, q] : dist) kept.push_back(id);
  expect_distribution(kLogits, p, {}, softmax_of(kLogits, kept, 0.5), "chain");
}

TEST(Sampler, SameSeedSameTokensOtherSeedDiffers) {
  SamplingParams p;
  p.top_k = 0;
  p.top_p = 1.0f;
  std::vector<float> flat(1000, 0.0f);
  auto run = [&](uint64_t seed) {
    Rng rng(seed);
    std::vector<int32_t> out;
    for (int i = 0; i < 64; ++i) out.push_back(sample_token(flat, p, {}, rng.next_double()));
    return out;
  };
  EXPECT_EQ(run(7), run(7));
  EXPECT_NE(run(7), run(8));
}

TEST(Sampler, RngIsUniform) {
  Rng rng(99);
  const int bins = 16, n = 160000;
  std::vector<int> c(bins, 0);
  for (int i = 0; i < n; ++i) {
    double u = rng.next_double();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    c[static_cast<int>(u * bins)]++;
  }
  double chi2 = 0.0, e = static_cast<double>(n) / bins;
  for (int k : c) chi2 += (k - e) * (k - e) / e;
  EXPECT_LT(chi2, chi2_critical(bins - 1));
}

}  // namespace
}  // namespace gem
