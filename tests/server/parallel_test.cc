// gem serve -np S (issue 24) through the real server: the tiny model on a CPU backend of S
// sequence slots. Concurrent greedy requests answer what each answers alone; a stream that
// disconnects leaves the others unchanged; requests beyond the slots wait in the bounded queue
// (a queued one that disconnects leaves it at once) and beyond the queue get 503 + Retry-After;
// a continued conversation finds its own slot after unrelated requests; /slots, /props and
// /metrics describe the slots; --mtp with several slots drafts only while one request runs and
// never changes the text. Requests overlap deterministically: a HoldingBackend keeps the
// scheduler's first eval_batch waiting until the test lets it go.
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "common/forwarding_backend.h"
#include "common/test_util.h"
#include "model/assistant.h"
#include "runtime/mtp_draft.h"
#include "server/real_server.h"

namespace gem::test {
namespace {

using nlohmann::json;

// The CPU backend; while held, eval_batch waits.
class HoldingBackend : public ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  void hold(bool on) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      held_ = on;
    }
    cv_.notify_all();
  }
  Status eval_batch(std::span<const BatchRow> rows) override {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !held_; });
    lock.unlock();
    return ForwardingBackend::eval_batch(rows);
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool held_ = false;
};

struct Parallel {
  RealServer s;
  HoldingBackend* backend = nullptr;
};

void start(Parallel& p, int n_slots, int max_queue = 8, bool mtp = false) {
  start_real_server(
      p.s,
      [&p](std::unique_ptr<Backend> inner) {
        auto h = std::make_unique<HoldingBackend>(std::move(inner));
        p.backend = h.get();
        return std::unique_ptr<Backend>(std::move(h));
      },
      [mtp](server::Server& server, runtime::Engine& engine) {
        if (!mtp) return;
        auto a = model::load_assistant(fixture("mtp/tiny-q4_0-assistant.gguf"));
        ASSERT_TRUE(a.ok()) << a.message();
        auto d = runtime::MtpDraftSource::make(engine.backend(), std::move(a).value());
        ASSERT_TRUE(d.ok()) << d.message();
        server.set_drafter(std::move(d).value(), 4);
      },
      n_slots,
      [max_queue](server::ServerOptions& o) {
        o.max_queue = max_queue;
        o.metrics = true;
      });
}

json body(const std::string& text, int max_tokens = 24, bool stream = false) {
  return {{"messages", {{{"role", "user"}, {"content", text}}}},
          {"max_tokens", max_tokens},
          {"temperature", 0},
          {"ignore_eos", true},
          {"stream", stream},
          {"chat_template_kwargs", {{"enable_thinking", false}}}};
}

json post(int port, const json& b) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(120, 0);
  auto r = c.Post("/v1/chat/completions", b.dump(), "application/json");
  EXPECT_TRUE(r) << "no answer";
  if (!r) return {};
  EXPECT_EQ(r->status, 200) << r->body;
  return json::parse(r->body, nullptr, false);
}

std::string text_of(const json& answer) {
  if (!answer.is_object() || !answer.contains("choices")) return "<no answer>";
  return answer["choices"][0]["message"].value("content", "");
}

json get_json(int port, const std::string& path) {
  httplib::Client c("127.0.0.1", port);
  auto r = c.Get(path);
  EXPECT_TRUE(r && r->status == 200) << path;
  return r ? json::parse(r->body, nullptr, false) : json();
}

std::string metrics(int port) {
  httplib::Client c("127.0.0.1", port);
  auto r = c.Get("/metrics");
  return r && r->status == 200 ? r->body : "";
}

// Waits until `pred` holds (polling), failing the test after 20 s.
template <typename Pred>
void wait_for(Pred pred, const char* what) {
  for (int i = 0; i < 4000; ++i) {
    if (pred()) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ADD_FAILURE() << "timed out waiting for " << what;
}

uint64_t scheduler_requests(Parallel& p) { return p.s.server->scheduler()->stats().n_requests; }

// A streamed request over a raw socket that the test closes when it likes (a disconnect).
int open_stream(int port, const json& b) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  const std::string payload = b.dump();
  const std::string req = "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                          "Content-Type: application/json\r\nContent-Length: " +
                          std::to_string(payload.size()) + "\r\n\r\n" + payload;
  EXPECT_EQ(::send(fd, req.data(), req.size(), 0), static_cast<ssize_t>(req.size()));
  return fd;
}

const char* kTexts[] = {"Write about the sea.", "List some colours of autumn leaves.",
                        "Describe a quiet library at night.", "Explain how rivers form."};

// Three requests at once on three slots (plus a fourth stream that disconnects after its first
// bytes): each answer equals the same request served alone; the steps batched several rows.
TEST(Parallel, ConcurrentRequestsEqualEachServedAlone) {
  Parallel p;
  ASSERT_NO_FATAL_FAILURE(start(p, 3));
  const int port = p.s.port;
  std::vector<std::string> alone;
  for (int i = 0; i < 3; ++i) alone.push_back(text_of(post(port, body(kTexts[i], 24 + 4 * i))));

  p.backend->hold(true);
  const uint64_t before = scheduler_requests(p);
  std::vector<std::string> together(3);
  std::vector<std::thread> threads;
  for (int i = 0; i < 3; ++i) {
    threads.emplace_back([&, i] { together[i] = text_of(post(port, body(kTexts[i], 24 + 4 * i))); });
  }
  wait_for([&] { return scheduler_requests(p) >= before + 3; }, "three requests in the scheduler");
  // The fourth waits in the queue (three slots busy), then runs and disconnects after its first
  // generated text, while the others may still generate.
  const int fd = open_stream(port, body(kTexts[3], 200, true));
  p.backend->hold(false);
  // Read until the first generated text arrives (it is decoding), then hang up.
  std::string got;
  char buf[4096];
  for (ssize_t n; got.find("\"content\":\"") == std::string::npos &&
                  (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) {
    got.append(buf, static_cast<size_t>(n));
  }
  EXPECT_NE(got.find("\"content\":\""), std::string::npos) << got;
  ::close(fd);
  for (auto& t : threads) t.join();
  for (int i = 0; i < 3; ++i) EXPECT_EQ(together[i], alone[i]) << "request " << i;
  const runtime::SchedulerStats st = p.s.server->scheduler()->stats();
  EXPECT_GT(st.n_decode_rows, st.n_steps) << "decode steps should batch several slots";

  // /props and /slots describe the three slots, each of its own context.
  EXPECT_EQ(get_json(port, "/props")["total_slots"], 3);
  const json slots = get_json(port, "/slots");
  ASSERT_TRUE(slots.is_array());
  ASSERT_EQ(slots.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(slots[i]["id"], i);
    EXPECT_EQ(slots[i]["n_ctx"], 512);
    EXPECT_TRUE(slots[i].contains("n_cached_tokens"));
    EXPECT_TRUE(slots[i].contains("is_processing"));
  }
  const std::string m = metrics(port);
  EXPECT_NE(m.find("gem:slots_total 3"), std::string::npos) << m;
  EXPECT_NE(m.find("gem:slot_kv_tokens{slot=\"2\"}"), std::string::npos) << m;
  EXPECT_NE(m.find("llamacpp:kv_cache_usage_ratio"), std::string::npos) << m;
}

// logprobs with several slots: requests asking for them (greedy and sampled with a seed) run at
// once and each answer, log-probabilities included, equals the same request served alone.
TEST(Parallel, LogprobsUnderConcurrencyEqualEachServedAlone) {
  Parallel p;
  ASSERT_NO_FATAL_FAILURE(start(p, 2));
  const int port = p.s.port;
  auto lp_body = [](int i) {
    json b = body(kTexts[i], 16 + 4 * i);
    b["logprobs"] = true;
    b["top_logprobs"] = 2 + i;
    if (i == 1) {
      b["temperature"] = 0.8;
      b["seed"] = 5;
    }
    return b;
  };
  std::vector<json> alone;
  for (int i = 0; i < 2; ++i) alone.push_back(post(port, lp_body(i)));
  p.backend->hold(true);
  const uint64_t before = scheduler_requests(p);
  std::vector<json> together(2);
  std::vector<std::thread> threads;
  for (int i = 0; i < 2; ++i) threads.emplace_back([&, i] { together[i] = post(port, lp_body(i)); });
  wait_for([&] { return scheduler_requests(p) >= before + 2; }, "two requests in the scheduler");
  p.backend->hold(false);
  for (auto& t : threads) t.join();
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(together[i].is_object() && together[i].contains("choices")) << together[i].dump();
    const json& lp = together[i]["choices"][0]["logprobs"]["content"];
    ASSERT_TRUE(lp.is_array()) << together[i].dump();
    EXPECT_FALSE(lp.empty()) << "request " << i;
    for (const json& e : lp) EXPECT_EQ(e["top_logprobs"].size(), static_cast<size_t>(2 + i));
    EXPECT_EQ(text_of(together[i]), text_of(alone[i])) << "request " << i;
    EXPECT_EQ(lp, alone[i]["choices"][0]["logprobs"]["content"]) << "request " << i;
  }
  // /slots shows each slot's last request's own sampling (llama-server's "params").
  const json slots = get_json(port, "/slots");
  ASSERT_TRUE(slots.is_array());
  int sampled = 0, greedy = 0;
  for (const json& sl : slots) {
    const json& prm = sl["params"];
    if (prm["seed"] == 5 && prm["temperature"].get<double>() == 0.8 && prm["n_predict"] == 20) {
      ++sampled;
    }
    if (prm["temperature"].get<double>() == 0.0 && prm["n_predict"] == 16) ++greedy;
  }
  EXPECT_EQ(sampled, 1) << slots.dump();
  EXPECT_EQ(greedy, 1) << slots.dump();
}

// Two slots, a queue of one: two requests run, a third waits, a fourth gets 503 with
// Retry-After. The waiting one's client goes away: the queue frees at once (a fifth is queued,
// not refused). Let go, the running ones answer what they answer alone.
TEST(Parallel, BeyondTheSlotsTheQueueThen503) {
  Parallel p;
  ASSERT_NO_FATAL_FAILURE(start(p, 2, /*max_queue=*/1));
  const int port = p.s.port;
  const std::string a0 = text_of(post(port, body(kTexts[0]))), a1 = text_of(post(port, body(kTexts[1])));
  p.backend->hold(true);
  const uint64_t before = scheduler_requests(p);
  std::string r0, r1, r4;
  std::thread t0([&] { r0 = text_of(post(port, body(kTexts[0]))); });
  std::thread t1([&] { r1 = text_of(post(port, body(kTexts[1]))); });
  wait_for([&] { return scheduler_requests(p) >= before + 2; }, "two running requests");
  const int queued = open_stream(port, body(kTexts[2], 24, true));
  wait_for([&] { return metrics(port).find("llamacpp:requests_deferred 1\n") != std::string::npos; },
           "a queued request");
  {
    httplib::Client c("127.0.0.1", port);
    auto r = c.Post("/v1/chat/completions", body(kTexts[3]).dump(), "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 503) << r->body;
    EXPECT_EQ(r->get_header_value("Retry-After"), "5");
  }
  ::close(queued);  // cancelled while queued
  wait_for([&] { return metrics(port).find("llamacpp:requests_deferred 0\n") != std::string::npos; },
           "the queue to free");
  std::thread t4([&] { r4 = text_of(post(port, body(kTexts[3]))); });
  wait_for([&] { return metrics(port).find("llamacpp:requests_deferred 1\n") != std::string::npos; },
           "the fifth request queued");
  p.backend->hold(false);
  t0.join();
  t1.join();
  t4.join();
  EXPECT_EQ(r0, a0);
  EXPECT_EQ(r1, a1);
  EXPECT_FALSE(r4.empty());
  EXPECT_EQ(scheduler_requests(p), before + 3) << "the cancelled queued request never ran";
}

// A conversation continues after two unrelated ones ran on the other slots (one before it, one
// after): its next turn finds its own slot, not the least recently used one, and evaluates only
// the new tokens (timings.cache_n = the first turn's history) and answers what a
// fresh server answers.
TEST(Parallel, ContinuedConversationReusesItsSlot) {
  Parallel p, fresh;
  ASSERT_NO_FATAL_FAILURE(start(p, 3));
  ASSERT_NO_FATAL_FAILURE(start(fresh, 1));
  const int port = p.s.port;
  json conv = body(kTexts[0]);
  post(port, body(kTexts[1]));  // first: its slot is the least recently used one
  const json a1 = post(port, conv);
  post(port, body(kTexts[2]));
  conv["messages"].push_back(a1["choices"][0]["message"]);
  conv["messages"].push_back({{"role", "user"}, {"content", "And the sky?"}});
  const json a2 = post(port, conv);
  const int n_prompt_1 = a1["usage"]["prompt_tokens"].get<int>();
  EXPECT_GE(a2["timings"]["cache_n"].get<int>(), n_prompt_1 - 8) << a2["timings"];
  EXPECT_LT(a2["timings"]["prompt_n"].get<int>(), a2["usage"]["prompt_tokens"].get<int>() - n_prompt_1 + 8);
  EXPECT_EQ(text_of(a2), text_of(post(fresh.s.port, conv)));
  const std::string m = metrics(port);
  EXPECT_NE(m.find("gem:prompt_cache_reuse_hits_total 1"), std::string::npos) << m;
  // The scheduler's time split: its evaluations took time, within its busy time.
  auto value = [&](const std::string& name) {
    const size_t at = m.find("\n" + name + " ");
    return at == std::string::npos ? -1.0 : std::stod(m.substr(at + name.size() + 2));
  };
  EXPECT_GT(value("gem:scheduler_eval_seconds_total"), 0.0) << m;
  EXPECT_GT(value("gem:scheduler_prompt_steps_total"), 0.0) << m;
  EXPECT_GE(value("gem:scheduler_busy_seconds_total"), value("gem:scheduler_eval_seconds_total")) << m;
  int holding = 0;
  for (const json& s : get_json(port, "/slots")) holding += s["n_cached_tokens"].get<int>() > 0 ? 1 : 0;
  EXPECT_EQ(holding, 3) << "each conversation kept its own slot";
}

// --mtp with two slots: a request alone drafts (slot 0) and answers the plain text; two at once
// decode batched without drafts and answer the plain text too.
TEST(Parallel, SpeculativeWithSeveralSlotsKeepsTheText) {
  GEM_REQUIRE_FIXTURE(fixture("mtp/tiny-q4_0-assistant.gguf"));
  Parallel plain, spec;
  ASSERT_NO_FATAL_FAILURE(start(plain, 1));
  ASSERT_NO_FATAL_FAILURE(start(spec, 2, 8, /*mtp=*/true));
  const json alone = post(spec.s.port, body(kTexts[0], 40));
  EXPECT_EQ(text_of(alone), text_of(post(plain.s.port, body(kTexts[0], 40))));
  ASSERT_TRUE(alone["timings"].contains("draft_n")) << alone["timings"];
  EXPECT_GT(alone["timings"]["draft_n"].get<int>(), 0);

  spec.backend->hold(true);
  const uint64_t before = scheduler_requests(spec);
  json r[2];
  std::thread t0([&] { r[0] = post(spec.s.port, body(kTexts[1], 40)); });
  std::thread t1([&] { r[1] = post(spec.s.port, body(kTexts[2], 40)); });
  wait_for([&] { return scheduler_requests(spec) >= before + 2; }, "two requests");
  spec.backend->hold(false);
  t0.join();
  t1.join();
  EXPECT_EQ(text_of(r[0]), text_of(post(plain.s.port, body(kTexts[1], 40))));
  EXPECT_EQ(text_of(r[1]), text_of(post(plain.s.port, body(kTexts[2], 40))));
}

}  // namespace
}  // namespace gem::test
