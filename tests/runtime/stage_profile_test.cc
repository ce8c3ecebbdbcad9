// The stage profiler (runtime/stage_profile.h) on the CPU backend and the tiny test model: every
// stage is timed for both layer kinds, the times add up to the evals they come from, the bytes of
// the product stages are the model's tensor sizes, the cache is left at the depth it was brought
// to, and turning profiling off leaves the forward untouched.
#include "runtime/stage_profile.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/profile.h"
#include "common/test_util.h"
#include "model/model.h"

namespace gem::runtime {
namespace {

struct Loaded {
  std::unique_ptr<model::Model> model;
  std::unique_ptr<Backend> backend;
};

Loaded make(bool reference, int n_ctx = 256, int n_tile = 64,
            model::KvType kv = model::KvType::kF16, int n_slots = 1) {
  Loaded s;
  const std::string path = test::fixture("tiny-q4_0.gguf");
  EXPECT_TRUE(test::file_exists(path)) << test::missing_fixture_message(path);
  auto m = model::load_model(path);
  EXPECT_TRUE(m.ok()) << m.message();
  if (!m.ok()) return s;
  s.model = std::move(m).value();
  BackendOptions o;
  o.n_ctx = n_ctx;
  o.n_tile = n_tile;
  o.kv_type = kv;
  o.n_slots = n_slots;
  o.n_threads = 2;
  o.reference = reference;
  auto b = cpu::make_cpu_backend(*s.model, o);
  EXPECT_TRUE(b.ok()) << b.message();
  if (b.ok()) s.backend = std::move(b).value();
  return s;
}

// The layer stages the CPU forward reports for each layer kind.
const std::vector<Stage> kLayerStages = {
    Stage::kNorm,    Stage::kQkv,       Stage::kRope, Stage::kKvWrite, Stage::kAttention,
    Stage::kAttnOut, Stage::kFfnGateUp, Stage::kGelu, Stage::kFfnDown, Stage::kEpilogue};

const StageRow* find_row(const PassProfile& p, Stage stage, StageScope scope) {
  for (const StageRow& r : p.stages) {
    if (r.stage == stage && r.scope == scope) return &r;
  }
  return nullptr;
}

void check_pass(const PassProfile& p, const model::Model& m, const std::string& what) {
  SCOPED_TRACE(what + ", rows " + std::to_string(p.rows));
  int n_sliding = 0, n_full = 0;
  for (const model::LayerPlan& lp : m.plan)
    (lp.kind == model::AttnKind::kSliding ? n_sliding : n_full)++;
  ASSERT_GT(n_sliding, 0);
  ASSERT_GT(n_full, 0);
  for (StageScope scope : {StageScope::kSliding, StageScope::kFull}) {
    for (Stage st : kLayerStages) {
      const StageRow* r = find_row(p, st, scope);
      ASSERT_NE(r, nullptr) << stage_name(st) << " missing for " << scope_name(scope);
      EXPECT_EQ(r->n_layers, scope == StageScope::kSliding ? n_sliding : n_full);
    }
  }
  EXPECT_NE(find_row(p, Stage::kEmbed, StageScope::kGlobal), nullptr);
  EXPECT_NE(find_row(p, Stage::kHead, StageScope::kGlobal), nullptr);
  // Sampling is timed for decode steps: one sequence's, and every row of a batched step or of a
  // verification.
  EXPECT_EQ(find_row(p, Stage::kSample, StageScope::kGlobal) != nullptr,
            p.rows == 1 || p.shape != PassShape::kTile);
  double sum = 0.0;
  for (const StageRow& r : p.stages) {
    EXPECT_GE(r.min_s, 0.0) << stage_name(r.stage);
    EXPECT_GE(r.mean_s, r.min_s) << stage_name(r.stage);
    EXPECT_TRUE(std::isfinite(r.mean_s));
    if (r.stage != Stage::kSample) sum += r.mean_s;
  }
  EXPECT_NEAR(sum, p.forward_mean_s, 1e-9);
  // The stages are disjoint intervals inside the evals they were timed in, and cover nearly all
  // of them (what is left is eval's argument checks and the tile loop).
  EXPECT_GT(p.forward_min_s, 0.0);
  EXPECT_LE(p.forward_min_s, p.forward_mean_s * (1 + 1e-9));
  EXPECT_LE(p.forward_mean_s, p.profiled_eval_mean_s * 1.0001 + 1e-7);
  EXPECT_GE(p.forward_mean_s, 0.5 * p.profiled_eval_mean_s);
  // Against the plain evals a sane bound only, on the fastest samples of each (this machine may
  // be shared: a stall in a few samples moved a mean past 4x under CI's parallel tests).
  EXPECT_GT(p.plain_mean_s, 0.0);
  EXPECT_LE(p.plain_min_s, p.plain_mean_s);
  EXPECT_LT(p.forward_min_s, 4.0 * p.plain_min_s);
  EXPECT_GT(p.forward_min_s, 0.25 * p.plain_min_s);
}

TEST(StageProfile, EveryStageOfBothLayerKinds) {
  for (bool reference : {false, true}) {
    Loaded s = make(reference);
    ASSERT_TRUE(s.backend);
    StageProfiler profiler;
    ProfileOptions o;
    o.depth = 20;
    o.rows = {1, 8};
    o.n_samples = 3;
    auto r = profile_stages(*s.backend, *s.model, o, profiler);
    ASSERT_TRUE(r.ok()) << r.message();
    ASSERT_EQ(r->passes.size(), 2u);
    EXPECT_NE(r->method.find("steady clock"), std::string::npos) << r->method;
    for (const PassProfile& p : r->passes) {
      EXPECT_EQ(p.depth, 20);
      EXPECT_EQ(p.n_samples, 3);
      check_pass(p, *s.model, reference ? "reference" : "fast");
    }
    EXPECT_EQ(r->passes[0].rows, 1);
    EXPECT_EQ(r->passes[1].rows, 8);
  }
}

// The weight bytes of the product stages are the model's tensor sizes, summed per layer kind.
TEST(StageProfile, ProductBytesAreTheTensorSizes) {
  Loaded s = make(false);
  ASSERT_TRUE(s.backend);
  const model::Model& m = *s.model;
  std::map<std::pair<Stage, StageScope>, uint64_t> want;
  for (size_t l = 0; l < m.plan.size(); ++l) {
    const model::LayerWeights& w = m.weights.layers[l];
    const StageScope scope =
        m.plan[l].kind == model::AttnKind::kSliding ? StageScope::kSliding : StageScope::kFull;
    want[{Stage::kQkv, scope}] += w.attn_q.n_bytes + w.attn_k.n_bytes + w.attn_v.n_bytes;
    want[{Stage::kAttnOut, scope}] += w.attn_output.n_bytes;
    want[{Stage::kFfnGateUp, scope}] += w.ffn_gate.n_bytes + w.ffn_up.n_bytes;
    want[{Stage::kFfnDown, scope}] += w.ffn_down.n_bytes;
  }
  // The full layers have no attn_v (V is K): the sum above adds 0 for them.
  for (size_t l = 0; l < m.plan.size(); ++l) {
    if (m.plan[l].kind == model::AttnKind::kFull) {
      EXPECT_FALSE(m.weights.layers[l].attn_v.present());
    }
  }
  StageProfiler profiler;
  ProfileOptions o;
  o.depth = 4;
  o.rows = {1, 16};
  o.n_samples = 1;
  auto r = profile_stages(*s.backend, m, o, profiler);
  ASSERT_TRUE(r.ok()) << r.message();
  for (const PassProfile& p : r->passes) {
    for (const auto& [key, bytes] : want) {
      const StageRow* row = find_row(p, key.first, key.second);
      ASSERT_NE(row, nullptr) << stage_name(key.first);
      EXPECT_EQ(row->bytes.weights, bytes)
          << stage_name(key.first) << " " << scope_name(key.second);
      EXPECT_EQ(row->bytes.kv, 0u);
      // Activations scale with the rows.
      EXPECT_GT(row->bytes.activations, 0u);
      EXPECT_EQ(row->bytes.total(), row->bytes.weights + row->bytes.activations);
    }
    // The head reads the whole tied embedding once, whatever the rows.
    const StageRow* head = find_row(p, Stage::kHead, StageScope::kGlobal);
    ASSERT_NE(head, nullptr);
    EXPECT_EQ(head->bytes.weights, m.weights.token_embd.n_bytes + m.weights.output_norm.n_bytes);
  }
  EXPECT_EQ(stage_bytes(m, model::KvType::kF16, Stage::kQkv, StageScope::kSliding, 7, 1000).weights,
            (want[{Stage::kQkv, StageScope::kSliding}]));
}

// Attention's KV bytes: every cached key of a full layer, at most window - 1 of a ring, plus the
// pass's own rows; K and V at the cache's element size.
TEST(StageProfile, AttentionKvBytesFollowTheDepth) {
  Loaded s = make(false);
  ASSERT_TRUE(s.backend);
  const model::Model& m = *s.model;
  for (model::KvType kv : {model::KvType::kF32, model::KvType::kF16, model::KvType::kF16Full}) {
    for (int depth : {0, 5, 100}) {
      for (int rows : {1, 9}) {
        uint64_t sliding = 0, full = 0;
        for (const model::LayerPlan& p : m.plan) {
          const bool ring = p.kind == model::AttnKind::kSliding;
          const uint64_t elem =
              kv == model::KvType::kF32 || (kv == model::KvType::kF16Full && ring) ? 4 : 2;
          const uint64_t keys = (ring ? std::min(depth, p.window - 1) : depth) + rows;
          (ring ? sliding : full) += keys * 2 * p.n_kv_heads * p.head_dim * elem;
        }
        EXPECT_EQ(stage_bytes(m, kv, Stage::kAttention, StageScope::kSliding, rows, depth).kv,
                  sliding);
        EXPECT_EQ(stage_bytes(m, kv, Stage::kAttention, StageScope::kFull, rows, depth).kv, full);
      }
    }
  }
}

// The next token's logits on s equal those of a fresh backend that evaluated only the profile's
// fill (synthetic_tokens(seed, depth)): s's slot 0 holds exactly that cache.
void expect_holds_the_fill(Loaded& s, uint32_t seed, int depth, int32_t token) {
  Loaded fresh = make(false);
  ASSERT_TRUE(fresh.backend);
  ASSERT_TRUE(fresh.backend->eval(synthetic_tokens(seed, depth, s.model->config.n_vocab), false).ok());
  const int32_t next[] = {token};
  ASSERT_TRUE(s.backend->eval(next, false).ok());
  ASSERT_TRUE(fresh.backend->eval(next, false).ok());
  const std::span<const float> a = s.backend->logits(), b = fresh.backend->logits();
  ASSERT_EQ(a.size(), b.size());
  double worst = 0.0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(double(a[i]) - b[i]));
  EXPECT_LT(worst, 1e-4);
}

// After profiling the cache holds exactly the depth it was brought to: n_past() is the depth and
// the next token's logits are those of a backend that only evaluated the same tokens.
TEST(StageProfile, DepthIsRestored) {
  const int depth = 40;
  Loaded s = make(false);
  ASSERT_TRUE(s.backend);
  StageProfiler profiler;
  ProfileOptions o;
  o.depth = depth;
  o.rows = {1, 32};
  o.n_samples = 2;
  o.seed = 7;
  auto r = profile_stages(*s.backend, *s.model, o, profiler);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(s.backend->n_past(), depth);

  expect_holds_the_fill(s, 7, depth, 123);
}

// Off means off: with the profiler removed, evals add nothing to it; a CUDA-only timing is
// refused by the CPU backend.
TEST(StageProfile, OffAndUnsupportedTiming) {
  Loaded s = make(false);
  ASSERT_TRUE(s.backend);
  StageProfiler profiler;
  ASSERT_TRUE(s.backend->set_stage_profiler(&profiler).ok());
  const int32_t one[] = {5};
  ASSERT_TRUE(s.backend->eval(one, false).ok());
  const size_t n = profiler.records().size();
  EXPECT_GT(n, 0u);
  ASSERT_TRUE(s.backend->set_stage_profiler(nullptr).ok());
  ASSERT_TRUE(s.backend->eval(one, false).ok());
  EXPECT_EQ(profiler.records().size(), n);

  StageProfiler eager("eager");
  const Status st = s.backend->set_stage_profiler(&eager);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("eager"), std::string::npos) << st.message();
  ProfileOptions o;
  auto r = profile_stages(*s.backend, *s.model, o, eager);
  EXPECT_FALSE(r.ok());
}

TEST(StageProfile, RejectsShapesTheBackendCannotHold) {
  Loaded s = make(false, /*n_ctx=*/64, /*n_tile=*/16);
  ASSERT_TRUE(s.backend);
  StageProfiler profiler;
  ProfileOptions o;
  o.rows = {32};
  auto r = profile_stages(*s.backend, *s.model, o, profiler);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("tile of 16"), std::string::npos) << r.message();
  o.rows = {1};
  o.depth = 64;
  r = profile_stages(*s.backend, *s.model, o, profiler);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("context of 64"), std::string::npos) << r.message();
  o.depth = 0;
  o.n_samples = 0;
  EXPECT_FALSE(profile_stages(*s.backend, *s.model, o, profiler).ok());
}

// Batched decode steps (gem profile --parallel): every stage of both layer kinds, the weights
// read once per step (the decode step's bytes), each sequence's own keys and logits; afterwards
// slot 0 holds the depth exactly and the other slots are empty.
// A decode step, then `batch` batched steps and `verify` verifications, two samples each, from
// `depth` filled with synthetic_tokens(seed).
Result<ProfileReport> profile_shapes(Loaded& s, StageProfiler& profiler, int depth, uint32_t seed,
                                     std::vector<int> batch, std::vector<int> verify) {
  ProfileOptions o;
  o.depth = depth;
  o.rows = {1};
  o.batch = std::move(batch);
  o.verify = std::move(verify);
  o.n_samples = 2;
  o.seed = seed;
  return profile_stages(*s.backend, *s.model, o, profiler);
}

// Every product of a pass reads its weights once: the decode step's bytes.
void expect_weights_once(const PassProfile& p, const PassProfile& decode) {
  for (StageScope scope : {StageScope::kSliding, StageScope::kFull}) {
    for (Stage st : {Stage::kQkv, Stage::kAttnOut, Stage::kFfnGateUp, Stage::kFfnDown}) {
      EXPECT_EQ(find_row(p, st, scope)->bytes.weights, find_row(decode, st, scope)->bytes.weights)
          << stage_name(st);
    }
  }
  EXPECT_EQ(find_row(p, Stage::kHead, StageScope::kGlobal)->bytes.weights,
            find_row(decode, Stage::kHead, StageScope::kGlobal)->bytes.weights);
}

TEST(StageProfile, BatchedDecodeSteps) {
  const int depth = 30;
  Loaded s = make(false, 256, 64, model::KvType::kF16, /*n_slots=*/4);
  ASSERT_TRUE(s.backend);
  const model::Model& m = *s.model;
  StageProfiler profiler;
  auto r = profile_shapes(s, profiler, depth, 9, {1, 3}, {});
  ASSERT_TRUE(r.ok()) << r.message();
  ASSERT_EQ(r->passes.size(), 3u);
  const PassProfile& decode = r->passes[0];
  EXPECT_EQ(decode.shape, PassShape::kTile);
  for (size_t i = 1; i < 3; ++i) {
    const PassProfile& p = r->passes[i];
    EXPECT_EQ(p.shape, PassShape::kBatch);
    EXPECT_EQ(p.rows, i == 1 ? 1 : 3);
    check_pass(p, m, "batch");
    expect_weights_once(p, decode);
    for (StageScope scope : {StageScope::kSliding, StageScope::kFull}) {
      EXPECT_EQ(find_row(p, Stage::kAttention, scope)->bytes.kv,
                static_cast<uint64_t>(p.rows) * find_row(decode, Stage::kAttention, scope)->bytes.kv);
    }
  }
  EXPECT_EQ(s.backend->slot_n_past(0), depth);
  for (int slot = 1; slot < 4; ++slot) EXPECT_EQ(s.backend->slot_n_past(slot), 0) << slot;

  expect_holds_the_fill(s, 9, depth, 77);

  auto bad = profile_shapes(s, profiler, depth, 9, {5}, {});  // more sequences than slots
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("needs 5 slots, the backend has 4"), std::string::npos)
      << bad.message();
}

// Verifications (gem profile --verify): N rows of slot 0 at consecutive positions, every row's
// logits and draw; the weights read once a pass (the decode step's bytes), one sequence's keys
// (the cached ones and the pass's, as a tile of N rows); afterwards slot 0 holds the depth
// exactly, also when the rows ran past the sliding window's ring. A verification past the
// context is refused.
TEST(StageProfile, VerificationPasses) {
  for (const int depth : {30, 120}) {
    SCOPED_TRACE("depth " + std::to_string(depth));
    Loaded s = make(false, 256, 64);
    ASSERT_TRUE(s.backend);
    const model::Model& m = *s.model;
    StageProfiler profiler;
    auto r = profile_shapes(s, profiler, depth, 11, {}, {8, 3});
    ASSERT_TRUE(r.ok()) << r.message();
    ASSERT_EQ(r->passes.size(), 3u);
    const PassProfile& decode = r->passes[0];
    for (size_t i = 1; i < 3; ++i) {
      const PassProfile& p = r->passes[i];
      EXPECT_EQ(p.shape, PassShape::kVerify);
      EXPECT_EQ(p.rows, i == 1 ? 8 : 3);
      EXPECT_EQ(p.depth, depth);
      check_pass(p, m, "verify");
      expect_weights_once(p, decode);
      for (StageScope scope : {StageScope::kSliding, StageScope::kFull}) {
        EXPECT_EQ(find_row(p, Stage::kAttention, scope)->bytes.kv,
                  stage_bytes(m, model::KvType::kF16, Stage::kAttention, scope, p.rows, depth).kv);
      }
      // Every row's logits: the head's activations are those of a batch of as many rows.
      EXPECT_EQ(find_row(p, Stage::kHead, StageScope::kGlobal)->bytes.activations,
                stage_bytes(m, model::KvType::kF16, Stage::kHead, StageScope::kGlobal, p.rows, depth,
                            PassShape::kBatch)
                    .activations);
      EXPECT_GT(find_row(p, Stage::kHead, StageScope::kGlobal)->bytes.activations,
                find_row(decode, Stage::kHead, StageScope::kGlobal)->bytes.activations);
    }
    EXPECT_EQ(s.backend->slot_n_past(0), depth);
    expect_holds_the_fill(s, 11, depth, 55);

    auto bad = profile_shapes(s, profiler, depth, 11, {}, {256 - depth + 1});
    ASSERT_FALSE(bad.ok());
    EXPECT_NE(bad.message().find("verification of"), std::string::npos) << bad.message();
  }
}

TEST(StageProfile, AttentionSweep) {
  Loaded s = make(false);
  ASSERT_TRUE(s.backend);
  StageProfiler profiler;
  const std::vector<int> depths = {100, 0, 30};
  auto r = profile_attention(*s.backend, *s.model, depths, 2, 42, profiler);
  ASSERT_TRUE(r.ok()) << r.message();
  ASSERT_EQ(r->size(), 3u);
  EXPECT_EQ((*r)[0].depth, 0);
  EXPECT_EQ((*r)[1].depth, 30);
  EXPECT_EQ((*r)[2].depth, 100);
  EXPECT_EQ(s.backend->n_past(), 100);
  for (const AttentionPoint& p : *r) {
    EXPECT_EQ(p.sliding.stage, Stage::kAttention);
    EXPECT_EQ(p.full.stage, Stage::kAttention);
    EXPECT_GT(p.sliding.n_layers, 0);
    EXPECT_GT(p.full.n_layers, 0);
    EXPECT_GE(p.sliding.min_s, 0.0);
    EXPECT_GE(p.full.min_s, 0.0);
    EXPECT_LT(p.sliding.mean_s + p.full.mean_s, p.forward_mean_s);
    EXPECT_EQ(p.full.bytes.kv, stage_bytes(*s.model, model::KvType::kF16, Stage::kAttention,
                                           StageScope::kFull, 1, p.depth)
                                   .kv);
  }
  // A full layer reads every cached key; a ring at most its window.
  EXPECT_GT((*r)[2].full.bytes.kv, (*r)[1].full.bytes.kv);
  EXPECT_EQ((*r)[2].sliding.bytes.kv, (*r)[1].sliding.bytes.kv);
}

}  // namespace
}  // namespace gem::runtime
