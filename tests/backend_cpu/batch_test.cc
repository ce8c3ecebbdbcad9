// Batched evaluation on the CPU backend (Backend::eval_batch and the per-slot calls): a batch of
// sequences at different depths, interleaved multi-token runs, truncation, fork and per-slot
// checkpoints each equal the same work done one token at a time on a one-slot backend. Tiling
// and row count change no bit on the CPU (backend_test's TiledPromptEqualsTokenByToken), so
// every comparison is exact, reference and fast path alike.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend_cpu/fixture_cases.h"
#include "common/test_util.h"

namespace gem::test {
namespace {

constexpr const char* kTinyQ4 = "tiny-q4_0.gguf";  // window 16 (ring 16 + kRingSpare), 12 layers

std::unique_ptr<Backend> make(const model::Model& m, bool reference, int n_slots, int n_tile = 16,
                              model::KvType kv = model::KvType::kF16) {
  BackendOptions opt;
  opt.n_ctx = 160;
  opt.n_tile = n_tile;
  opt.reference = reference;
  opt.kv_type = kv;
  opt.n_threads = 2;
  opt.n_slots = n_slots;
  auto made = cpu::make_cpu_backend(m, opt);
  EXPECT_TRUE(made.ok()) << made.message();
  return made.ok() ? std::move(made).value() : nullptr;
}

std::vector<int32_t> text(size_t from, size_t n) {
  const std::vector<int32_t> all = load_case("tiny-q4_0", "long").prompt;  // 110 tokens
  std::vector<int32_t> out;
  for (size_t i = 0; i < n; ++i) out.push_back(all[(from + i) % all.size()]);
  return out;
}

// Logits after each token of `tokens`, evaluated one at a time on a fresh one-slot backend.
std::vector<std::vector<float>> one_at_a_time(const model::Model& m, bool reference,
                                              const std::vector<int32_t>& tokens) {
  auto be = make(m, reference, 1);
  std::vector<std::vector<float>> out;
  for (int32_t t : tokens) {
    EXPECT_TRUE(be->eval({&t, 1}, false).ok());
    out.emplace_back(be->logits().begin(), be->logits().end());
  }
  return out;
}

bool same(std::span<const float> a, const std::vector<float>& b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin());
}

class CpuBatch : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    GEM_REQUIRE_FIXTURE(fixture(kTinyQ4));
    m_ = fixture_model(kTinyQ4);
    ASSERT_NE(m_, nullptr);
  }
  bool reference() const { return GetParam(); }
  const model::Model* m_ = nullptr;
};

// Four sequences at depths 10..70 (past the ring), their prompts interleaved in one batch that
// spans several tiles, then decode-shaped batches (one row each) and a verify-shaped batch (runs
// of several rows of two slots, interleaved), each row's logits equal to one-at-a-time decoding.
TEST_P(CpuBatch, SequencesAtDifferentDepthsEqualOneAtATime) {
  const int S = 4;
  std::vector<std::vector<int32_t>> seq(S);
  std::vector<int> prompt_len(S);
  std::vector<std::vector<std::vector<float>>> expected(S);
  for (int s = 0; s < S; ++s) {
    prompt_len[s] = 10 + 20 * s;
    seq[s] = text(7 * s, prompt_len[s] + 12);
    expected[s] = one_at_a_time(*m_, reference(), seq[s]);
  }
  auto be = make(*m_, reference(), S);
  ASSERT_NE(be, nullptr);

  // The prompts, round-robin in chunks of 3 rows; the last row of each prompt asks for logits.
  std::vector<BatchRow> rows;
  std::vector<int> done(S, 0);
  for (bool more = true; more;) {
    more = false;
    for (int s = 0; s < S; ++s) {
      for (int i = 0; i < 3 && done[s] < prompt_len[s]; ++i, ++done[s]) {
        rows.push_back({s, done[s], seq[s][done[s]], done[s] == prompt_len[s] - 1});
      }
      more = more || done[s] < prompt_len[s];
    }
  }
  ASSERT_TRUE(be->eval_batch(rows).ok());
  // Logit rows come in row order: the prompts end in order of length.
  for (int s = 0; s < S; ++s) {
    EXPECT_EQ(be->slot_n_past(s), prompt_len[s]);
    EXPECT_TRUE(same(be->batch_logits(s), expected[s][prompt_len[s] - 1])) << "prompt end, slot " << s;
  }
  EXPECT_TRUE(be->batch_logits(S).empty());

  // Decode-shaped: one row per slot, slots in a shuffled order.
  for (int step = 0; step < 4; ++step) {
    rows.clear();
    for (int s : {2, 0, 3, 1}) {
      const int p = be->slot_n_past(s);
      rows.push_back({s, p, seq[s][p], true});
    }
    ASSERT_TRUE(be->eval_batch(rows).ok());
    for (int i = 0; i < S; ++i) {
      const int s = rows[i].slot;
      EXPECT_TRUE(same(be->batch_logits(i), expected[s][rows[i].pos])) << "step " << step << " slot " << s;
    }
  }
  // Verify-shaped: 5 rows of slot 1 and 3 of slot 3, interleaved, every row asking.
  rows.clear();
  const int p1 = be->slot_n_past(1), p3 = be->slot_n_past(3);
  for (int i = 0; i < 5; ++i) {
    rows.push_back({1, p1 + i, seq[1][p1 + i], true});
    if (i < 3) rows.push_back({3, p3 + i, seq[3][p3 + i], true});
  }
  ASSERT_TRUE(be->eval_batch(rows).ok());
  for (size_t i = 0; i < rows.size(); ++i) {
    EXPECT_TRUE(same(be->batch_logits(static_cast<int>(i)), expected[rows[i].slot][rows[i].pos]))
        << "verify row " << i;
  }
  EXPECT_EQ(be->slot_n_past(0), prompt_len[0] + 4);
  EXPECT_EQ(be->slot_n_past(1), prompt_len[1] + 9);
}

// A rejected draft tail, truncated away, leaves no trace: the continuation equals a sequence that
// never saw it, also past the ring (the tail overwrote ring slots the window no longer needs).
TEST_P(CpuBatch, TruncateThenReevaluateEqualsNeverEvaluated) {
  const std::vector<int32_t> truth = text(3, 80);
  const auto expected = one_at_a_time(*m_, reference(), truth);
  auto be = make(*m_, reference(), 2);
  ASSERT_NE(be, nullptr);
  std::vector<BatchRow> rows;
  for (int i = 0; i < 50; ++i) rows.push_back({1, i, truth[i], false});
  ASSERT_TRUE(be->eval_batch(rows).ok());
  int n_past = 50;
  // Rounds of 8 drafted tokens: the first `accept` right, the rest wrong; verify all, keep the
  // accepted ones, then continue.
  for (int accept : {3, 0, 7, 8, 1}) {
    rows.clear();
    for (int i = 0; i < 8; ++i) {
      const int32_t tok = i < accept ? truth[n_past + i] : (truth[n_past + i] + 17 + i) % 256;
      rows.push_back({1, n_past + i, tok, true});
    }
    ASSERT_TRUE(be->eval_batch(rows).ok());
    for (int i = 0; i < accept; ++i) {
      EXPECT_TRUE(same(be->batch_logits(i), expected[n_past + i])) << "accepted row " << i;
    }
    ASSERT_TRUE(be->slot_truncate(1, n_past + accept).ok());
    EXPECT_EQ(be->slot_n_past(1), n_past + accept);
    n_past += accept;
    // The bonus token, evaluated alone.
    const BatchRow bonus{1, n_past, truth[n_past], true};
    ASSERT_TRUE(be->eval_batch({&bonus, 1}).ok());
    EXPECT_TRUE(same(be->batch_logits(0), expected[n_past])) << "after accepting " << accept;
    ++n_past;
  }
  EXPECT_EQ(be->slot_n_past(0), 0);
  // Further back than the rings' spare is refused and changes nothing.
  Status far = be->slot_truncate(1, n_past - model::kRingSpare - 1);
  EXPECT_FALSE(far.ok());
  EXPECT_NE(far.message().find("spare"), std::string::npos) << far.message();
  EXPECT_EQ(be->slot_n_past(1), n_past);
  EXPECT_FALSE(be->slot_truncate(1, n_past + 1).ok());
  EXPECT_FALSE(be->slot_truncate(2, 0).ok());
}

// A fork continues exactly like its source, and the two are independent afterwards.
TEST_P(CpuBatch, ForkCopiesTheSequence) {
  const std::vector<int32_t> a = text(0, 60);
  std::vector<int32_t> b(a.begin(), a.begin() + 40);
  for (int i = 0; i < 20; ++i) b.push_back((a[40 + i] + 5) % 256);
  const auto exp_a = one_at_a_time(*m_, reference(), a);
  const auto exp_b = one_at_a_time(*m_, reference(), b);
  auto be = make(*m_, reference(), 3);
  ASSERT_NE(be, nullptr);
  std::vector<BatchRow> rows;
  for (int i = 0; i < 40; ++i) rows.push_back({0, i, a[i], false});
  ASSERT_TRUE(be->eval_batch(rows).ok());
  ASSERT_TRUE(be->slot_fork(0, 2).ok());
  EXPECT_EQ(be->slot_n_past(2), 40);
  for (int p = 40; p < 60; ++p) {
    rows = {{0, p, a[p], true}, {2, p, b[p], true}};
    ASSERT_TRUE(be->eval_batch(rows).ok());
    EXPECT_TRUE(same(be->batch_logits(0), exp_a[p])) << p;
    EXPECT_TRUE(same(be->batch_logits(1), exp_b[p])) << p;
  }
  EXPECT_FALSE(be->slot_fork(0, 3).ok());
}

// Per-slot checkpoints: restoring one slot puts back its cache exactly (past the ring) and leaves
// the others alone.
TEST_P(CpuBatch, PerSlotCheckpointRestore) {
  const std::vector<int32_t> a = text(11, 90);
  const auto exp = one_at_a_time(*m_, reference(), a);
  auto be = make(*m_, reference(), 2);
  ASSERT_NE(be, nullptr);
  std::vector<BatchRow> rows;
  for (int i = 0; i < 30; ++i) rows.push_back({0, i, a[i], false});
  for (int i = 0; i < 30; ++i) rows.push_back({1, i, a[i], false});
  ASSERT_TRUE(be->eval_batch(rows).ok());
  be->slot_checkpoint(1);
  rows.clear();
  for (int i = 30; i < 90; ++i) rows.push_back({1, i, (a[i] + 3) % 256, false});  // past the ring
  ASSERT_TRUE(be->eval_batch(rows).ok());
  be->slot_restore(1);
  EXPECT_EQ(be->slot_n_past(1), 30);
  EXPECT_EQ(be->slot_n_past(0), 30);
  for (int p = 30; p < 40; ++p) {
    rows = {{1, p, a[p], true}, {0, p, a[p], true}};
    ASSERT_TRUE(be->eval_batch(rows).ok());
    EXPECT_TRUE(same(be->batch_logits(0), exp[p])) << p;
    EXPECT_TRUE(same(be->batch_logits(1), exp[p])) << p;
  }
  be->slot_reset(1);
  EXPECT_EQ(be->slot_n_past(1), 0);
  EXPECT_EQ(be->slot_n_past(0), 40);
}

// Bad batches are refused whole, naming the row and what was expected; nothing is evaluated.
TEST_P(CpuBatch, BadBatchesAreRefusedWhole) {
  auto be = make(*m_, reference(), 2);
  ASSERT_NE(be, nullptr);
  auto refused = [&](std::vector<BatchRow> rows, const std::string& what) {
    Status st = be->eval_batch(rows);
    EXPECT_FALSE(st.ok()) << what;
    EXPECT_NE(st.message().find(what), std::string::npos) << st.message();
    EXPECT_EQ(be->slot_n_past(0), 0);
    EXPECT_EQ(be->slot_n_past(1), 0);
  };
  refused({}, "no rows");
  refused({{0, 0, 5, false}, {2, 0, 5, false}}, "row 1: slot 2 outside [0, 2)");
  refused({{0, 0, 5, false}, {0, 2, 5, false}}, "row 1: slot 0 position 2, expected 1");
  refused({{1, 0, 5, false}, {1, 1, 1 << 20, false}}, "row 1: token 1048576 outside the vocabulary");
  std::vector<BatchRow> full;
  for (int i = 0; i <= 160; ++i) full.push_back({1, i, 5, false});
  refused(full, "row 160: slot 1 is full (n_ctx 160)");
}

INSTANTIATE_TEST_SUITE_P(Paths, CpuBatch, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "Reference" : "Fast"; });

}  // namespace
}  // namespace gem::test
