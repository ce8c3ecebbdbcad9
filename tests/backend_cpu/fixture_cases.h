// Helpers shared by the CPU backend tests: the fixture models (loaded once per process), the
// llama.cpp case files, and the comparisons of fixtures/README.md ("Suggested checks for gem").
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "model/model.h"

namespace gem::test {

struct TopEntry {
  int32_t id = 0;
  float logit = 0.0f;
};
using TopList = std::vector<TopEntry>;  // sorted by logit, ties by lower id

// One case JSON of fixtures/outputs/<tag>/<prompt>.json.
struct FixtureCase {
  std::string tag;
  std::string prompt_name;
  std::vector<int32_t> prompt;
  std::vector<int32_t> greedy;
  std::vector<TopList> prompt_top;  // per prompt position
  std::vector<TopList> greedy_top;  // after feeding greedy[k]
  std::vector<std::pair<int, std::string>> full_logits;  // (pos, path of the .f32)
};

FixtureCase load_case(const std::string& tag, const std::string& prompt_name);
std::vector<float> load_f32(const std::string& path);
// The prompts of manifest.json in its order.
std::vector<std::string> fixture_prompt_names();

// The fixture model `file` (e.g. "tiny-q4_0.gguf"), loaded once per process; nullptr (and a
// test failure) when it cannot be loaded.
const model::Model* fixture_model(const std::string& file);

// Pass criteria of one comparison.
struct Tolerance {
  double rel_l2 = 0.0;        // full vectors: ||ours - ref|| / ||ref||
  double max_abs = 0.0;       // full vectors and the ids of the fixture's top-20
  double top1_margin = -1.0;  // top-1 must agree where the fixture's margin exceeds this (< 0: off)
  double min_overlap = 0.0;   // top-20 overlap (|ours ∩ ref| / 20)
};

// Worst errors seen over a run of comparisons (printed by the tests).
struct ErrorStats {
  double rel_l2 = 0.0;
  double full_max_abs = 0.0;
  double top_max_abs = 0.0;
  double min_overlap = 1.0;
  int top1_checked = 0;
  int top1_agree = 0;
  void merge(const ErrorStats& o);
};

// Compares logits (n_vocab values) with a fixture top-20 list; adds failures with `what` as context.
void compare_top(const float* logits, int64_t n_vocab, const TopList& ref, const Tolerance& tol,
                 const std::string& what, ErrorStats& stats);
// Compares with a stored full vector.
void compare_full(const float* logits, const std::vector<float>& ref, const Tolerance& tol,
                  const std::string& what, ErrorStats& stats);

// The top-k (id, logit) of a logit vector, sorted like the fixtures.
TopList top_k(const float* logits, int64_t n_vocab, int k);

}  // namespace gem::test
