// The CUDA backend end to end against the CPU backend: every fixture model, prompt logits of
// every row (one prompt tile and token by token), greedy decoding with the CPU choosing the
// path, checkpoint/restore, cancellation; and, when GEM_CUDA_SYNTH_12B / GEM_CUDA_SYNTH_31B name
// synthetic files (gem synth), their first 16 greedy tokens and first-position top-20.
// Skips, saying so, on a machine without a CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/cuda_backend.h"
#include "common/test_util.h"
#include "model/model.h"
#include "runtime/engine.h"
#include "sampler/sampler.h"
#include "cuda/cuda_test_util.h"

namespace gem {
namespace {

std::vector<int32_t> prompt_tokens(const std::string& name) {
  const auto j = nlohmann::json::parse(test::read_text(test::fixture("manifest.json")));
  for (const auto& p : j["prompts"]) {
    if (p["name"] == name) return p["tokens"].get<std::vector<int32_t>>();
  }
  ADD_FAILURE() << "no prompt " << name << " in manifest.json";
  return {};
}

struct Pair {
  std::unique_ptr<model::Model> model;
  std::unique_ptr<Backend> cpu;
  std::unique_ptr<Backend> gpu;
};

// The CPU side is the scalar reference (exact f32 arithmetic) unless `fast`: then the error
// budget is the CUDA path's own (f16 prompt products, 8-bit decode activations).
Pair make_pair(const std::string& path, model::KvType kv, int n_ctx, int n_tile, bool fast = false,
               const cuda::CudaTuning& tuning = cuda::kDefaultTuning) {
  Pair p;
  auto m = model::load_model(path);
  EXPECT_TRUE(m.ok()) << m.message();
  if (!m.ok()) return p;
  p.model = std::move(m).value();
  BackendOptions o;
  o.n_ctx = n_ctx;
  o.kv_type = kv;
  o.n_tile = n_tile;
  BackendOptions oc = o;
  oc.reference = !fast;
  auto c = cpu::make_cpu_backend(*p.model, oc);
  EXPECT_TRUE(c.ok()) << c.message();
  auto g = make_cuda_backend(*p.model, o, tuning);
  EXPECT_TRUE(g.ok()) << g.message();
  if (c.ok()) p.cpu = std::move(c).value();
  if (g.ok()) p.gpu = std::move(g).value();
  return p;
}

// Options of a backend of n_slots sequence slots of n_ctx positions each, KV f16.
BackendOptions slot_options(int n_ctx, int n_slots) {
  BackendOptions o;
  o.n_ctx = n_ctx;
  o.kv_type = model::KvType::kF16;
  o.n_slots = n_slots;
  return o;
}

double rel_l2(std::span<const float> a, std::span<const float> b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    den += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(num / den);
}

int argmax(std::span<const float> v) {
  return static_cast<int>(std::max_element(v.begin(), v.end()) - v.begin());
}

std::vector<int> top_k(std::span<const float> v, int k) {
  std::vector<int> idx(v.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                    [&](int a, int b) { return v[a] > v[b] || (v[a] == v[b] && a < b); });
  idx.resize(k);
  return idx;
}

// The decode path (8-bit activations: matvec, the rows pass) against the exact reference. Over the
// fixtures' positions its error averages 0.017 (34 positions of TokenByTokenEqualsOneTile), and
// the worst position (24 of the "mid" prompt) sits at 0.027–0.031 depending on the last bits of
// the per-block arithmetic: two equally exact forms of the block term (block_terms.cuh, run 66)
// gave 0.0274 and 0.0308 there with the same means. Two approximate paths (decode against the
// f16 n-token or prompt products, within 0.03 of the reference) are compared within the sum of
// their bounds.
constexpr double kDecodeRel = 0.035;
constexpr double kBetweenPaths = kDecodeRel + 0.03;

// Logits rows agree within the type tolerance: relative L2 (the fixtures measure 0.014–0.021
// between llama.cpp's 8-bit-activation path and exact f32 on the same weights; the CUDA prompt
// path rounds activations and weights to f16, the decode path to 8 bits), and the GPU's top
// token is within `margin` of the CPU's best logit (a near-tie may flip).
void expect_rows_close(std::span<const float> gpu, std::span<const float> cpu, const std::string& what,
                       double max_rel = 0.03, double margin = 0.15) {
  ASSERT_EQ(gpu.size(), cpu.size()) << what;
  for (float x : gpu) ASSERT_TRUE(std::isfinite(x)) << what;
  EXPECT_LE(rel_l2(gpu, cpu), max_rel) << what;
  const int g = argmax(gpu), c = argmax(cpu);
  EXPECT_GE(cpu[g], cpu[c] - margin) << what << ": gpu top " << g << " cpu top " << c;
}

const char* kModels[] = {"tiny-q4_0.gguf", "tiny6-f32.gguf", "tiny256-q6_k.gguf"};

// Two logits rows are the same floats, bit for bit.
void expect_bitwise(std::span<const float> a, std::span<const float> b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  size_t first = a.size();
  for (size_t i = 0; i < a.size() && first == a.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) first = i;
  }
  EXPECT_EQ(first, a.size()) << what << ": first difference at " << first << " ("
                             << (first < a.size() ? a[first] : 0.0f) << " vs "
                             << (first < a.size() ? b[first] : 0.0f) << ")";
}


TEST(CudaBackend, PromptLogitsMatchCpuOnEveryFixture) {
  REQUIRE_GPU();
  for (const char* file : kModels) {
    for (model::KvType kv : {model::KvType::kF32, model::KvType::kF16, model::KvType::kF16Full}) {
      const std::string path = test::fixture(file);
      GEM_REQUIRE_FIXTURE(path);
      Pair p = make_pair(path, kv, 512, 48);  // tiles of 48: the 110-token prompt spans 3
      ASSERT_TRUE(p.cpu && p.gpu);
      const auto tokens = prompt_tokens("long");
      ASSERT_TRUE(p.cpu->eval(tokens, true).ok());
      ASSERT_TRUE(p.gpu->eval(tokens, true).ok());
      EXPECT_EQ(p.gpu->n_past(), static_cast<int>(tokens.size()));
      for (int r = 0; r < static_cast<int>(tokens.size()); ++r) {
        expect_rows_close(p.gpu->logits(r), p.cpu->logits(r),
                          std::string(file) + " kv " + std::string(model::kv_type_name(kv)) +
                              " row " + std::to_string(r));
      }
    }
  }
}

// Greedy decoding, one token per eval (the CUDA graph path), with the CPU choosing the tokens so
// both see the same context; every step's logits must agree.
TEST(CudaBackend, GreedyDecodeMatchesCpu) {
  REQUIRE_GPU();
  for (const char* file : kModels) {
    const std::string path = test::fixture(file);
    GEM_REQUIRE_FIXTURE(path);
    Pair p = make_pair(path, model::KvType::kF32, 256, 64);
    ASSERT_TRUE(p.cpu && p.gpu);
    const auto tokens = prompt_tokens("chat");
    ASSERT_TRUE(p.cpu->eval(tokens, false).ok());
    ASSERT_TRUE(p.gpu->eval(tokens, false).ok());
    SamplingParams greedy;
    greedy.temperature = 0.0f;
    std::vector<int32_t> history = tokens;
    for (int step = 0; step < 40; ++step) {
      const auto c = p.cpu->logits();
      const auto g = p.gpu->logits();
      expect_rows_close(g, c, std::string(file) + " step " + std::to_string(step), kDecodeRel);
      // The device pick equals the host pick on the device's own logits.
      const auto dev = p.gpu->sample(greedy, history, 0.5);
      ASSERT_TRUE(dev.has_value());
      EXPECT_EQ(*dev, sample_token(g, greedy, history, 0.5));
      // So does the device's top-k chain (default parameters plus penalties and min-p); top-k
      // off is left to the host.
      SamplingParams chain;
      chain.temperature = 0.8f;
      chain.min_p = 0.02f;
      chain.repeat_penalty = 1.1f;
      const double coin = (step * 0.6180339887) - std::floor(step * 0.6180339887);
      const auto drawn = p.gpu->sample(chain, history, coin);
      ASSERT_TRUE(drawn.has_value());
      EXPECT_EQ(*drawn, sample_token(g, chain, history, coin)) << "step " << step;
      SamplingParams no_top_k = chain;
      no_top_k.top_k = 0;
      EXPECT_FALSE(p.gpu->sample(no_top_k, history, coin).has_value());
      const int32_t next = argmax(c);
      history.push_back(next);
      const int32_t one[] = {next};
      ASSERT_TRUE(p.cpu->eval(one, false).ok());
      ASSERT_TRUE(p.gpu->eval(one, false).ok());
    }
  }
}

TEST(CudaBackend, TokenByTokenEqualsOneTile) {
  REQUIRE_GPU();
  const std::string path = test::fixture("tiny-q4_0.gguf");
  GEM_REQUIRE_FIXTURE(path);
  Pair a = make_pair(path, model::KvType::kF16, 256, 256);
  ASSERT_TRUE(a.gpu);
  const auto tokens = prompt_tokens("mid");
  ASSERT_TRUE(a.gpu->eval(tokens, true).ok());
  std::vector<std::vector<float>> rows;
  for (size_t r = 0; r < tokens.size(); ++r) {
    const auto l = a.gpu->logits(static_cast<int>(r));
    rows.emplace_back(l.begin(), l.end());
  }
  a.gpu->reset();
  EXPECT_EQ(a.gpu->n_past(), 0);
  // The prompt (under 64 tokens) is one short eval: n-token products on f16 activations, where
  // decoding rounds them to 8 bits. Each path is within its bound of the exact CPU reference (checked
  // here and in ShortEvalsMatchDecodeAndCpu), so the two are within kBetweenPaths of each other.
  ASSERT_TRUE(a.cpu->eval(tokens, true).ok());
  for (size_t r = 0; r < tokens.size(); ++r) {
    const int32_t one[] = {tokens[r]};
    ASSERT_TRUE(a.gpu->eval(one, false).ok());
    const std::string at = "position " + std::to_string(r);
    expect_rows_close(a.gpu->logits(), a.cpu->logits(static_cast<int>(r)), at + ": decode vs cpu",
                      kDecodeRel);
    expect_rows_close(rows[r], a.cpu->logits(static_cast<int>(r)), at + ": one eval vs cpu");
    expect_rows_close(a.gpu->logits(), rows[r], at + ": decode vs one eval", kBetweenPaths);
  }
}

// Short evals (2..64 tokens) after a cached prefix: every row within the type tolerance of the CPU
// reference and of token-by-token decoding on the GPU, on Q4_0 (tensor-core and dp4a products),
// F32 and the Q6_K head. Up to 8 tokens an eval is a rows pass, so each row equals its decode
// step bit for bit; longer ones take the n-token products (matmul_n, the head of every row at
// once).
TEST(CudaBackend, ShortEvalsMatchDecodeAndCpu) {
  REQUIRE_GPU();
  for (const char* name : kModels) {
    const std::string path = test::fixture(name);
    GEM_REQUIRE_FIXTURE(path);
    Pair p = make_pair(path, model::KvType::kF16, 256, 128);
    ASSERT_TRUE(p.gpu && p.cpu);
    const auto tokens = prompt_tokens("long");
    const int prefix = 40;
    ASSERT_GE(tokens.size(), static_cast<size_t>(prefix + 64));
    const std::vector<int32_t> all(tokens.begin(), tokens.begin() + prefix + 64);
    ASSERT_TRUE(p.cpu->eval(all, true).ok());
    std::vector<std::vector<float>> want, decoded;
    for (int r = 0; r < prefix + 64; ++r) {
      want.emplace_back(p.cpu->logits(r).begin(), p.cpu->logits(r).end());
    }
    ASSERT_TRUE(p.gpu->eval(std::span(all).first(prefix), false).ok());
    p.gpu->checkpoint();
    for (int r = prefix; r < prefix + 64; ++r) {
      ASSERT_TRUE(p.gpu->eval(std::span(all).subspan(r, 1), false).ok());
      decoded.emplace_back(p.gpu->logits().begin(), p.gpu->logits().end());
    }
    for (int n : {2, 3, 4, 5, 8, 13, 16, 32, 64}) {
      p.gpu->restore();
      ASSERT_TRUE(p.gpu->eval(std::span(all).subspan(prefix, n), true).ok());
      for (int r = 0; r < n; ++r) {
        const std::string what = std::string(name) + " n " + std::to_string(n) + " row " + std::to_string(r);
        expect_rows_close(p.gpu->logits(r), want[prefix + r], what + " vs cpu", kDecodeRel);
        expect_rows_close(p.gpu->logits(r), decoded[r], what + " vs decode", kBetweenPaths);
        if (n <= 8) expect_bitwise(p.gpu->logits(r), decoded[r], what + " vs decode (rows pass)");
      }
      EXPECT_EQ(p.gpu->n_past(), prefix + n);
    }
  }
}

// The 110-token prompt decoded token by token on a backend made with the given tuning matches
// the one-tile prompt at every position, twice (the captured graphs are reused after reset()).
void decode_matches_one_tile(const cuda::CudaTuning& tuning) {
  const std::string path = test::fixture("tiny-q4_0.gguf");
  GEM_REQUIRE_FIXTURE(path);
  Pair a = make_pair(path, model::KvType::kF16, 256, 256, false, tuning);
  ASSERT_TRUE(a.gpu);
  const auto tokens = prompt_tokens("long");
  ASSERT_GT(tokens.size(), 64u);
  ASSERT_TRUE(a.gpu->eval(tokens, true).ok());
  std::vector<std::vector<float>> rows;
  for (size_t r = 0; r < tokens.size(); ++r) {
    const auto l = a.gpu->logits(static_cast<int>(r));
    rows.emplace_back(l.begin(), l.end());
  }
  for (int pass = 0; pass < 2; ++pass) {
    a.gpu->reset();
    for (size_t r = 0; r < tokens.size(); ++r) {
      const int32_t one[] = {tokens[r]};
      ASSERT_TRUE(a.gpu->eval(one, false).ok());
      expect_rows_close(a.gpu->logits(), rows[r],
                        "pass " + std::to_string(pass) + " position " + std::to_string(r));
    }
  }
}

// Decode graphs per bucket of positions (on by default; first bucket 32 keys here instead of
// 1024): the prompt crosses buckets of 32, 64 and 128 keys, each with its own split count on the
// full-attention layers.
TEST(CudaBackend, DecodeBucketsMatchOneTile) {
  REQUIRE_GPU();
  cuda::CudaTuning t;
  t.decode_bucket_min = 32;
  decode_matches_one_tile(t);
}

// The residual epilogues as clusters of 2 blocks (the tiny model's 64-wide rows cannot take the
// default 8): every norm of the step, captured in the decode graphs under PDL.
TEST(CudaBackend, ClusteredResidualDecodeMatchesOneTile) {
  REQUIRE_GPU();
  cuda::CudaTuning t;
  t.res_cluster = 2;
  decode_matches_one_tile(t);
}

TEST(CudaBackend, CheckpointRestoreIsExact) {
  REQUIRE_GPU();
  const std::string path = test::fixture("tiny-q4_0.gguf");
  GEM_REQUIRE_FIXTURE(path);
  Pair p = make_pair(path, model::KvType::kF32, 512, 16);
  ASSERT_TRUE(p.gpu);
  const auto prompt = prompt_tokens("long");
  ASSERT_TRUE(p.gpu->eval(std::span(prompt).first(60), false).ok());
  p.gpu->checkpoint();
  // 40 more tokens wrap the 16-slot rings several times.
  const auto more = std::span(prompt).subspan(60, 40);
  ASSERT_TRUE(p.gpu->eval(more, true).ok());
  const auto first = p.gpu->logits(39);
  const std::vector<float> want(first.begin(), first.end());
  p.gpu->restore();
  EXPECT_EQ(p.gpu->n_past(), 60);
  ASSERT_TRUE(p.gpu->eval(more, true).ok());
  const auto again = p.gpu->logits(39);
  for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(again[i], want[i]) << i;
  // A different continuation after restore equals a fresh evaluation of the same tokens.
  p.gpu->restore();
  const int32_t other[] = {prompt[5], prompt[6], prompt[7]};
  ASSERT_TRUE(p.gpu->eval(other, false).ok());
  const auto l1 = p.gpu->logits();
  const std::vector<float> got(l1.begin(), l1.end());
  p.gpu->reset();
  ASSERT_TRUE(p.gpu->eval(std::span(prompt).first(60), false).ok());
  ASSERT_TRUE(p.gpu->eval(other, false).ok());
  expect_rows_close(p.gpu->logits(), got, "fresh vs restored", 1e-5, 0.0);
}

// Truncating a rejected draft tail leaves no trace: two backends that verified the same right
// tokens followed by different wrong ones continue bit-identically after truncation, past the
// ring (the spare slots keep the keys the window needs), through batched verification and
// single-token decode alike.
TEST(CudaBackend, TruncateLeavesNoTrace) {
  REQUIRE_GPU();
  const std::string path = test::fixture("tiny-q4_0.gguf");
  GEM_REQUIRE_FIXTURE(path);
  Pair a = make_pair(path, model::KvType::kF16, 512, 16);
  Pair b = make_pair(path, model::KvType::kF16, 512, 16);
  ASSERT_TRUE(a.gpu && b.gpu);
  const auto prompt = prompt_tokens("long");
  for (Pair* p : {&a, &b}) ASSERT_TRUE(p->gpu->eval(std::span(prompt).first(50), false).ok());
  int n_past = 50;
  for (int accept : {3, 0, 7, 2}) {
    std::vector<float> rows[2];
    int k = 0;
    for (Pair* p : {&a, &b}) {
      std::vector<BatchRow> batch;
      for (int i = 0; i < 8; ++i) {
        const int32_t tok = i < accept ? prompt[n_past + i] : (prompt[n_past + i] + 11 + 7 * k + i) % 4096;
        batch.push_back({0, n_past + i, tok, i + 1 == accept});
      }
      ASSERT_TRUE(p->gpu->eval_batch(batch).ok());
      if (accept > 0) rows[k].assign(p->gpu->batch_logits(0).begin(), p->gpu->batch_logits(0).end());
      ASSERT_TRUE(p->gpu->slot_truncate(0, n_past + accept).ok());
      EXPECT_EQ(p->gpu->n_past(), n_past + accept);
      ++k;
    }
    EXPECT_EQ(rows[0], rows[1]) << "accepted rows, accept " << accept;
    n_past += accept;
    // The bonus token, one decode step.
    std::vector<float> next[2];
    k = 0;
    for (Pair* p : {&a, &b}) {
      ASSERT_TRUE(p->gpu->eval(std::span(prompt).subspan(n_past, 1), false).ok());
      next[k].assign(p->gpu->logits().begin(), p->gpu->logits().end());
      ++k;
    }
    ASSERT_EQ(next[0], next[1]) << "after accepting " << accept;
    ++n_past;
  }
  EXPECT_FALSE(a.gpu->slot_truncate(0, n_past - model::kRingSpare - 1).ok());
  EXPECT_EQ(a.gpu->n_past(), n_past);
  EXPECT_FALSE(a.gpu->slot_truncate(0, n_past + 1).ok());
  EXPECT_FALSE(a.gpu->slot_truncate(1, 0).ok());
}

// Sequence slots on the GPU: four sequences at depths 10..70 with their prompts interleaved in
// batches (runs of several slots per tile), then decode-shaped batches (one row per slot) and a
// verify-shaped one (runs of two slots): every row within the type tolerance of the CPU
// reference doing each sequence alone. A fork and a per-slot checkpoint are exact: a forked slot
// and its source, or a restored slot and a fork taken at its checkpoint, give bit-identical rows
// for the same tokens in one batch.
// sample_batch over a batched step of many slots: each pick equals the host sampler's on that
// row's logits — plain greedy rows (one arg-max over all of them), sampled rows with one top-k
// (one top-k chain over all of them), greedy rows with a penalty window and a sampled row with
// another top-k (a launch each), in one call, and rows the device does not take (top-k off)
// left to the caller.
TEST(CudaBackend, SampleBatchMatchesTheHostSamplerOnEveryRow) {
  REQUIRE_GPU();
  const std::string path = test::fixture("tiny-q4_0.gguf");
  GEM_REQUIRE_FIXTURE(path);
  const int S = 12;
  auto m = model::load_model(path);
  ASSERT_TRUE(m.ok()) << m.message();
  BackendOptions o = slot_options(128, S);
  auto made = make_cuda_backend(**m, o);
  ASSERT_TRUE(made.ok()) << made.message();
  Backend& gpu = **made;
  const auto base = prompt_tokens("long");
  std::vector<std::vector<int32_t>> hist(S);
  std::vector<BatchRow> rows;
  for (int s = 0; s < S; ++s) {
    for (int i = 0; i < 6 + s; ++i) {
      hist[s].push_back(base[(5 * s + i) % base.size()]);
      rows.push_back({s, i, hist[s].back(), false});
    }
  }
  ASSERT_TRUE(gpu.eval_batch(rows).ok());
  for (int step = 0; step < 3; ++step) {
    rows.clear();
    for (int s = S - 1; s >= 0; --s) {  // slots in reverse: batch rows and slots differ
      rows.push_back({s, gpu.slot_n_past(s), base[(3 * s + step) % base.size()], true});
    }
    ASSERT_TRUE(gpu.eval_batch(rows).ok());
    std::vector<SamplingParams> params(S);
    std::vector<Backend::BatchSample> reqs(S);
    for (int i = 0; i < S; ++i) {
      SamplingParams& p = params[i];
      p.temperature = 0.0f;  // rows 0, 3, 4, 8: plain greedy
      if (i % 4 == 1) p.repeat_penalty = 1.3f;  // greedy with a penalty window
      if (i % 4 == 2) {
        p.temperature = 0.9f;  // sampled: top-k chain (rows with one top-k: one chain for all)
        p.min_p = 0.01f;
        if (i == 10) p.top_k = 20;  // another top-k: a chain of its own
      }
      if (i % 4 == 3 && i > 4) {
        p.temperature = 0.7f;
        p.top_k = 0;  // not the device's: left to the caller
      }
      reqs[i].params = &params[i];
      reqs[i].history = hist[rows[i].slot];
      reqs[i].coin = (i * 0.37) - std::floor(i * 0.37);
    }
    const auto picks = gpu.sample_batch(reqs);
    ASSERT_EQ(picks.size(), static_cast<size_t>(S));
    for (int i = 0; i < S; ++i) {
      const std::string what = "step " + std::to_string(step) + " row " + std::to_string(i);
      if (params[i].top_k == 0) {
        EXPECT_FALSE(picks[i].has_value()) << what;
        continue;
      }
      ASSERT_TRUE(picks[i].has_value()) << what;
      EXPECT_EQ(*picks[i], sample_token(gpu.batch_logits(i), params[i], hist[rows[i].slot], reqs[i].coin))
          << what;
    }
    for (int i = 0; i < S; ++i) hist[rows[i].slot].push_back(rows[i].token);
  }
}

// A step of a full rows pass of decode rows (32) and a short prompt run of another slot: the
// decode rows are evaluated last, so their logits stay on the device and sample_batch draws
// every one of them there (a row whose logits went to the host is left to the caller). The
// logits equal those of the same decode rows evaluated without the prompt run.
TEST(CudaBackend, DecodeRowsStayOnTheDeviceBesideAPromptRun) {
  REQUIRE_GPU();
  const std::string path = test::fixture("tiny-q4_0.gguf");
  GEM_REQUIRE_FIXTURE(path);
  const int D = 32, S = D + 1;  // slot D prefills
  auto m = model::load_model(path);
  ASSERT_TRUE(m.ok()) << m.message();
  BackendOptions o = slot_options(64, S);
  std::vector<std::vector<float>> want(D);
  const auto base = prompt_tokens("long");
  for (bool with_prompt : {false, true}) {
    auto made = make_cuda_backend(**m, o);
    ASSERT_TRUE(made.ok()) << made.message();
    Backend& gpu = **made;
    std::vector<BatchRow> rows;
    for (int s = 0; s < D; ++s) {
      for (int i = 0; i < 3; ++i) rows.push_back({s, i, base[(s + 2 * i) % base.size()], false});
    }
    ASSERT_TRUE(gpu.eval_batch(rows).ok());
    rows.clear();
    for (int s = 0; s < D; ++s) rows.push_back({s, 3, base[(5 * s + 1) % base.size()], true});
    if (with_prompt) {
      for (int i = 0; i < 6; ++i) rows.push_back({D, i, base[i], i == 5});
    }
    ASSERT_TRUE(gpu.eval_batch(rows).ok());
    SamplingParams greedy;
    greedy.temperature = 0.0f;
    std::vector<Backend::BatchSample> reqs(D);
    for (auto& r : reqs) r.params = &greedy;
    const auto picks = gpu.sample_batch(reqs);
    for (int s = 0; s < D; ++s) {
      ASSERT_TRUE(picks[s].has_value()) << "decode row " << s << " was not drawn on the device";
      const auto row = gpu.batch_logits(s);
      if (!with_prompt) {
        want[s].assign(row.begin(), row.end());
      } else {
        expect_bitwise(row, want[s], "decode row " + std::to_string(s) + " beside a prompt run");
      }
      EXPECT_EQ(*picks[s], sample_token(row, greedy, {}, 0.0)) << "row " << s;
    }
  }
}

TEST(CudaBackend, SequenceSlotsMatchOneSequenceEach) {
  REQUIRE_GPU();
  const std::string path = test::fixture("tiny-q4_0.gguf");
  GEM_REQUIRE_FIXTURE(path);
  const int S = 4;
  auto m = model::load_model(path);
  ASSERT_TRUE(m.ok()) << m.message();
  BackendOptions o = slot_options(160, S + 2);
  o.n_tile = 96;  // prompt tiles through the cuBLAS path, decode batches through matmul_n
  auto made = make_cuda_backend(**m, o);
  ASSERT_TRUE(made.ok()) << made.message();
  Backend& gpu = **made;
  const auto base = prompt_tokens("long");
  std::vector<std::vector<int32_t>> seq(S);
  std::vector<std::vector<std::vector<float>>> want(S);
  std::vector<int> len(S);
  for (int s = 0; s < S; ++s) {
    len[s] = 10 + 20 * s;
    for (int i = 0; i < len[s] + 12; ++i) seq[s].push_back(base[(7 * s + i) % base.size()]);
    BackendOptions oc = o;
    oc.n_slots = 1;
    oc.reference = true;
    auto cpu = cpu::make_cpu_backend(**m, oc);
    ASSERT_TRUE(cpu.ok()) << cpu.message();
    ASSERT_TRUE((*cpu)->eval(seq[s], true).ok());
    for (size_t r = 0; r < seq[s].size(); ++r) {
      want[s].emplace_back((*cpu)->logits(static_cast<int>(r)).begin(), (*cpu)->logits(static_cast<int>(r)).end());
    }
  }
  std::vector<BatchRow> rows;
  std::vector<int> done(S, 0);
  for (bool more = true; more;) {
    more = false;
    for (int s = 0; s < S; ++s) {
      for (int i = 0; i < 5 && done[s] < len[s]; ++i, ++done[s]) {
        rows.push_back({s, done[s], seq[s][done[s]], done[s] == len[s] - 1});
      }
      more = more || done[s] < len[s];
    }
  }
  ASSERT_TRUE(gpu.eval_batch(rows).ok());
  for (int s = 0; s < S; ++s) {
    EXPECT_EQ(gpu.slot_n_past(s), len[s]);
    expect_rows_close(gpu.batch_logits(s), want[s][len[s] - 1], "prompt end, slot " + std::to_string(s),
                      kDecodeRel);
  }
  for (int step = 0; step < 4; ++step) {
    rows.clear();
    for (int s : {2, 0, 3, 1}) {
      const int p = gpu.slot_n_past(s);
      rows.push_back({s, p, seq[s][p], true});
    }
    ASSERT_TRUE(gpu.eval_batch(rows).ok());
    for (int i = 0; i < S; ++i) {
      expect_rows_close(gpu.batch_logits(i), want[rows[i].slot][rows[i].pos],
                        "step " + std::to_string(step) + " slot " + std::to_string(rows[i].slot), kDecodeRel);
    }
  }
  rows.clear();
  const int p1 = gpu.slot_n_past(1), p3 = gpu.slot_n_past(3);
  for (int i = 0; i < 5; ++i) {
    rows.push_back({1, p1 + i, seq[1][p1 + i], true});
    if (i < 3) rows.push_back({3, p3 + i, seq[3][p3 + i], true});
  }
  ASSERT_TRUE(gpu.eval_batch(rows).ok());
  for (size_t i = 0; i < rows.size(); ++i) {
    expect_rows_close(gpu.batch_logits(static_cast<int>(i)), want[rows[i].slot][rows[i].pos],
                      "verify row " + std::to_string(i), kDecodeRel);
  }

  // Fork slot 3 into slot 4; checkpoint slot 3, wander past the ring, restore.
  ASSERT_TRUE(gpu.slot_fork(3, 4).ok());
  EXPECT_EQ(gpu.slot_n_past(4), gpu.slot_n_past(3));
  gpu.slot_checkpoint(3);
  rows.clear();
  const int p = gpu.slot_n_past(3);
  for (int i = 0; i < 60; ++i) rows.push_back({3, p + i, base[(i * 5) % base.size()], false});
  ASSERT_TRUE(gpu.eval_batch(rows).ok());
  gpu.slot_restore(3);
  EXPECT_EQ(gpu.slot_n_past(3), p);
  for (int i = 0; i < 6; ++i) {
    rows = {{3, p + i, base[i], true}, {4, p + i, base[i], true}};
    ASSERT_TRUE(gpu.eval_batch(rows).ok());
    const auto a = gpu.batch_logits(0), b = gpu.batch_logits(1);
    ASSERT_EQ(a.size(), b.size());
    EXPECT_TRUE(std::equal(a.begin(), a.end(), b.begin())) << "row " << i;
  }
  EXPECT_FALSE(gpu.eval_batch(std::vector<BatchRow>{{S + 2, 0, 1, false}}).ok());
}

// The rows pass: every row of a batch equals, bit for bit, the decode step of its own sequence
// done alone (one token at a time through eval(), the decode graphs): four sequences at
// different depths decoded together in several row orders, crossing decode buckets of 32, 64
// and 128 keys and the sliding window, then a verification of 8 rows of one sequence beside
// single rows of the others, truncated and continued. Greedy decoding over such batches
// therefore picks each sequence's tokens exactly as decoding it alone does.
TEST(CudaBackend, RowsEqualTheirDecodeStepsBitForBit) {
  REQUIRE_GPU();
  cuda::CudaTuning tuning;
  tuning.decode_bucket_min = 32;
  for (const char* name : kModels) {
    const std::string path = test::fixture(name);
    GEM_REQUIRE_FIXTURE(path);
    auto m = model::load_model(path);
    ASSERT_TRUE(m.ok()) << m.message();
    const int S = 4, n_ctx = 200;
    BackendOptions o = slot_options(n_ctx, S);
    o.n_tile = 64;
    auto made = make_cuda_backend(**m, o, tuning);
    ASSERT_TRUE(made.ok()) << made.message();
    Backend& gpu = **made;
    const auto base = prompt_tokens("long");
    std::vector<std::vector<int32_t>> seq(S);
    std::vector<std::vector<std::vector<float>>> alone(S);  // [slot][position] decode logits
    const std::vector<int> prompt_len = {20, 37, 50, 90};
    const int steps = 40;
    for (int s = 0; s < S; ++s) {
      for (int i = 0; i < prompt_len[s] + steps + 8; ++i) seq[s].push_back(base[(5 * s + 3 * i) % base.size()]);
      BackendOptions o1 = o;
      o1.n_slots = 1;
      auto one = make_cuda_backend(**m, o1, tuning);
      ASSERT_TRUE(one.ok()) << one.message();
      ASSERT_TRUE((*one)->eval(std::span(seq[s]).first(prompt_len[s]), false).ok());
      alone[s].resize(seq[s].size());
      alone[s][prompt_len[s] - 1].assign((*one)->logits().begin(), (*one)->logits().end());
      for (size_t p = prompt_len[s]; p < seq[s].size(); ++p) {
        ASSERT_TRUE((*one)->eval(std::span(seq[s]).subspan(p, 1), false).ok());
        alone[s][p].assign((*one)->logits().begin(), (*one)->logits().end());
      }
    }
    // The prompts, each a run of the batch (the tile path on its slot, as eval() runs it).
    std::vector<BatchRow> rows;
    for (int s = 0; s < S; ++s) {
      for (int i = 0; i < prompt_len[s]; ++i) rows.push_back({s, i, seq[s][i], i + 1 == prompt_len[s]});
    }
    ASSERT_TRUE(gpu.eval_batch(rows).ok());
    for (int s = 0; s < S; ++s) {
      expect_bitwise(gpu.batch_logits(s), alone[s][prompt_len[s] - 1],
                     std::string(name) + " prompt of slot " + std::to_string(s));
    }
    const int orders[3][4] = {{0, 1, 2, 3}, {3, 1, 0, 2}, {2, 0, 3, 1}};
    for (int step = 0; step < steps; ++step) {
      rows.clear();
      for (int s : orders[step % 3]) {
        if (step % 7 == 3 && s == 1) continue;  // a sequence sitting a step out
        const int p = gpu.slot_n_past(s);
        rows.push_back({s, p, seq[s][p], true});
      }
      ASSERT_TRUE(gpu.eval_batch(rows).ok());
      for (size_t i = 0; i < rows.size(); ++i) {
        expect_bitwise(gpu.batch_logits(static_cast<int>(i)), alone[rows[i].slot][rows[i].pos],
                       std::string(name) + " step " + std::to_string(step) + " slot " +
                           std::to_string(rows[i].slot) + " position " + std::to_string(rows[i].pos));
      }
    }
    // A verification: 8 rows of slot 2 beside one row each of slots 0 and 3.
    rows.clear();
    const int p2 = gpu.slot_n_past(2);
    rows.push_back({0, gpu.slot_n_past(0), seq[0][gpu.slot_n_past(0)], true});
    for (int i = 0; i < 8; ++i) rows.push_back({2, p2 + i, seq[2][p2 + i], true});
    rows.push_back({3, gpu.slot_n_past(3), seq[3][gpu.slot_n_past(3)], true});
    ASSERT_TRUE(gpu.eval_batch(rows).ok());
    for (size_t i = 0; i < rows.size(); ++i) {
      expect_bitwise(gpu.batch_logits(static_cast<int>(i)), alone[rows[i].slot][rows[i].pos],
                     std::string(name) + " verify row " + std::to_string(i));
    }
    // Reject the last five of slot 2's rows and evaluate them again, one by one.
    ASSERT_TRUE(gpu.slot_truncate(2, p2 + 3).ok());
    for (int i = 3; i < 8; ++i) {
      rows = {{2, p2 + i, seq[2][p2 + i], true}};
      ASSERT_TRUE(gpu.eval_batch(rows).ok());
      expect_bitwise(gpu.batch_logits(0), alone[2][p2 + i],
                     std::string(name) + " after truncation, position " + std::to_string(p2 + i));
    }
  }
}

// A checkpoint whose journal cannot be allocated (forced by the tuning's test hook) loses the
// cache, not correctness: restore() empties it, and an engine over that backend serves every
// request, the second one starting cold with the same tokens as the first.
TEST(CudaBackend, CheckpointAllocationFailureDropsTheCache) {
  REQUIRE_GPU();
  const std::string path = test::fixture("tiny-q4_0.gguf");
  GEM_REQUIRE_FIXTURE(path);
  cuda::CudaTuning t;
  t.fail_checkpoint_alloc = true;
  Pair p = make_pair(path, model::KvType::kF32, 512, 16, false, t);
  ASSERT_TRUE(p.gpu);
  const auto prompt = prompt_tokens("long");
  ASSERT_TRUE(p.gpu->eval(std::span(prompt).first(60), false).ok());
  p.gpu->checkpoint();
  ASSERT_TRUE(p.gpu->eval(std::span(prompt).subspan(60, 40), false).ok());
  p.gpu->restore();
  EXPECT_EQ(p.gpu->n_past(), 0);

  runtime::Engine engine(std::move(p.gpu));
  runtime::GenerateRequest req;
  req.prompt.assign(prompt.begin(), prompt.begin() + 60);
  req.n_history = 50;
  req.max_tokens = 8;
  req.stop_at_eog = false;
  req.sampling.temperature = 0.0f;
  std::vector<int32_t> out[2];
  for (int i = 0; i < 2; ++i) {
    runtime::GenerateCallbacks cb;
    cb.on_token = [&out, i](int32_t tok) {
      out[i].push_back(tok);
      return true;
    };
    auto r = engine.generate(req, cb);
    ASSERT_TRUE(r.ok()) << r.message();
    EXPECT_EQ(r->n_generated, 8);
    EXPECT_EQ(r->n_cached, 0) << "request " << i;
    EXPECT_TRUE(engine.cached_tokens().empty());
    EXPECT_EQ(engine.backend().n_past(), 0);
  }
  EXPECT_EQ(out[0], out[1]);
}

TEST(CudaBackend, CancelStopsAtATileAndErrorsOnOverflow) {
  REQUIRE_GPU();
  const std::string path = test::fixture("tiny-q4_0.gguf");
  GEM_REQUIRE_FIXTURE(path);
  Pair p = make_pair(path, model::KvType::kF32, 128, 16);
  ASSERT_TRUE(p.gpu);
  const auto prompt = prompt_tokens("long");
  const Status s = p.gpu->eval(std::span(prompt).first(100), false,
                               [](int done, int) { return done < 32; });
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message().rfind("cancelled", 0), 0u) << s.message();
  EXPECT_EQ(p.gpu->n_past(), 32);
  EXPECT_FALSE(p.gpu->eval(prompt, false).ok());  // 32 + 110 > 128
  const int32_t bad[] = {-1};
  EXPECT_FALSE(p.gpu->eval(bad, false).ok());
}

// Synthetic 12B / 31B (gem synth), named by environment variables because the files are
// gigabytes: first-position top-20 and the first 16 greedy tokens against the CPU engine.
void check_synth(const char* env, const cuda::CudaTuning& tuning = cuda::kDefaultTuning) {
  const char* path = std::getenv(env);
  if (!path) GTEST_SKIP() << env << " is not set (path of a gem synth file)";
  Pair p = make_pair(path, model::KvType::kF16, 1024, 256, /*fast=*/true, tuning);
  ASSERT_TRUE(p.cpu && p.gpu);
  const std::vector<int32_t> prompt = prompt_tokens("short");  // <bos>The capital of France is
  ASSERT_TRUE(p.cpu->eval(prompt, false).ok());
  ASSERT_TRUE(p.gpu->eval(prompt, false).ok());
  const auto c = p.cpu->logits();
  const auto g = p.gpu->logits();
  expect_rows_close(g, c, std::string(env) + " first position");
  const auto tc = top_k(c, 20), tg = top_k(g, 20);
  int common = 0;
  for (int id : tg) common += std::count(tc.begin(), tc.end(), id) ? 1 : 0;
  EXPECT_GE(common, 17) << "top-20 overlap";
  for (int i = 0; i < 20; ++i) EXPECT_NEAR(g[tc[i]], c[tc[i]], 0.15) << "top-20 entry " << i;
  int same = 0;
  for (int step = 0; step < 16; ++step) {
    const int32_t tcpu = argmax(p.cpu->logits()), tgpu = argmax(p.gpu->logits());
    same += tcpu == tgpu;
    expect_rows_close(p.gpu->logits(), p.cpu->logits(), std::string(env) + " step " + std::to_string(step));
    const int32_t one[] = {tcpu};
    ASSERT_TRUE(p.cpu->eval(one, false).ok());
    ASSERT_TRUE(p.gpu->eval(one, false).ok());
  }
  std::printf("%s: %d of 16 greedy tokens identical\n", env, same);
}

TEST(CudaBackend, Synthetic12B) {
  REQUIRE_GPU();
  check_synth("GEM_CUDA_SYNTH_12B");
}
TEST(CudaBackend, Synthetic31B) {
  REQUIRE_GPU();
  check_synth("GEM_CUDA_SYNTH_31B");
}
// The same with the full layers' split tensor-core decode from the first token on (by default
// only past 4096 keys), reading only K's rotated quarter besides V (the real structure: V is the
// raw K projection, rope_freqs turns 64 of 256 pairs).
cuda::CudaTuning split_form() {
  cuda::CudaTuning t;
  t.attn_form = 2;
  return t;
}
TEST(CudaBackend, Synthetic12BSplitDecode) {
  REQUIRE_GPU();
  check_synth("GEM_CUDA_SYNTH_12B", split_form());
}
TEST(CudaBackend, Synthetic31BSplitDecode) {
  REQUIRE_GPU();
  check_synth("GEM_CUDA_SYNTH_31B", split_form());
}

}  // namespace
}  // namespace gem
