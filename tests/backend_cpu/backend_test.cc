// CPU backend behaviour that needs no reference data: KV allocation equals kv_cache_bytes, tiled
// prompts equal token-by-token decoding across the sliding window, checkpoint/restore gives a
// bitwise-equal continuation, F16 KV stays within llama.cpp's F16-vs-F32 spread, cancellation,
// bad input, and memory (weights stay mapped).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend_cpu/fixture_cases.h"
#include "common/test_util.h"

namespace gem::test {
namespace {

constexpr const char* kTinyQ4 = "tiny-q4_0.gguf";  // window 16, 12 layers (full: 5, 11)
constexpr const char* kTiny6 = "tiny6-f32.gguf";   // window 8, F32 weights

std::unique_ptr<Backend> make(const model::Model& m, int n_tile, bool reference,
                              model::KvType kv = model::KvType::kF32, int n_ctx = 256) {
  BackendOptions opt;
  opt.n_ctx = n_ctx;
  opt.n_tile = n_tile;
  opt.reference = reference;
  opt.kv_type = kv;
  opt.n_threads = 2;
  auto made = cpu::make_cpu_backend(m, opt);
  EXPECT_TRUE(made.ok()) << made.message();
  return made.ok() ? std::move(made).value() : nullptr;
}

// The `long` fixture prompt (110 tokens: more than 6 windows of tiny).
std::vector<int32_t> long_prompt() { return load_case("tiny-q4_0", "long").prompt; }

// Logits of every position, one eval per token.
std::vector<std::vector<float>> token_by_token(Backend& be, const std::vector<int32_t>& tokens) {
  std::vector<std::vector<float>> out;
  for (int32_t t : tokens) {
    EXPECT_TRUE(be.eval({&t, 1}, false).ok());
    auto l = be.logits();
    out.emplace_back(l.begin(), l.end());
  }
  return out;
}

double max_abs_diff(std::span<const float> a, std::span<const float> b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0.0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    worst = std::max(worst, std::fabs(static_cast<double>(a[i]) - b[i]));
  }
  return worst;
}

TEST(CpuBackend, KvAllocationEqualsKvCacheBytes) {
  GEM_REQUIRE_FIXTURE(fixture(kTinyQ4));
  const model::Model* m = fixture_model(kTinyQ4);
  ASSERT_NE(m, nullptr);
  for (model::KvType kv : {model::KvType::kF32, model::KvType::kF16, model::KvType::kF16Full}) {
    for (int n_ctx : {16, 100, 4096}) {
      auto be = make(*m, 32, false, kv, n_ctx);
      ASSERT_NE(be, nullptr);
      EXPECT_EQ(cpu::cpu_backend_memory(*be).kv_bytes, model::kv_cache_bytes(m->plan, n_ctx, kv))
          << model::kv_type_name(kv) << " n_ctx " << n_ctx;
    }
  }
  // The types really differ: f16 halves everything, f16-full only the full layers.
  const uint64_t f32 = model::kv_cache_bytes(m->plan, 4096, model::KvType::kF32);
  EXPECT_EQ(model::kv_cache_bytes(m->plan, 4096, model::KvType::kF16) * 2, f32);
  EXPECT_LT(model::kv_cache_bytes(m->plan, 4096, model::KvType::kF16Full), f32);
  EXPECT_GT(model::kv_cache_bytes(m->plan, 4096, model::KvType::kF16Full),
            model::kv_cache_bytes(m->plan, 4096, model::KvType::kF16));
}

// A prompt in tiles that cross the 16-slot ring in every way equals token-by-token decoding.
void check_tiled(bool reference, double tolerance) {
  GEM_REQUIRE_FIXTURE(fixture(kTinyQ4));
  const model::Model* m = fixture_model(kTinyQ4);
  ASSERT_NE(m, nullptr);
  std::vector<int32_t> prompt = long_prompt();
  prompt.resize(reference ? 40 : 70);  // > 2 windows; the reference is slower
  auto one = make(*m, 1, reference);
  ASSERT_NE(one, nullptr);
  const auto expected = token_by_token(*one, prompt);
  for (int n_tile : {1, 5, 16, 17, 64}) {
    auto be = make(*m, n_tile, reference);
    ASSERT_NE(be, nullptr);
    ASSERT_TRUE(be->eval(prompt, true).ok());
    EXPECT_EQ(be->n_past(), static_cast<int>(prompt.size()));
    double worst = 0.0;
    for (size_t p = 0; p < prompt.size(); ++p) {
      worst = std::max(worst, max_abs_diff(be->logits(static_cast<int>(p)), expected[p]));
    }
    EXPECT_LE(worst, tolerance) << "n_tile " << n_tile;
    std::printf("[tiled] %s n_tile %d: max |d| vs token-by-token %.3g\n",
                reference ? "reference" : "fast", n_tile, worst);
  }
  // Several evals of odd sizes after one another (each a wrap of the ring at another offset).
  auto be = make(*m, 7, reference);
  ASSERT_NE(be, nullptr);
  size_t done = 0;
  double worst = 0.0;
  for (size_t chunk : {3u, 20u, 1u, 9u, 17u, 40u}) {
    const size_t n = std::min(chunk, prompt.size() - done);
    if (n == 0) break;
    ASSERT_TRUE(be->eval({prompt.data() + done, n}, true).ok());
    for (size_t i = 0; i < n; ++i) {
      worst = std::max(worst, max_abs_diff(be->logits(static_cast<int>(i)), expected[done + i]));
    }
    done += n;
  }
  EXPECT_LE(worst, tolerance) << "chunked evals";
}

// Keys are summed in position order whatever the tiling (KvSegment::first_slot) and the matmuls
// treat every token row alike, so tiling changes no bit. The fast path needs this: its 8-bit
// activation rounding turns any float-order difference into ~0.1 logit noise.
TEST(CpuBackend, TiledPromptEqualsTokenByTokenFast) { check_tiled(false, 0.0); }
TEST(CpuBackend, TiledPromptEqualsTokenByTokenReference) { check_tiled(true, 0.0); }

TEST(CpuBackend, CheckpointRestoreIsExact) {
  GEM_REQUIRE_FIXTURE(fixture(kTinyQ4));
  const model::Model* m = fixture_model(kTinyQ4);
  ASSERT_NE(m, nullptr);
  const std::vector<int32_t> prompt = long_prompt();
  for (int n_tile : {4, 64}) {
    auto be = make(*m, n_tile, false);
    ASSERT_NE(be, nullptr);
    ASSERT_TRUE(be->eval({prompt.data(), 20}, false).ok());
    be->checkpoint();
    // Decode past the window (every ring slot overwritten), then a multi-token eval that wraps.
    const std::vector<int32_t> cont(prompt.begin() + 20, prompt.begin() + 60);
    const auto first = token_by_token(*be, {cont.begin(), cont.begin() + 25});
    ASSERT_TRUE(be->eval({cont.data() + 25, 15}, true).ok());
    std::vector<float> first_tail(be->logits(14).begin(), be->logits(14).end());
    be->restore();
    EXPECT_EQ(be->n_past(), 20);
    // Something else in between, then back again: the journal stays valid.
    const std::vector<int32_t> other(prompt.begin() + 70, prompt.begin() + 100);
    token_by_token(*be, other);
    be->restore();
    EXPECT_EQ(be->n_past(), 20);
    const auto second = token_by_token(*be, {cont.begin(), cont.begin() + 25});
    ASSERT_TRUE(be->eval({cont.data() + 25, 15}, true).ok());
    for (size_t i = 0; i < first.size(); ++i) {
      ASSERT_EQ(first[i], second[i]) << "n_tile " << n_tile << " step " << i << " not bitwise equal";
    }
    const std::span<const float> tail = be->logits(14);
    EXPECT_TRUE(std::equal(tail.begin(), tail.end(), first_tail.begin())) << "n_tile " << n_tile;
    // And a fresh backend fed prompt[0..20) + cont agrees (restore left nothing stale).
    auto fresh = make(*m, n_tile, false);
    ASSERT_TRUE(fresh->eval({prompt.data(), 20}, false).ok());
    const auto third = token_by_token(*fresh, {cont.begin(), cont.begin() + 25});
    for (size_t i = 0; i < first.size(); ++i) {
      ASSERT_EQ(first[i], third[i]) << "n_tile " << n_tile << " step " << i << " vs fresh backend";
    }
  }
}

TEST(CpuBackend, ResetStartsOver) {
  GEM_REQUIRE_FIXTURE(fixture(kTinyQ4));
  const model::Model* m = fixture_model(kTinyQ4);
  ASSERT_NE(m, nullptr);
  const std::vector<int32_t> prompt = long_prompt();
  auto be = make(*m, 8, false);
  ASSERT_TRUE(be->eval({prompt.data(), 30}, false).ok());
  const std::vector<float> want(be->logits().begin(), be->logits().end());
  ASSERT_TRUE(be->eval({prompt.data() + 50, 30}, false).ok());
  be->reset();
  EXPECT_EQ(be->n_past(), 0);
  ASSERT_TRUE(be->eval({prompt.data(), 30}, false).ok());
  EXPECT_EQ(max_abs_diff(be->logits(), want), 0.0);
}

// F16 storage against llama.cpp's F32-KV fixtures: its own F16-vs-F32 spread is 5.6e-4 / 0.0076.
TEST(CpuBackend, F16KvWithinFixtureTolerance) {
  GEM_REQUIRE_FIXTURE(fixture(kTiny6));
  const model::Model* m = fixture_model(kTiny6);
  ASSERT_NE(m, nullptr);
  const Tolerance tol{1e-3, 0.02, 0.02, 0.85};
  for (const char* prompt : {"long", "mid"}) {
    const FixtureCase c = load_case("tiny6-f32", prompt);
    for (model::KvType kv : {model::KvType::kF16, model::KvType::kF16Full}) {
      auto be = make(*m, 16, false, kv);
      ASSERT_NE(be, nullptr);
      ASSERT_TRUE(be->eval(c.prompt, true).ok());
      ErrorStats stats;
      const std::string what = std::string(prompt) + " kv " + std::string(model::kv_type_name(kv));
      for (size_t p = 0; p < c.prompt.size(); ++p) {
        compare_top(be->logits(static_cast<int>(p)).data(), m->config.n_vocab, c.prompt_top[p],
                    tol, what, stats);
      }
      for (const auto& [pos, file] : c.full_logits) {
        compare_full(be->logits(pos).data(), load_f32(file), tol, what, stats);
      }
      std::printf("[f16 kv] %s: rel_l2 %.3g max|d| %.3g top-20 max|d| %.3g\n", what.c_str(),
                  stats.rel_l2, stats.full_max_abs, stats.top_max_abs);
    }
  }
}

TEST(CpuBackend, F16KvDiffersFromF32) {
  // Guards the test above: the f16 path must really round (otherwise it checks nothing).
  GEM_REQUIRE_FIXTURE(fixture(kTiny6));
  const model::Model* m = fixture_model(kTiny6);
  ASSERT_NE(m, nullptr);
  const std::vector<int32_t> prompt = load_case("tiny6-f32", "mid").prompt;
  auto a = make(*m, 16, false, model::KvType::kF32);
  auto b = make(*m, 16, false, model::KvType::kF16);
  ASSERT_TRUE(a->eval(prompt, false).ok());
  ASSERT_TRUE(b->eval(prompt, false).ok());
  const double d = max_abs_diff(a->logits(), b->logits());
  EXPECT_GT(d, 0.0);
  EXPECT_LT(d, 0.05);
}

TEST(CpuBackend, CancellationMidPrompt) {
  GEM_REQUIRE_FIXTURE(fixture(kTinyQ4));
  const model::Model* m = fixture_model(kTinyQ4);
  ASSERT_NE(m, nullptr);
  const std::vector<int32_t> prompt = long_prompt();
  auto be = make(*m, 16, false);
  std::vector<std::pair<int, int>> calls;
  const Status st = be->eval(prompt, false, [&](int done, int total) {
    calls.emplace_back(done, total);
    return done < 32;  // cancel after the second tile
  });
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.message().rfind("cancelled", 0), 0u) << st.message();
  EXPECT_EQ(be->n_past(), 32);
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0], std::make_pair(16, 110));
  EXPECT_EQ(calls[1], std::make_pair(32, 110));
  EXPECT_TRUE(be->logits().empty());
  // Finishing the prompt gives the uninterrupted result.
  ASSERT_TRUE(be->eval({prompt.data() + 32, prompt.size() - 32}, false).ok());
  auto whole = make(*m, 16, false);
  int n_calls = 0;
  ASSERT_TRUE(whole->eval(prompt, false, [&](int, int) { return ++n_calls > 0; }).ok());
  EXPECT_EQ(n_calls, 7);  // ceil(110 / 16)
  EXPECT_EQ(max_abs_diff(be->logits(), whole->logits()), 0.0);
}

TEST(CpuBackend, RejectsBadInput) {
  GEM_REQUIRE_FIXTURE(fixture(kTinyQ4));
  const model::Model* m = fixture_model(kTinyQ4);
  ASSERT_NE(m, nullptr);
  auto be = make(*m, 16, false, model::KvType::kF32, 32);
  const std::vector<int32_t> prompt = long_prompt();
  Status st = be->eval({prompt.data(), 33}, false);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("n_ctx 32"), std::string::npos) << st.message();
  EXPECT_EQ(be->n_past(), 0);
  const int32_t bad[] = {2, 262144};
  st = be->eval(bad, false);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("262144"), std::string::npos) << st.message();
  EXPECT_FALSE(be->eval({}, false).ok());
  ASSERT_TRUE(be->eval({prompt.data(), 32}, false).ok());
  const int32_t one = 2;
  EXPECT_FALSE(be->eval({&one, 1}, false).ok());  // full
  BackendOptions opt;
  opt.n_tile = 0;
  EXPECT_FALSE(cpu::make_cpu_backend(*m, opt).ok());
  opt.n_tile = 8;
  opt.n_ctx = 0;
  EXPECT_FALSE(cpu::make_cpu_backend(*m, opt).ok());
}

TEST(CpuBackend, LogitsRows) {
  GEM_REQUIRE_FIXTURE(fixture(kTinyQ4));
  const model::Model* m = fixture_model(kTinyQ4);
  ASSERT_NE(m, nullptr);
  const std::vector<int32_t> prompt = long_prompt();
  auto be = make(*m, 8, false);
  ASSERT_TRUE(be->eval({prompt.data(), 10}, true).ok());
  EXPECT_EQ(be->logits(-1).data(), be->logits(9).data());
  EXPECT_EQ(be->logits(0).size(), static_cast<size_t>(m->config.n_vocab));
  EXPECT_TRUE(be->logits(10).empty());
  ASSERT_TRUE(be->eval({prompt.data() + 10, 10}, false).ok());
  EXPECT_EQ(be->logits(-1).data(), be->logits(9).data());
  EXPECT_TRUE(be->logits(0).empty());  // only the last row was computed
}

uint64_t read_file_size(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  return static_cast<uint64_t>(in.tellg());
}

// Anonymous (private, non-file) resident memory of this process, in bytes.
uint64_t rss_anon_bytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("RssAnon:", 0) == 0) return std::stoull(line.substr(8)) * 1024;
  }
  return 0;
}

TEST(CpuBackend, MemoryStaysWithinKvAndScratch) {
  GEM_REQUIRE_FIXTURE(fixture("tiny256-q6_k.gguf"));
  // Loaded here (not through the shared cache) so the load itself is measured too.
  const uint64_t before = rss_anon_bytes();
  ASSERT_GT(before, 0u);
  auto loaded = model::load_model(fixture("tiny256-q6_k.gguf"));
  ASSERT_TRUE(loaded.ok()) << loaded.message();
  auto be = make(**loaded, 64, false, model::KvType::kF32, 4096);
  ASSERT_NE(be, nullptr);
  const std::vector<int32_t> prompt = long_prompt();
  ASSERT_TRUE(be->eval(prompt, false).ok());
  for (int i = 0; i < 8; ++i) {
    const int32_t t = prompt[i];
    ASSERT_TRUE(be->eval({&t, 1}, false).ok());
  }
  const uint64_t after = rss_anon_bytes();
  const uint64_t growth = after > before ? after - before : 0;
  const cpu::CpuBackendMemory mem = cpu::cpu_backend_memory(*be);
  const uint64_t file_bytes = read_file_size(fixture("tiny256-q6_k.gguf"));
  std::printf("[memory] RssAnon growth %.1f MB; kv %.1f MB, scratch %.1f MB, packed %.1f MB, "
              "file %.1f MB\n", growth / 1e6, mem.kv_bytes / 1e6, mem.scratch_bytes / 1e6,
              mem.packed_bytes / 1e6, file_bytes / 1e6);
  EXPECT_GT(mem.kv_bytes, 0u);
  // The packed layout (packed.h, on x86 SIMD paths) is the one copy of the weights allowed.
  const uint64_t budget = mem.kv_bytes + mem.scratch_bytes + mem.packed_bytes;
  EXPECT_LE(growth, budget + 200ull * 1000 * 1000);
  // Stricter than the budget: any other copy of the weights (73 MB) would show here.
  EXPECT_LT(growth, budget + file_bytes / 2);
}

}  // namespace
}  // namespace gem::test
