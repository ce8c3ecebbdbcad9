// Fixture loading and the logit comparisons of fixtures/README.md (see fixture_cases.h).
#include "backend_cpu/fixture_cases.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>

#include "common/test_util.h"

namespace gem::test {
namespace {

TopList parse_top(const nlohmann::json& j) {
  TopList out;
  for (const auto& e : j) out.push_back({e[0].get<int32_t>(), e[1].get<float>()});
  return out;
}

}  // namespace

FixtureCase load_case(const std::string& tag, const std::string& prompt_name) {
  FixtureCase c;
  c.tag = tag;
  c.prompt_name = prompt_name;
  const std::string dir = fixture("outputs/" + tag + "/");
  const std::string path = dir + prompt_name + ".json";
  EXPECT_TRUE(file_exists(path)) << missing_fixture_message(path);
  if (!file_exists(path)) return c;
  const nlohmann::json j = nlohmann::json::parse(read_text(path));
  c.prompt = j["prompt"].get<std::vector<int32_t>>();
  c.greedy = j["greedy"].get<std::vector<int32_t>>();
  for (const auto& t : j["prompt_top"]) c.prompt_top.push_back(parse_top(t));
  for (const auto& t : j["greedy_top"]) c.greedy_top.push_back(parse_top(t));
  for (const auto& f : j["full_logits"]) {
    c.full_logits.emplace_back(f["pos"].get<int>(), dir + f["file"].get<std::string>());
  }
  return c;
}

std::vector<float> load_f32(const std::string& path) {
  const std::vector<uint8_t> bytes = read_file(path);
  constexpr char kMagic[] = "GEMLGT16";  // tools/vendor_test_data.py: n, scale, n int16
  constexpr size_t kHeader = 8 + 4 + 4;
  if (bytes.size() >= kHeader && std::memcmp(bytes.data(), kMagic, 8) == 0) {
    uint32_t n = 0;
    float scale = 0.0f;
    std::memcpy(&n, bytes.data() + 8, 4);
    std::memcpy(&scale, bytes.data() + 12, 4);
    EXPECT_EQ(bytes.size(), kHeader + 2ull * n) << path << ": truncated";
    if (bytes.size() != kHeader + 2ull * n) return {};
    std::vector<float> out(n);
    for (uint32_t i = 0; i < n; ++i) {
      int16_t q;
      std::memcpy(&q, bytes.data() + kHeader + 2ull * i, 2);
      out[i] = static_cast<float>(q) * scale;
    }
    return out;
  }
  EXPECT_TRUE(bytes.size() % sizeof(float) == 0 && !bytes.empty()) << path << ": not a logit vector";
  std::vector<float> out(bytes.size() / sizeof(float));
  std::memcpy(out.data(), bytes.data(), out.size() * sizeof(float));
  return out;
}

std::vector<std::string> fixture_prompt_names() {
  const std::string path = fixture("manifest.json");
  if (!file_exists(path)) return {"bos_only", "short", "mid", "long", "chat", "no_bos"};
  const nlohmann::json j = nlohmann::json::parse(read_text(path));
  std::vector<std::string> names;
  for (const auto& p : j["prompts"]) names.push_back(p["name"].get<std::string>());
  return names;
}

const model::Model* fixture_model(const std::string& file) {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<model::Model>> models;
  std::lock_guard<std::mutex> lock(mu);
  auto it = models.find(file);
  if (it != models.end()) return it->second.get();
  const std::string path = fixture(file);
  EXPECT_TRUE(file_exists(path)) << missing_fixture_message(path);
  auto loaded = model::load_model(path);
  if (!loaded.ok()) {
    ADD_FAILURE() << "load_model(" << path << "): " << loaded.message();
    return nullptr;
  }
  return (models[file] = std::move(loaded).value()).get();
}

void ErrorStats::merge(const ErrorStats& o) {
  rel_l2 = std::max(rel_l2, o.rel_l2);
  full_max_abs = std::max(full_max_abs, o.full_max_abs);
  top_max_abs = std::max(top_max_abs, o.top_max_abs);
  min_overlap = std::min(min_overlap, o.min_overlap);
  top1_checked += o.top1_checked;
  top1_agree += o.top1_agree;
}

TopList top_k(const float* logits, int64_t n_vocab, int k) {
  std::vector<int32_t> ids(n_vocab);
  for (int64_t i = 0; i < n_vocab; ++i) ids[i] = static_cast<int32_t>(i);
  std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](int32_t a, int32_t b) {
    return logits[a] != logits[b] ? logits[a] > logits[b] : a < b;
  });
  TopList out;
  for (int i = 0; i < k; ++i) out.push_back({ids[i], logits[ids[i]]});
  return out;
}

void compare_top(const float* logits, int64_t n_vocab, const TopList& ref, const Tolerance& tol,
                 const std::string& what, ErrorStats& stats) {
  double worst = 0.0;
  int worst_id = -1;
  for (const TopEntry& e : ref) {
    ASSERT_TRUE(e.id >= 0 && e.id < n_vocab) << what;
    ASSERT_TRUE(std::isfinite(logits[e.id])) << what << ": logit of " << e.id << " not finite";
    const double d = std::fabs(static_cast<double>(logits[e.id]) - e.logit);
    if (d > worst) {
      worst = d;
      worst_id = e.id;
    }
  }
  stats.top_max_abs = std::max(stats.top_max_abs, worst);
  EXPECT_LE(worst, tol.max_abs) << what << ": top-20 logit of id " << worst_id << " differs by "
                                << worst;
  const TopList ours = top_k(logits, n_vocab, static_cast<int>(ref.size()));
  std::set<int32_t> ref_ids;
  for (const TopEntry& e : ref) ref_ids.insert(e.id);
  int shared = 0;
  for (const TopEntry& e : ours) shared += ref_ids.count(e.id) != 0 ? 1 : 0;
  const double overlap = static_cast<double>(shared) / ref.size();
  stats.min_overlap = std::min(stats.min_overlap, overlap);
  EXPECT_GE(overlap, tol.min_overlap) << what << ": top-20 overlap";
  if (tol.top1_margin >= 0.0 && ref.size() >= 2 && ref[0].logit - ref[1].logit > tol.top1_margin) {
    ++stats.top1_checked;
    const bool agree = ours[0].id == ref[0].id;
    stats.top1_agree += agree ? 1 : 0;
    EXPECT_TRUE(agree) << what << ": top-1 " << ours[0].id << " (" << ours[0].logit
                       << "), fixture " << ref[0].id << " (" << ref[0].logit << "), margin "
                       << ref[0].logit - ref[1].logit;
  }
}

void compare_full(const float* logits, const std::vector<float>& ref, const Tolerance& tol,
                  const std::string& what, ErrorStats& stats) {
  double diff_sq = 0.0, ref_sq = 0.0, worst = 0.0;
  size_t worst_at = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double d = static_cast<double>(logits[i]) - ref[i];
    diff_sq += d * d;
    ref_sq += static_cast<double>(ref[i]) * ref[i];
    if (!(std::fabs(d) <= worst)) {
      worst = std::fabs(d);
      worst_at = i;
    }
  }
  const double rel = std::sqrt(diff_sq / ref_sq);
  stats.rel_l2 = std::max(stats.rel_l2, rel);
  stats.full_max_abs = std::max(stats.full_max_abs, worst);
  EXPECT_LE(rel, tol.rel_l2) << what << ": full-logit relative L2";
  EXPECT_LE(worst, tol.max_abs) << what << ": full-logit max |Δ| at id " << worst_at << " (ours "
                                << logits[worst_at] << ", fixture " << ref[worst_at] << ")";
}

}  // namespace gem::test
