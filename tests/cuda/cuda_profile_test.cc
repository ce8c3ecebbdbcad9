// gem profile's measurement (runtime/stage_profile.h) on the CUDA backend: the stages the CUDA
// forward marks appear for both layer kinds in a decode step (a graph with event record nodes)
// and in a prompt tile (events between eager launches); a decode step's stages sum to within
// 10 % of the production graph's step; a profiled step computes exactly what the production
// graph computes, and the production graph is the same after profiling. When
// GEM_CUDA_SYNTH_12B names a gem synth file, the 10 % check runs on it at depth 4096 too.
// Skips, saying so, on a machine without a CUDA device.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/profile.h"
#include "common/test_util.h"
#include "model/model.h"
#include "runtime/stage_profile.h"
#include "cuda/cuda_test_util.h"

namespace gem {
namespace {

struct Loaded {
  std::unique_ptr<model::Model> model;
  std::unique_ptr<Backend> backend;
};

Loaded load(const std::string& path, int n_ctx, int n_tile, int n_slots = 1) {
  Loaded l;
  auto m = model::load_model(path);
  EXPECT_TRUE(m.ok()) << m.message();
  if (!m.ok()) return l;
  l.model = std::move(m).value();
  BackendOptions o;
  o.n_ctx = n_ctx;
  o.n_tile = n_tile;
  o.kv_type = model::KvType::kF16;
  o.n_slots = n_slots;
  auto b = make_cuda_backend(*l.model, o);
  EXPECT_TRUE(b.ok()) << b.message();
  if (b.ok()) l.backend = std::move(b).value();
  return l;
}

std::set<std::string> stages_of(const runtime::PassProfile& p, runtime::StageScope scope) {
  std::set<std::string> out;
  for (const runtime::StageRow& r : p.stages) {
    if (r.scope == scope) out.insert(std::string(stage_name(r.stage)));
  }
  return out;
}

// Stages every CUDA pass marks for each layer kind (decode and the rows pass of a batched step:
// no kv_write, the prologue writes the K/V; gelu is the q8 quantisation of Q4_0's ffn_down, which
// a rows pass's gate|up product writes itself: the batched step and the verification here, while
// the tile passes checked here, 1 and 32 rows, are the decode step and the n-token products).
void check_stages(const runtime::PassProfile& p) {
  SCOPED_TRACE("rows " + std::to_string(p.rows));
  std::vector<std::string> want = {"qkv",      "rope",        "attention", "attn_out",
                                   "epilogue", "ffn_gate_up", "ffn_down"};
  if (p.shape == runtime::PassShape::kTile) want.push_back("gelu");
  if (p.rows > 1 && p.shape == runtime::PassShape::kTile) want.push_back("kv_write");
  for (runtime::StageScope scope : {runtime::StageScope::kSliding, runtime::StageScope::kFull}) {
    const std::set<std::string> got = stages_of(p, scope);
    for (const std::string& s : want) {
      EXPECT_TRUE(got.count(s)) << s << " missing for " << runtime::scope_name(scope);
    }
  }
  const std::set<std::string> global = stages_of(p, runtime::StageScope::kGlobal);
  for (const char* s : {"setup", "embed", "head"}) EXPECT_TRUE(global.count(s)) << s;
  // Sampling is timed for decode steps and for every row of a batched step or a verification.
  EXPECT_EQ(global.count("sample") == 1, p.rows == 1 || p.shape != runtime::PassShape::kTile);
  for (const runtime::StageRow& r : p.stages) {
    EXPECT_GE(r.min_s, 0.0) << stage_name(r.stage);
    EXPECT_GE(r.mean_s, r.min_s) << stage_name(r.stage);
  }
  EXPECT_GT(p.forward_mean_s, 0.0);
  EXPECT_LE(p.forward_mean_s, p.profiled_eval_mean_s * 1.0001);
}

double gap(const runtime::PassProfile& p) {
  return (p.forward_mean_s - p.plain_mean_s) / p.plain_mean_s;
}

TEST(CudaProfile, StagesOfBothLayerKinds) {
  REQUIRE_GPU();
  const std::string path = test::fixture("tiny-q4_0.gguf");
  GEM_REQUIRE_FIXTURE(path);
  for (const char* timing : {"auto", "graph-inline", "eager"}) {
    SCOPED_TRACE(timing);
    Loaded l = load(path, 256, 64);
    ASSERT_TRUE(l.backend);
    StageProfiler profiler(timing);
    runtime::ProfileOptions o;
    o.depth = 40;
    o.rows = {1, 32};
    o.n_samples = 5;
    auto r = runtime::profile_stages(*l.backend, *l.model, o, profiler);
    ASSERT_TRUE(r.ok()) << r.message();
    std::printf("%s: %s\n", timing, r->method.c_str());
    ASSERT_EQ(r->passes.size(), 2u);
    for (const runtime::PassProfile& p : r->passes) check_stages(p);
    EXPECT_EQ(l.backend->n_past(), 40);
  }
}

// gem profile --parallel and --verify: the rows pass of a batched decode step and of a
// verification (8 rows of slot 0), profiled eagerly, marks every stage; afterwards slot 0 is at
// the depth and the other slots are empty.
TEST(CudaProfile, BatchedDecodeStepStages) {
  REQUIRE_GPU();
  const std::string path = test::fixture("tiny-q4_0.gguf");
  GEM_REQUIRE_FIXTURE(path);
  Loaded l = load(path, 256, 64, 4);
  ASSERT_TRUE(l.backend);
  StageProfiler profiler;
  runtime::ProfileOptions o;
  o.depth = 40;
  o.rows = {};
  o.batch = {4};
  o.verify = {8};
  o.n_samples = 3;
  auto r = runtime::profile_stages(*l.backend, *l.model, o, profiler);
  ASSERT_TRUE(r.ok()) << r.message();
  ASSERT_EQ(r->passes.size(), 2u);
  EXPECT_EQ(r->passes[0].shape, runtime::PassShape::kBatch);
  EXPECT_EQ(r->passes[1].shape, runtime::PassShape::kVerify);
  EXPECT_EQ(r->passes[1].rows, 8);
  for (const runtime::PassProfile& p : r->passes) check_stages(p);
  EXPECT_EQ(l.backend->slot_n_past(0), 40);
  for (int s = 1; s < 4; ++s) EXPECT_EQ(l.backend->slot_n_past(s), 0) << s;
}

// The decode step's stages, timed inside a graph of the production launches, against the plain
// graph step timed as gem bench times it.
void check_step_sum(const std::string& path, int depth, int n_samples, double max_gap) {
  Loaded l = load(path, depth + 64, 64);
  ASSERT_TRUE(l.backend);
  StageProfiler profiler;
  runtime::ProfileOptions o;
  o.depth = depth;
  o.rows = {1};
  o.n_samples = n_samples;
  auto r = runtime::profile_stages(*l.backend, *l.model, o, profiler);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r->method.rfind("cuda graph-side", 0), 0u) << r->method;
  const runtime::PassProfile& p = r->passes.at(0);
  check_stages(p);
  std::printf(
      "%s at depth %d: stages %.1f µs, plain graph step %.1f µs (%+.1f %%), profiled eval "
      "%.1f µs\n",
      path.c_str(), depth, p.forward_mean_s * 1e6, p.plain_mean_s * 1e6, 100.0 * gap(p),
      p.profiled_eval_mean_s * 1e6);
  EXPECT_LT(std::fabs(gap(p)), max_gap);
}

TEST(CudaProfile, DecodeStagesSumToTheGraphStep) {
  REQUIRE_GPU();
  const std::string path = test::fixture("tiny-q4_0.gguf");
  GEM_REQUIRE_FIXTURE(path);
  // The tiny model's step is a few hundred µs of launch-bound kernels, where each event record
  // node weighs: 15 % (the H200 measured +10.1 %). The real models' steps are within 5 % (the
  // issue's bound; 12B +3.0 %, 31B +1.3 % at depth 0, bench/RESULTS.md).
  check_step_sum(path, 100, 50, 0.15);
}

TEST(CudaProfile, Synthetic12BStagesSumToTheGraphStep) {
  REQUIRE_GPU();
  const char* path = std::getenv("GEM_CUDA_SYNTH_12B");
  if (!path) GTEST_SKIP() << "GEM_CUDA_SYNTH_12B is not set (path of a gem synth file)";
  check_step_sum(path, 4096, 20, 0.05);
}

// Profiling changes no result: a profiled decode step gives the production graph's logits bit
// for bit, and the production graph gives them again afterwards.
TEST(CudaProfile, ProfilingChangesNothing) {
  REQUIRE_GPU();
  const std::string path = test::fixture("tiny-q4_0.gguf");
  GEM_REQUIRE_FIXTURE(path);
  for (const char* timing : {"auto", "graph-inline", "eager"}) {
    SCOPED_TRACE(timing);
    Loaded l = load(path, 256, 64);
    ASSERT_TRUE(l.backend);
    Backend& b = *l.backend;
    const std::vector<int32_t> fill = runtime::synthetic_tokens(3, 50, l.model->config.n_vocab);
    ASSERT_TRUE(b.eval(fill, false).ok());
    b.checkpoint();
    const int32_t one[] = {77};
    auto step = [&](StageProfiler* profiler) {
      b.restore();
      EXPECT_TRUE(b.set_stage_profiler(profiler).ok());
      EXPECT_TRUE(b.eval(one, false).ok());
      EXPECT_TRUE(b.set_stage_profiler(nullptr).ok());
      const auto row = b.logits();
      return std::vector<float>(row.begin(), row.end());
    };
    const std::vector<float> before = step(nullptr);
    StageProfiler profiler(timing);
    const std::vector<float> profiled = step(&profiler);
    EXPECT_FALSE(profiler.records().empty());
    const std::vector<float> after = step(nullptr);
    ASSERT_EQ(before.size(), profiled.size());
    for (size_t i = 0; i < before.size(); ++i) {
      ASSERT_EQ(profiled[i], before[i]) << "profiled, logit " << i;
      ASSERT_EQ(after[i], before[i]) << "after profiling, logit " << i;
    }
  }
}

}  // namespace
}  // namespace gem
