// Shared by the speculative-decoding tests (tests/runtime/speculative_test on the CPU,
// tests/cuda/speculative_cuda_test): an oracle drafter that knows the plain greedy continuation,
// a greedy request runner, and the tests' prompt.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "runtime/engine.h"

namespace gem::runtime {

// Proposes the known continuation `truth` (the whole token sequence: prompt, then plain greedy
// output), right for the first `right` tokens of each round and wrong after that (a token shifted
// by one id), never right with right = 0.
class OracleDrafter : public DraftSource {
 public:
  OracleDrafter(std::vector<int32_t> truth, int right) : truth_(std::move(truth)), right_(right) {}
  std::vector<int32_t> propose(int32_t root, int pos, int row, int k) override {
    EXPECT_EQ(root, truth_.at(pos)) << "the root is the target's own token at its position";
    EXPECT_GE(row, -1);
    std::vector<int32_t> out;
    for (int i = 0; i < k && pos + 1 + i < static_cast<int>(truth_.size()); ++i) {
      const int32_t t = truth_[pos + 1 + i];
      out.push_back(i < right_ ? t : (t + 1) % 256);
    }
    ++calls;
    return out;
  }
  int calls = 0;

 private:
  std::vector<int32_t> truth_;
  int right_;
};

struct Output {
  std::vector<int32_t> tokens;
  GenerateResult result;
};

// Runs `req` on `e`, collecting its tokens (the caller stops it after stop_after, if >= 0).
inline Output run_request(Engine& e, const GenerateRequest& req, int stop_after = -1) {
  Output r;
  GenerateCallbacks cb;
  cb.on_token = [&](int32_t t) {
    r.tokens.push_back(t);
    return stop_after < 0 || static_cast<int>(r.tokens.size()) < stop_after;
  };
  auto res = e.generate(req, cb);
  EXPECT_TRUE(res.ok()) << res.message();
  if (res.ok()) r.result = *res;
  return r;
}

inline Output generate(Engine& e, const std::vector<int32_t>& prompt, int max_tokens,
                       DraftSource* drafter, int stop_after = -1, float repeat_penalty = 1.0f) {
  GenerateRequest req;
  req.prompt = prompt;
  req.max_tokens = max_tokens;
  req.sampling.temperature = 0.0f;
  req.sampling.repeat_penalty = repeat_penalty;
  req.stop_at_eog = false;  // a random model's end of turn would cut every run short
  req.drafter = drafter;
  return run_request(e, req, stop_after);
}

// A <bos> and n−1 fixed ordinary tokens.
inline std::vector<int32_t> prompt_of(int n) {
  std::vector<int32_t> p = {2};
  for (int i = 1; i < n; ++i) p.push_back(300 + (i * 53) % 4000);
  return p;
}

}  // namespace gem::runtime
