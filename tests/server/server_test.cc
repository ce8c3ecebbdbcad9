// The HTTP server end to end (in process, scripted backend): routes, the SSE shape, tool calls,
// non-streamed answers, prefix reuse through the chat format, errors, the API key, the queue,
// a thinking-off follow-up reusing the conversation, prompt progress, heartbeats, and disconnects
// at random points.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <random>

#include "chat/chat.h"
#include "server/server_harness.h"

namespace gem::test {
namespace {

using nlohmann::json;

json post_json(httplib::Client& c, const std::string& path, const json& body, int* status,
               httplib::Headers headers = {}) {
  auto r = c.Post(path.c_str(), headers, body.dump(), "application/json");
  if (!r) {
    *status = -1;
    return json();
  }
  *status = r->status;
  return json::parse(r->body, nullptr, false);
}

Sse post_stream(httplib::Client& c, const json& body, int* status = nullptr) {
  auto r = c.Post("/v1/chat/completions", body.dump(), "application/json");
  EXPECT_TRUE(r) << "no response";
  if (!r) return {};
  if (status) *status = r->status;
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_NE(r->get_header_value("Content-Type").find("text/event-stream"), std::string::npos);
  return parse_sse(r->body);
}

json with(json base, const json& more) {
  base.update(more);
  return base;
}

void expect_error(const json& body, int status, const std::string& type) {
  ASSERT_TRUE(body.is_object()) << body;
  ASSERT_TRUE(body.contains("error")) << body;
  EXPECT_EQ(body["error"]["code"], status) << body;
  EXPECT_EQ(body["error"]["type"], type) << body;
  EXPECT_TRUE(body["error"]["message"].is_string());
}

TEST(Server, MetadataRoutes) {
  TestServer ts;
  auto c = ts.client();
  auto h = c.Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
  EXPECT_EQ(json::parse(h->body)["status"], "ok");
  for (const char* path : {"/v1/models", "/models"}) {
    auto r = c.Get(path);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);
    json j = json::parse(r->body);
    ASSERT_EQ(j["data"].size(), 1u);
    EXPECT_EQ(j["data"][0]["id"], "gem-test");
    EXPECT_EQ(j["data"][0]["meta"]["n_ctx"], 1024);
    EXPECT_FALSE(j["data"][0].contains("status")) << "a status object makes hax think router mode";
  }
  auto p = c.Get("/props?model=gem-test");
  ASSERT_TRUE(p);
  EXPECT_EQ(p->status, 200);
  json props = json::parse(p->body);
  EXPECT_EQ(props["default_generation_settings"]["n_ctx"], 1024);
  EXPECT_TRUE(props["default_generation_settings"]["params"].contains("temperature"));
  EXPECT_EQ(props["modalities"], json({{"vision", false}, {"audio", false}, {"video", false}}));
  EXPECT_EQ(props["total_slots"], 1);
  EXPECT_EQ(props["model_alias"], "gem-test");
  EXPECT_NE(props["model_path"].get<std::string>().find(".gguf"), std::string::npos);
  EXPECT_EQ(props["chat_template"], "{{ template }}");
  EXPECT_EQ(props["build_info"].get<std::string>().rfind("b", 0), 0u);
  auto nf = c.Get("/nope");
  ASSERT_TRUE(nf);
  EXPECT_EQ(nf->status, 404);
  expect_error(json::parse(nf->body), 404, "not_found_error");
}

TEST(Server, LoadingAnswers503ButListsModels) {
  TestServer ts({}, default_script(), 1024, 16, /*load=*/false);
  auto c = ts.client();
  auto h = c.Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 503);
  expect_error(json::parse(h->body), 503, "unavailable_error");
  auto m = c.Get("/v1/models");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->status, 200);
  int status = 0;
  json e = post_json(c, "/v1/chat/completions", {{"messages", user_msgs("hi")}}, &status);
  EXPECT_EQ(status, 503);
  ts.load(1024, 16);
  auto h2 = c.Get("/health");
  EXPECT_EQ(h2->status, 200);
}

TEST(Server, StreamedReasoningAndContent) {
  TestServer ts;
  auto c = ts.client();
  json body = {{"model", "whatever"},
               {"stream", true},
               {"stream_options", {{"include_usage", true}}},
               {"messages", user_msgs("Say hello")}};
  Sse s = post_stream(c, body);
  ASSERT_GE(s.chunks.size(), 4u);
  EXPECT_TRUE(s.done);
  EXPECT_FALSE(s.data_after_done);
  const json& first = s.chunks[0];
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  EXPECT_TRUE(first["choices"][0]["delta"]["content"].is_null());
  const std::string id = first["id"];
  EXPECT_EQ(id.rfind("chatcmpl-", 0), 0u);
  for (size_t i = 0; i < s.chunks.size(); ++i) {
    const json& ch = s.chunks[i];
    EXPECT_EQ(ch["id"], id);
    EXPECT_EQ(ch["object"], "chat.completion.chunk");
    EXPECT_EQ(ch["model"], "gem-test");
    EXPECT_EQ(ch["system_fingerprint"].get<std::string>().rfind("b", 0), 0u);
    if (i > 0 && !ch["choices"].empty()) {
      const json& d = ch["choices"][0]["delta"];
      EXPECT_FALSE(d.contains("role")) << ch;
      if (d.contains("content")) {
        EXPECT_NE(d["content"], "") << "empty content delta";
      }
      if (d.contains("reasoning_content")) {
        EXPECT_NE(d["reasoning_content"], "");
      }
    }
  }
  EXPECT_EQ(s.reasoning, "The user greets me.");
  EXPECT_EQ(s.content, "Hello there, friend!");
  const json& fin = s.chunks[s.chunks.size() - 2];
  EXPECT_EQ(fin["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(fin["choices"][0]["delta"], json::object());
  const json& usage = s.chunks.back();
  EXPECT_TRUE(usage["choices"].is_array() && usage["choices"].empty());
  EXPECT_GT(usage["usage"]["prompt_tokens"].get<int>(), 5);
  EXPECT_GT(usage["usage"]["completion_tokens"].get<int>(), 5);
  EXPECT_EQ(usage["usage"]["total_tokens"].get<int>(),
            usage["usage"]["prompt_tokens"].get<int>() + usage["usage"]["completion_tokens"].get<int>());
  EXPECT_EQ(usage["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  EXPECT_TRUE(usage.contains("timings"));

  // Without include_usage: no usage chunk, timings ride on the finish chunk.
  body.erase("stream_options");
  Sse s2 = post_stream(c, body);
  EXPECT_EQ(s2.chunks.back()["choices"][0]["finish_reason"], "stop");
  EXPECT_TRUE(s2.chunks.back().contains("timings"));
  for (const json& ch : s2.chunks) EXPECT_FALSE(ch.contains("usage"));
  EXPECT_EQ(s2.content, "Hello there, friend!");
}

TEST(Server, ToolCallRoundTripWithPrefixReuse) {
  TestServer ts;
  auto c = ts.client();
  json messages = user_msgs("What is the weather in Paris?");
  json body = {{"stream", true},
               {"stream_options", {{"include_usage", true}}},
               {"messages", messages},
               {"tools", json::array({weather_tool()})}};
  Sse s = post_stream(c, body);
  std::string args, name, call_id;
  int n_first = 0;
  for (const json& ch : s.chunks) {
    if (ch["choices"].empty()) continue;
    const json& d = ch["choices"][0]["delta"];
    if (!d.contains("tool_calls")) continue;
    ASSERT_EQ(d["tool_calls"].size(), 1u);
    const json& tc = d["tool_calls"][0];
    EXPECT_EQ(tc["index"], 0);
    EXPECT_FALSE(tc["function"].contains("id"));
    if (tc.contains("id")) {
      ++n_first;
      EXPECT_EQ(tc["type"], "function");
      name = tc["function"]["name"];
      call_id = tc["id"];
      EXPECT_EQ(call_id.size(), 32u);
    } else {
      EXPECT_FALSE(tc["function"].contains("name"));
    }
    if (tc["function"].contains("arguments")) args += tc["function"]["arguments"].get<std::string>();
  }
  EXPECT_EQ(n_first, 1);
  EXPECT_EQ(name, "get_weather");
  json parsed = json::parse(args, nullptr, false);
  EXPECT_EQ(parsed, json({{"city", "Paris"}, {"days", 2}})) << args;
  const json& fin = s.chunks[s.chunks.size() - 2];
  EXPECT_EQ(fin["choices"][0]["finish_reason"], "tool_calls");
  const int first_prompt = s.chunks.back()["usage"]["prompt_tokens"];

  // The client runs the tool and sends the result back (hax's shape: content null, no name).
  messages.push_back({{"role", "assistant"},
                      {"content", nullptr},
                      {"tool_calls", json::array({{{"id", call_id},
                                                   {"type", "function"},
                                                   {"function", {{"name", name}, {"arguments", args}}}}})}});
  messages.push_back({{"role", "tool"}, {"tool_call_id", call_id}, {"content", "18C cloudy"}});
  body["messages"] = messages;
  Sse s2 = post_stream(c, body);
  EXPECT_EQ(s2.content, "It is 18C and cloudy in Paris.");
  EXPECT_EQ(s2.chunks[s2.chunks.size() - 2]["choices"][0]["finish_reason"], "stop");
  const json& usage = s2.chunks.back()["usage"];
  // The second prompt strictly extends the first, so all of it was reused.
  EXPECT_EQ(usage["prompt_tokens_details"]["cached_tokens"], first_prompt);
  EXPECT_GT(usage["prompt_tokens"].get<int>(), first_prompt);
}

// Thinking off: the generation prompt ends with an empty thought channel that the next turn's
// history does not render back, so the follow-up prompt diverges a few tokens before the end of
// the first one. The server keeps the conversation's stable prefix cached (everything but that
// channel), so the second turn and a regeneration reuse it instead of starting over.
TEST(Server, ThinkingOffFollowUpReusesTheConversation) {
  TestServer ts;
  auto c = ts.client();
  const Tokenizer& tok = ts.server().engine()->tokenizer();
  const std::string suffix = "<|channel>thought\n<channel|>";
  const int n_channel = static_cast<int>(tok.encode(suffix, false, true).size());
  ASSERT_GT(n_channel, 0);
  json messages = user_msgs("Count please");
  json body = {{"messages", messages}, {"chat_template_kwargs", {{"enable_thinking", false}}}};
  int status = 0;
  json r1 = post_json(c, "/v1/chat/completions", body, &status);
  ASSERT_EQ(status, 200) << r1;
  const std::string answer = r1["choices"][0]["message"]["content"];
  EXPECT_EQ(answer, "one two three four five six seven eight nine ten");
  const int first_prompt = r1["usage"]["prompt_tokens"];
  EXPECT_EQ(r1["usage"]["prompt_tokens_details"]["cached_tokens"], 0);

  messages.push_back({{"role", "assistant"}, {"content", answer}});
  messages.push_back({{"role", "user"}, {"content", "Count again"}});
  body["messages"] = messages;
  json r2 = post_json(c, "/v1/chat/completions", body, &status);
  ASSERT_EQ(status, 200) << r2;
  EXPECT_EQ(r2["choices"][0]["message"]["content"], answer);
  const int second_prompt = r2["usage"]["prompt_tokens"];
  EXPECT_GT(second_prompt, first_prompt);
  // Everything of the first prompt but its empty thought channel came from the cache.
  EXPECT_EQ(r2["usage"]["prompt_tokens_details"]["cached_tokens"], first_prompt - n_channel);
  EXPECT_EQ(r2["timings"]["cache_n"], first_prompt - n_channel);

  // The backend holds the second conversation's stable prefix: its tokens, as the chat layer
  // renders and the tokenizer encodes them without the generation prompt's thought channel.
  chat::RenderOptions ro;
  ro.enable_thinking = false;
  ro.emit_bos_text = false;
  ro.reopen_model_turn = true;
  Result<std::string> text = chat::render(messages, json(), ro);
  ASSERT_TRUE(text.ok()) << text.message();
  ASSERT_EQ(text->substr(text->size() - suffix.size()), suffix);
  const std::vector<int32_t> full = tok.encode(*text, true, true);
  const std::vector<int32_t> stable =
      tok.encode(std::string_view(*text).substr(0, text->size() - suffix.size()), true, true);
  EXPECT_EQ(static_cast<int>(full.size()), second_prompt);
  // Encoding the history and the channel apart gives the whole text's tokens.
  std::vector<int32_t> joined = stable;
  const std::vector<int32_t> channel = tok.encode(suffix, false, true);
  joined.insert(joined.end(), channel.begin(), channel.end());
  EXPECT_EQ(joined, full);
  EXPECT_EQ(ts.backend().tokens(), stable);

  // A regeneration of the same turn re-evaluates only the thought channel.
  json r3 = post_json(c, "/v1/chat/completions", body, &status);
  ASSERT_EQ(status, 200) << r3;
  EXPECT_EQ(r3["choices"][0]["message"]["content"], answer);
  EXPECT_EQ(r3["usage"]["prompt_tokens_details"]["cached_tokens"], second_prompt - n_channel);
  EXPECT_EQ(ts.backend().tokens(), stable);
}

TEST(Server, NonStreamedCompletion) {
  TestServer ts;
  auto c = ts.client();
  int status = 0;
  json r = post_json(c, "/chat/completions", {{"messages", user_msgs("Say hello")}}, &status);
  ASSERT_EQ(status, 200) << r;
  EXPECT_EQ(r["object"], "chat.completion");
  EXPECT_NE(r["id"].get<std::string>().find("cmpl"), std::string::npos);
  EXPECT_EQ(r["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(r["choices"][0]["message"]["content"], "Hello there, friend!");
  EXPECT_EQ(r["choices"][0]["message"]["reasoning_content"], "The user greets me.");
  EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
  EXPECT_FALSE(r["choices"][0]["message"].contains("tool_calls"));
  EXPECT_GT(r["usage"]["completion_tokens"].get<int>(), 0);

  json t = post_json(c, "/v1/chat/completions",
                     {{"messages", user_msgs("weather in Paris")}, {"tools", json::array({weather_tool()})}},
                     &status);
  ASSERT_EQ(status, 200) << t;
  const json& msg = t["choices"][0]["message"];
  EXPECT_EQ(msg["content"], "");
  ASSERT_EQ(msg["tool_calls"].size(), 1u);
  EXPECT_TRUE(msg["tool_calls"][0]["function"]["arguments"].is_string());
  EXPECT_EQ(json::parse(msg["tool_calls"][0]["function"]["arguments"].get<std::string>())["city"], "Paris");
  EXPECT_EQ(t["choices"][0]["finish_reason"], "tool_calls");
}

TEST(Server, LengthStopStringsThinkingAndToolChoice) {
  TestServer ts;
  auto c = ts.client();
  int status = 0;
  json base = {{"messages", user_msgs("Count please")}, {"chat_template_kwargs", {{"enable_thinking", false}}}};
  json r = post_json(c, "/v1/chat/completions", with(base, {{"max_tokens", 3}}), &status);
  ASSERT_EQ(status, 200) << r;
  EXPECT_EQ(r["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(r["usage"]["completion_tokens"], 3);

  // ignore_eos (llama-server's field) generates through the script's end of turn to the limit.
  r = post_json(c, "/v1/chat/completions", with(base, {{"max_tokens", 40}}), &status);
  ASSERT_EQ(status, 200) << r;
  EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
  EXPECT_LT(r["usage"]["completion_tokens"].get<int>(), 40);
  r = post_json(c, "/v1/chat/completions", with(base, {{"max_tokens", 40}, {"ignore_eos", true}}),
                &status);
  ASSERT_EQ(status, 200) << r;
  EXPECT_EQ(r["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(r["usage"]["completion_tokens"], 40);
  r = post_json(c, "/v1/chat/completions", with(base, {{"ignore_eos", 1}}), &status);
  EXPECT_EQ(status, 400) << r;
  EXPECT_NE(r.dump().find("ignore_eos"), std::string::npos) << r;

  r = post_json(c, "/v1/chat/completions", with(base, {{"stop", {"four", "xyz"}}}), &status);
  ASSERT_EQ(status, 200) << r;
  EXPECT_EQ(r["choices"][0]["message"]["content"], "one two three ");
  EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");

  r = post_json(c, "/v1/chat/completions",
                {{"messages", user_msgs("Count please")}, {"reasoning_effort", "none"}}, &status);
  EXPECT_EQ(r["choices"][0]["message"]["content"], "one two three four five six seven eight nine ten");
  EXPECT_FALSE(r["choices"][0]["message"].contains("reasoning_content"));

  // tool_choice "none": the scripted call is suppressed (its opening token is banned).
  r = post_json(c, "/v1/chat/completions",
                {{"messages", user_msgs("weather in Paris")},
                 {"tools", json::array({weather_tool()})},
                 {"tool_choice", "none"},
                 {"max_tokens", 8}},
                &status);
  ASSERT_EQ(status, 200) << r;
  EXPECT_FALSE(r["choices"][0]["message"].contains("tool_calls"));
  // A named function is forced even where the model would have answered in text.
  r = post_json(c, "/v1/chat/completions",
                {{"messages", user_msgs("Count please")},
                 {"tools", json::array({weather_tool()})},
                 {"tool_choice", {{"type", "function"}, {"function", {{"name", "get_weather"}}}}},
                 {"chat_template_kwargs", {{"enable_thinking", false}}},
                 {"max_tokens", 40}},
                &status);
  ASSERT_EQ(status, 200) << r;
  ASSERT_TRUE(r["choices"][0]["message"].contains("tool_calls")) << r;
  EXPECT_EQ(r["choices"][0]["message"]["tool_calls"][0]["function"]["name"], "get_weather");
  // Naming a function that is not declared is the client's mistake.
  post_json(c, "/v1/chat/completions",
            {{"messages", user_msgs("x")},
             {"tools", json::array({weather_tool()})},
             {"tool_choice", {{"type", "function"}, {"function", {{"name", "nope"}}}}}},
            &status);
  EXPECT_EQ(status, 400);
}

TEST(Server, ClientMistakesAre4xxJson) {
  server::ServerOptions o;
  o.max_body_bytes = 64 * 1024;
  TestServer ts(o, default_script(), 256);
  auto c = ts.client();
  const std::vector<std::string> bad = {
      "{",
      "[]",
      "\"x\"",
      R"({"messages":"x"})",
      R"({"messages":[]})",
      R"({"messages":[123]})",
      R"({"messages":[{}]})",
      R"({"messages":[{"role":1,"content":"x"}]})",
      R"({"messages":[{"role":"user","content":5}]})",
      R"({"messages":[{"role":"wizard","content":"x"}]})",
      R"({"messages":[{"role":"user","content":"x"}],"temperature":"hot"})",
      R"({"messages":[{"role":"user","content":"x"}],"stream":"yes"})",
      R"({"messages":[{"role":"user","content":"x"}],"max_tokens":"ten"})",
      R"({"messages":[{"role":"user","content":"x"}],"tools":"x"})",
      R"({"messages":[{"role":"user","content":"x"}],"tool_choice":"bogus"})",
      R"({"messages":[{"role":"user","content":"x"}],"chat_template_kwargs":{"enable_thinking":"false"}})",
      R"({"messages":[{"role":"user","content":[{"type":"text","text":"see"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}}]}]})",
      R"({"messages":[{"role":"user","content":"x"}],"n":2})",
  };
  for (const std::string& b : bad) {
    auto r = c.Post("/v1/chat/completions", b, "application/json");
    ASSERT_TRUE(r) << b;
    EXPECT_EQ(r->status, 400) << b << " -> " << r->body;
    expect_error(json::parse(r->body, nullptr, false), 400, "invalid_request_error");
  }
  // Unknown keys are ignored; text parts are joined.
  int status = 0;
  json ok = post_json(c, "/v1/chat/completions",
                      {{"messages", {{{"role", "user"}, {"content", {{{"type", "text"}, {"text", "Say"}}, {{"type", "text"}, {"text", "hello"}}}}}}},
                       {"x_unknown", {{"a", 1}}},
                       {"cache_prompt", true},
                       {"max_tokens", 2}},
                      &status);
  EXPECT_EQ(status, 200) << ok;
  // Too long for the context: 400 exceed_context_size_error, streamed or not.
  std::string longtext;
  for (int i = 0; i < 400; ++i) longtext += "word ";
  for (bool stream : {false, true}) {
    json e = post_json(c, "/v1/chat/completions", {{"messages", user_msgs(longtext)}, {"stream", stream}}, &status);
    EXPECT_EQ(status, 400);
    expect_error(e, 400, "exceed_context_size_error");
    EXPECT_GT(e["error"]["n_prompt_tokens"].get<int>(), 256);
    EXPECT_EQ(e["error"]["n_ctx"], 256);
  }
  // Over --max-body: 413 with the error shape.
  std::string huge = R"({"messages":[{"role":"user","content":")" + std::string(70 * 1024, 'a') + "\"}]}";
  auto big = c.Post("/v1/chat/completions", huge, "application/json");
  ASSERT_TRUE(big);
  EXPECT_EQ(big->status, 413);
  expect_error(json::parse(big->body, nullptr, false), 413, "invalid_request_error");
  // Still serving.
  EXPECT_EQ(c.Get("/health")->status, 200);
}

TEST(Server, ApiKey) {
  server::ServerOptions o;
  o.api_key = "sekrit";
  TestServer ts(o);
  auto c = ts.client();
  EXPECT_EQ(c.Get("/health")->status, 200);  // exempt
  auto no = c.Get("/v1/models");
  EXPECT_EQ(no->status, 401);
  expect_error(json::parse(no->body), 401, "authentication_error");
  EXPECT_EQ(c.Get("/props", {{"Authorization", "Bearer wrong"}})->status, 401);
  EXPECT_EQ(c.Get("/props", {{"Authorization", "Bearer sekrit"}})->status, 200);
  EXPECT_EQ(c.Get("/v1/models", {{"X-Api-Key", "sekrit"}})->status, 200);
  int status = 0;
  post_json(c, "/v1/chat/completions", {{"messages", user_msgs("Say hello")}}, &status);
  EXPECT_EQ(status, 401);
  post_json(c, "/v1/chat/completions", {{"messages", user_msgs("Say hello")}}, &status,
            {{"Authorization", "Bearer sekrit"}});
  EXPECT_EQ(status, 200);
}

TEST(Server, OneAtATimeBoundedQueueAndGetsWhileGenerating) {
  server::ServerOptions o;
  o.max_queue = 1;
  json script = {{"token_delay_ms", 10}, {"entries", json::array()}};
  TestServer ts(o, script, 1024);
  json slow = {{"messages", user_msgs("anything")}, {"max_tokens", 150}, {"seed", 1}};
  std::atomic<int> ok_count{0};
  std::thread a([&] {
    auto c = ts.client();
    int st = 0;
    post_json(c, "/v1/chat/completions", slow, &st);
    if (st == 200) ok_count++;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  std::thread b([&] {  // waits in the queue
    auto c = ts.client();
    int st = 0;
    post_json(c, "/v1/chat/completions", with(slow, {{"max_tokens", 5}}), &st);
    if (st == 200) ok_count++;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  auto c = ts.client();
  // Queue full: 503 with Retry-After.
  auto r = c.Post("/v1/chat/completions", slow.dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503);
  EXPECT_TRUE(r->has_header("Retry-After"));
  expect_error(json::parse(r->body), 503, "unavailable_error");
  // Metadata answers at once while the engine is busy.
  for (const char* path : {"/health", "/v1/models", "/props"}) {
    const auto t0 = std::chrono::steady_clock::now();
    auto g = c.Get(path);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    ASSERT_TRUE(g);
    EXPECT_EQ(g->status, 200) << path;
    EXPECT_LT(ms, 500.0) << path;
  }
  a.join();
  b.join();
  EXPECT_EQ(ok_count.load(), 2);
}

TEST(Server, PromptProgressInvariantsAndHeartbeats) {
  server::ServerOptions o;
  o.heartbeat_s = 1;
  json script = default_script();
  TestServer ts(o, script, 2048, 16);
  auto c = ts.client();
  std::string text = "Say hello.";
  for (int i = 0; i < 60; ++i) text += " More words to read.";
  json body = {{"stream", true}, {"return_progress", true}, {"messages", user_msgs(text)},
               {"stream_options", {{"include_usage", true}}}};
  // Twice: cold, then fully cached (an identical replay).
  for (int round = 0; round < 2; ++round) {
    Sse s = post_stream(c, body);
    std::vector<json> progress;
    for (const json& ch : s.chunks) {
      if (ch.contains("prompt_progress")) progress.push_back(ch["prompt_progress"]);
    }
    ASSERT_FALSE(progress.empty());
    const int total = progress[0]["total"], cache = progress[0]["cache"];
    EXPECT_EQ(progress[0]["processed"], cache);
    EXPECT_EQ(progress.back()["processed"], total);
    for (size_t i = 1; i < progress.size(); ++i) {
      EXPECT_EQ(progress[i]["total"], total);
      EXPECT_EQ(progress[i]["cache"], cache);
      EXPECT_GT(progress[i]["processed"].get<int>(), progress[i - 1]["processed"].get<int>());
    }
    const int n_tiles = (total - cache + 15) / 16;
    EXPECT_EQ(static_cast<int>(progress.size()), n_tiles + 1);
    EXPECT_EQ(s.chunks.back()["usage"]["prompt_tokens"], total);
    EXPECT_EQ(s.chunks.back()["usage"]["prompt_tokens_details"]["cached_tokens"], cache);
    if (round == 1) {
      EXPECT_EQ(cache, total);
    }
    EXPECT_EQ(s.content, "Hello there, friend!");
  }
  // Without return_progress: a comment after each prompt tile.
  body["return_progress"] = false;
  body["messages"] = user_msgs(text + " Again.");
  Sse s = post_stream(c, body);
  EXPECT_GE(s.comments.size(), 1u);
}

TEST(Server, KeepAliveCommentsDuringSlowTiles) {
  server::ServerOptions o;
  o.heartbeat_s = 1;
  json script = default_script();
  script["tile_delay_ms"] = 1600;
  TestServer ts(o, script, 1024, 256);
  auto c = ts.client();
  Sse s = post_stream(c, {{"stream", true}, {"messages", user_msgs("Say hello")}});
  bool keep_alive = false;
  for (const std::string& cm : s.comments) keep_alive |= cm.find("keep-alive") != std::string::npos;
  EXPECT_TRUE(keep_alive);
  EXPECT_EQ(s.content, "Hello there, friend!");
}

// Sends a raw streamed request and hangs up after reading `n_read` bytes (0: right away).
void hang_up_after(int port, const std::string& body, size_t n_read) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  std::string req = "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                    "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  ASSERT_EQ(send(fd, req.data(), req.size(), MSG_NOSIGNAL), static_cast<ssize_t>(req.size()));
  size_t got = 0;
  char buf[512];
  while (got < n_read) {
    const ssize_t n = recv(fd, buf, std::min(sizeof(buf), n_read - got), 0);
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  close(fd);
}

TEST(Server, HundredDisconnectsThenOutputEqualsFreshServer) {
  json script = {{"token_delay_ms", 0.2}, {"tile_delay_ms", 3}, {"entries", json::array()}};
  std::string story = "Tell a story.";
  for (int i = 0; i < 40; ++i) story += " Then something else happened.";
  json messages = user_msgs(story);
  json req = {{"stream", true}, {"messages", messages}, {"max_tokens", 40}, {"seed", 5}, {"temperature", 0.9}};
  const std::string body = req.dump();
  // The final request extends the disconnected ones' conversation, so it reuses their cache.
  json final_messages = messages;
  final_messages.push_back({{"role", "assistant"}, {"content", "Once upon a time."}});
  final_messages.push_back({{"role", "user"}, {"content", "Go on."}});
  json final_req = {{"messages", final_messages}, {"max_tokens", 30}, {"seed", 11}, {"temperature", 0.9}};

  std::string warm_text;
  {
    TestServer ts({}, script, 2048, 16);
    std::mt19937 rng(1234);
    for (int i = 0; i < 100; ++i) {
      // 0 bytes: gone before or during the prompt; a few hundred: inside the headers or the
      // first chunks; more: during generation.
      const size_t n = (i % 4 == 0) ? 0 : rng() % 3000;
      hang_up_after(ts.port(), body, n);
    }
    auto c = ts.client();
    EXPECT_EQ(c.Get("/health")->status, 200);
    int status = 0;
    json r = post_json(c, "/v1/chat/completions", final_req, &status);
    ASSERT_EQ(status, 200) << r;
    warm_text = r["choices"][0]["message"].dump();
    EXPECT_EQ(r["usage"]["completion_tokens"], 30);
  }
  TestServer fresh({}, script, 2048, 16);
  auto c = fresh.client();
  int status = 0;
  json r = post_json(c, "/v1/chat/completions", final_req, &status);
  ASSERT_EQ(status, 200);
  EXPECT_EQ(r["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  EXPECT_EQ(r["choices"][0]["message"].dump(), warm_text);
  EXPECT_EQ(r["usage"]["completion_tokens"], 30);
}

}  // namespace
}  // namespace gem::test
