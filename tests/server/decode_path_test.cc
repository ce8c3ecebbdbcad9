// The server's generation does the benchmark's work per token and nothing more (issue 28): a
// backend that counts what the runtime asks of it sits under a real server (tiny model, CPU fast
// path), and a chat completion of N tokens — streamed and not, greedy and with the sampling
// defaults hax gets — must cost exactly N − 1 one-token evals without all-logits rows, no
// checkpoint, restore or reset inside the decode loop, and, where the backend samples on the
// device (as the CUDA backend does), no logits row copied to the host at all. `gem bench`'s
// decode loop is one one-token eval per token; anything the server adds per token shows here.
#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <mutex>
#include <vector>
#include <nlohmann/json.hpp>
#include <thread>

#include "backend/cpu/cpu_backend.h"
#include "common/test_util.h"
#include "model/model.h"
#include "runtime/engine.h"
#include "sampler/sampler.h"
#include "server/real_server.h"
#include "server/server.h"
#include "tokenizer/tokenizer.h"

namespace gem::test {
namespace {

struct Counts {
  std::atomic<int> evals{0}, eval_tokens{0}, all_logit_evals{0}, logits_reads{0}, samples{0},
      checkpoints{0}, restores{0}, resets{0}, logprob_calls{0};
  std::mutex mu;
  std::vector<int> eval_sizes;  // every eval's token count, in order
};

// Delegates to a real backend and counts the calls; with `device_sample` it answers sample()
// itself (host-side greedy/sampling over the inner logits, as a device sampler would, without a
// logits() call through this interface).
class CountingBackend : public Backend {
 public:
  CountingBackend(std::unique_ptr<Backend> inner, Counts* c, bool device_sample)
      : inner_(std::move(inner)), c_(c), device_sample_(device_sample) {}
  std::string_view name() const override { return inner_->name(); }
  const BackendOptions& options() const override { return inner_->options(); }
  int n_past() const override { return inner_->n_past(); }
  Status eval(std::span<const int32_t> tokens, bool all_logits, const TileCallback& cb) override {
    ++c_->evals;
    c_->eval_tokens += static_cast<int>(tokens.size());
    {
      std::lock_guard<std::mutex> lock(c_->mu);
      c_->eval_sizes.push_back(static_cast<int>(tokens.size()));
    }
    if (all_logits) ++c_->all_logit_evals;
    return inner_->eval(tokens, all_logits, cb);
  }
  std::span<const float> logits(int row) override {
    ++c_->logits_reads;
    return inner_->logits(row);
  }
  void checkpoint() override {
    ++c_->checkpoints;
    inner_->checkpoint();
  }
  void restore() override {
    ++c_->restores;
    inner_->restore();
  }
  void reset() override {
    ++c_->resets;
    inner_->reset();
  }
  std::optional<int32_t> sample(const SamplingParams& p, std::span<const int32_t> history,
                                double coin) override {
    ++c_->samples;
    if (!device_sample_) return inner_->sample(p, history, coin);
    return sample_token(inner_->logits(-1), p, history, coin);
  }
  // With `device_sample`, logprobs as a device computes them: from the row where it lies, no
  // logits() call through this interface.
  TokenLogprobs token_logprobs(int32_t token, int top_n) override {
    ++c_->logprob_calls;
    if (!device_sample_) return Backend::token_logprobs(token, top_n);
    return row_logprobs(inner_->logits(-1), token, top_n);
  }

 private:
  std::unique_ptr<Backend> inner_;
  Counts* c_;
  bool device_sample_;
};

struct Served {
  Counts counts;
  RealServer rs;
};

void start(Served& s, bool device_sample) {
  start_real_server(s.rs, [&](std::unique_ptr<Backend> cpu) -> std::unique_ptr<Backend> {
    return std::make_unique<CountingBackend>(std::move(cpu), &s.counts, device_sample);
  });
}

// One chat completion; returns the number of generated tokens.
int complete(const Served& s, bool stream, const nlohmann::json& sampling) {
  httplib::Client c("127.0.0.1", s.rs.port);
  c.set_read_timeout(120, 0);
  nlohmann::json body = {{"messages", {{{"role", "user"}, {"content", "Write about the sea."}}}},
                         {"max_tokens", 24},
                         {"stream", stream},
                         {"chat_template_kwargs", {{"enable_thinking", false}}}};
  if (stream) body["stream_options"] = {{"include_usage", true}};
  for (const auto& [k, v] : sampling.items()) body[k] = v;
  auto r = c.Post("/v1/chat/completions", body.dump(), "application/json");
  EXPECT_TRUE(r) << "no answer";
  if (!r) return -1;
  EXPECT_EQ(r->status, 200) << r->body;
  if (!stream) return nlohmann::json::parse(r->body)["usage"]["completion_tokens"].get<int>();
  int n = -1;
  for (size_t pos = 0; (pos = r->body.find("data: {", pos)) != std::string::npos; ++pos) {
    const size_t end = r->body.find('\n', pos);
    const auto ev = nlohmann::json::parse(r->body.substr(pos + 6, end - pos - 6));
    if (ev.contains("usage") && ev["usage"].is_object()) n = ev["usage"]["completion_tokens"].get<int>();
  }
  return n;
}

void check_decode_work(bool device_sample) {
  Served s;
  ASSERT_NO_FATAL_FAILURE(start(s, device_sample));
  const nlohmann::json greedy = {{"temperature", 0}};
  const nlohmann::json hax_defaults = nlohmann::json::object();  // hax sends no sampling fields
  for (bool stream : {false, true}) {
    for (const nlohmann::json* sampling : {&greedy, &hax_defaults}) {
      SCOPED_TRACE(std::string(stream ? "streamed" : "not streamed") + ", sampling " + sampling->dump());
      // The prompt first: a request with max_tokens 1 evaluates it (cached afterwards), so the
      // measured request below evaluates nothing but its decode steps.
      nlohmann::json warm = *sampling;
      warm["max_tokens"] = 1;
      (void)complete(s, false, warm);
      const int evals0 = s.counts.evals, all0 = s.counts.all_logit_evals;
      const int reads0 = s.counts.logits_reads, samples0 = s.counts.samples;
      const int ckpt0 = s.counts.checkpoints, resets0 = s.counts.resets;
      const int n = complete(s, stream, *sampling);
      ASSERT_GT(n, 1) << "the model must generate several tokens";
      std::vector<int> sizes;
      {
        std::lock_guard<std::mutex> lock(s.counts.mu);
        sizes.assign(s.counts.eval_sizes.begin() + evals0, s.counts.eval_sizes.end());
      }
      // The generation prompt after the cached history (one eval), then the decode steps.
      ASSERT_EQ(static_cast<int>(sizes.size()), 1 + (n - 1)) << "one prompt eval, then one eval per token";
      for (size_t i = 1; i < sizes.size(); ++i) EXPECT_EQ(sizes[i], 1) << "decode eval " << i;
      EXPECT_EQ(s.counts.all_logit_evals - all0, 0) << "no eval keeps every row's logits";
      EXPECT_EQ(s.counts.resets - resets0, 0);
      EXPECT_LE(s.counts.checkpoints - ckpt0, 1) << "at most the history checkpoint, never one per token";
      const int reads = s.counts.logits_reads - reads0;
      if (device_sample) {
        EXPECT_EQ(s.counts.samples - samples0, n - 1) << "the device samples every token after the first";
        // The first token is drawn on the host from the prompt's last row; no other row moves.
        EXPECT_LE(reads, 1) << "no logits row per token comes to the host when the device samples";
      } else {
        EXPECT_LE(reads, n) << "at most one logits row per token";
      }
    }
  }
}

TEST(DecodePath, HostSamplingCostsOneEvalAndOneRowPerToken) { check_decode_work(false); }
TEST(DecodePath, DeviceSamplingCopiesNoLogits) { check_decode_work(true); }

// logprobs: where the backend samples on the device it computes them there too
// (Backend::token_logprobs), so asking for them moves no logits row per token either, and the
// request still costs one eval per token.
TEST(DecodePath, DeviceLogprobsCopyNoLogits) {
  Served s;
  ASSERT_NO_FATAL_FAILURE(start(s, true));
  for (bool stream : {false, true}) {
    SCOPED_TRACE(stream ? "streamed" : "not streamed");
    const nlohmann::json lp = {{"temperature", 0}, {"logprobs", true}, {"top_logprobs", 5}};
    nlohmann::json warm = lp;
    warm["max_tokens"] = 1;
    (void)complete(s, false, warm);
    const int evals0 = s.counts.evals, reads0 = s.counts.logits_reads, calls0 = s.counts.logprob_calls;
    const int n = complete(s, stream, lp);
    ASSERT_GT(n, 1);
    EXPECT_EQ(s.counts.evals - evals0, 1 + (n - 1)) << "one prompt eval, then one eval per token";
    // The first token's come from the prompt's row on the host, the rest from the backend.
    EXPECT_EQ(s.counts.logprob_calls - calls0, n - 1);
    EXPECT_LE(s.counts.logits_reads - reads0, 1) << "no logits row per token for logprobs";
  }
}

}  // namespace
}  // namespace gem::test
