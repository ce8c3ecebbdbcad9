// gem serve --mtp: the server drafts with the MTP assistant, answers greedy requests with the
// same text as a server without it, reports llama-server's draft counters in `timings`, and says
// so in /props. The tiny model and its assistant on the CPU.
#include <gtest/gtest.h>
#include <httplib.h>

#include <nlohmann/json.hpp>
#include <thread>

#include "backend/cpu/cpu_backend.h"
#include "common/test_util.h"
#include "model/assistant.h"
#include "model/model.h"
#include "runtime/engine.h"
#include "runtime/mtp_draft.h"
#include "server/real_server.h"
#include "server/server.h"
#include "tokenizer/tokenizer.h"

namespace gem::test {
namespace {

using Served = RealServer;

void start(Served& s, bool mtp) {
  if (!mtp) return start_real_server(s);
  start_real_server(s, {}, [](server::Server& server, runtime::Engine& engine) {
    auto a = model::load_assistant(fixture("mtp/tiny-q4_0-assistant.gguf"));
    ASSERT_TRUE(a.ok()) << a.message();
    auto d = runtime::MtpDraftSource::make(engine.backend(), std::move(a).value());
    ASSERT_TRUE(d.ok()) << d.message();
    server.set_drafter(std::move(d).value(), 4);
  });
}

nlohmann::json post(const Served& s, const nlohmann::json& body) {
  httplib::Client c("127.0.0.1", s.port);
  c.set_read_timeout(120, 0);
  auto r = c.Post("/v1/chat/completions", body.dump(), "application/json");
  EXPECT_TRUE(r) << "no answer";
  if (!r) return {};
  EXPECT_EQ(r->status, 200) << r->body;
  return nlohmann::json::parse(r->body);
}

TEST(MtpServer, GreedyTextEqualsAServerWithoutDrafting) {
  GEM_REQUIRE_FIXTURE(fixture("mtp/tiny-q4_0-assistant.gguf"));
  Served plain, spec;
  ASSERT_NO_FATAL_FAILURE(start(plain, false));
  ASSERT_NO_FATAL_FAILURE(start(spec, true));
  const nlohmann::json body = {{"messages", {{{"role", "user"}, {"content", "Write about the sea."}}}},
                               {"max_tokens", 40},
                               {"temperature", 0},
                               {"ignore_eos", true},
                               {"chat_template_kwargs", {{"enable_thinking", false}}}};
  const auto a = post(plain, body), b = post(spec, body);
  ASSERT_TRUE(a.is_object() && b.is_object());
  EXPECT_EQ(b["choices"][0]["message"], a["choices"][0]["message"]);
  EXPECT_EQ(b["usage"]["completion_tokens"], 40);
  EXPECT_FALSE(a["timings"].contains("draft_n"));
  ASSERT_TRUE(b["timings"].contains("draft_n")) << b["timings"];
  EXPECT_GT(b["timings"]["draft_n"].get<int>(), 0);
  EXPECT_GE(b["timings"]["draft_n"].get<int>(), b["timings"]["draft_n_accepted"].get<int>());
  // A sampled request drafts too (the same distribution; here: it completes).
  nlohmann::json sampled = body;
  sampled["temperature"] = 0.8;
  sampled["seed"] = 5;
  EXPECT_EQ(post(spec, sampled)["usage"]["completion_tokens"], 40);

  httplib::Client c("127.0.0.1", spec.port), d("127.0.0.1", plain.port);
  const auto pa = nlohmann::json::parse(c.Get("/props")->body), pb = nlohmann::json::parse(d.Get("/props")->body);
  EXPECT_EQ(pa["speculative"], true);
  EXPECT_EQ(pa["draft_max"], 4);
  EXPECT_EQ(pb["speculative"], false);
}

}  // namespace
}  // namespace gem::test
