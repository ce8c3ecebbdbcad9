// The llama-server drop-in surface over HTTP (issue 25), in process on the scripted backend:
// /props while the model loads, server-side request defaults, /metrics and /slots,
// /v1/completions, /tokenize, /detokenize, /apply-template, logprobs (streamed and not),
// response_format under random logits, reasoning_format and the reasoning budget, and bad input
// on every new path answered with a 4xx naming the field while the server keeps serving.
#include <cmath>
#include <random>

#include "chat/json_schema.h"
#include "server/server_harness.h"

namespace gem::test {
namespace {

using nlohmann::json;

json post_json(httplib::Client& c, const std::string& path, const json& body, int* status) {
  auto r = c.Post(path.c_str(), body.dump(), "application/json");
  if (!r) {
    *status = -1;
    return json();
  }
  *status = r->status;
  return json::parse(r->body, nullptr, false);
}

json post_raw(httplib::Client& c, const std::string& path, const std::string& body, int* status) {
  auto r = c.Post(path.c_str(), body, "application/json");
  if (!r) {
    *status = -1;
    return json();
  }
  *status = r->status;
  return json::parse(r->body, nullptr, false);
}

Sse post_stream(httplib::Client& c, const std::string& path, const json& body) {
  auto r = c.Post(path.c_str(), body.dump(), "application/json");
  EXPECT_TRUE(r) << "no response";
  if (!r) return {};
  EXPECT_EQ(r->status, 200) << r->body;
  return parse_sse(r->body);
}

// A script without a match: the backend's logits are a pseudo-random function of the history,
// so constrained decoding meets "a random model".
json random_script() { return {{"entries", json::array()}}; }

TEST(Dropin, PropsAnswersWhileLoadingWithALoadingFlag) {
  server::ServerOptions o;
  o.n_ctx = 0;  // as gem serve without -c: unknown until the header is read
  TestServer ts(o, default_script(), 1024, 16, /*load=*/false);
  auto c = ts.client();
  auto p = c.Get("/props");
  ASSERT_TRUE(p);
  EXPECT_EQ(p->status, 200) << p->body;
  json props = json::parse(p->body);
  EXPECT_EQ(props["is_loading"], true);
  EXPECT_EQ(props["model_alias"], "gem-test");
  EXPECT_NE(props["model_path"].get<std::string>().find(".gguf"), std::string::npos);
  EXPECT_EQ(props["modalities"]["vision"], false);
  EXPECT_FALSE(props["default_generation_settings"].contains("n_ctx")) << "not known yet";
  // The GGUF header is read: context and template are known while the weights still load.
  server::ModelInfo info;
  info.n_ctx = 1024;
  info.chat_template = "{{ header template }}";
  info.temperature = 0.5f;
  ts.server().set_model_info(info);
  props = json::parse(c.Get("/props")->body);
  EXPECT_EQ(props["is_loading"], true);
  EXPECT_EQ(props["default_generation_settings"]["n_ctx"], 1024);
  EXPECT_EQ(props["chat_template"], "{{ header template }}");
  EXPECT_DOUBLE_EQ(props["default_generation_settings"]["params"]["temperature"].get<double>(), 0.5);
  EXPECT_EQ(json::parse(c.Get("/v1/models")->body)["data"][0]["meta"]["n_ctx"], 1024);
  // /health keeps llama-server's 503 while loading; so do the model's routes.
  EXPECT_EQ(c.Get("/health")->status, 503);
  int status = 0;
  post_json(c, "/tokenize", {{"content", "hi"}}, &status);
  EXPECT_EQ(status, 503);
  post_json(c, "/v1/completions", {{"prompt", "hi"}}, &status);
  EXPECT_EQ(status, 503);
  ts.load(1024, 16);
  props = json::parse(c.Get("/props")->body);
  EXPECT_EQ(props["is_loading"], false);
  EXPECT_EQ(c.Get("/health")->status, 200);
}

TEST(Dropin, ServerDefaultsApplyToRequestsThatLeaveFieldsOut) {
  server::ServerOptions o;
  o.n_predict = 3;
  o.sampling.temperature = 0.25f;
  o.sampling.top_k = 9;
  o.sampling.seed = 1234;
  o.reasoning_format = server::ReasoningFormat::kNone;
  TestServer ts(o);
  auto c = ts.client();
  json props = json::parse(c.Get("/props")->body);
  const json& params = props["default_generation_settings"]["params"];
  EXPECT_DOUBLE_EQ(params["temperature"].get<double>(), 0.25);
  EXPECT_EQ(params["top_k"], 9);
  EXPECT_EQ(params["seed"], 1234);
  EXPECT_EQ(params["n_predict"], 3);
  EXPECT_EQ(params["reasoning_format"], "none");
  int status = 0;
  // -n 3: three tokens, finish "length".
  json r = post_json(c, "/v1/chat/completions", {{"messages", user_msgs("Count")}}, &status);
  ASSERT_EQ(status, 200) << r;
  EXPECT_EQ(r["usage"]["completion_tokens"], 3);
  EXPECT_EQ(r["choices"][0]["finish_reason"], "length");
  // The request's own max_tokens wins.
  r = post_json(c, "/v1/chat/completions", {{"messages", user_msgs("Count")}, {"max_tokens", 5}}, &status);
  EXPECT_EQ(r["usage"]["completion_tokens"], 5);
  // reasoning_format none: the thought stays in the content with its markers.
  r = post_json(c, "/v1/chat/completions", {{"messages", user_msgs("Say hello")}, {"max_tokens", 40}}, &status);
  ASSERT_EQ(status, 200) << r;
  EXPECT_FALSE(r["choices"][0]["message"].contains("reasoning_content")) << r;
  EXPECT_EQ(r["choices"][0]["message"]["content"],
            "<|channel>thought\nThe user greets me.<channel|>Hello there, friend!");
  // ... and per request: deepseek-legacy gives both.
  r = post_json(c, "/v1/chat/completions",
                {{"messages", user_msgs("Say hello")}, {"max_tokens", 40}, {"reasoning_format", "deepseek-legacy"}},
                &status);
  EXPECT_EQ(r["choices"][0]["message"]["reasoning_content"], "The user greets me.");
  EXPECT_EQ(r["choices"][0]["message"]["content"],
            "<|channel>thought\nThe user greets me.<channel|>Hello there, friend!");
  r = post_json(c, "/v1/chat/completions",
                {{"messages", user_msgs("Say hello")}, {"max_tokens", 40}, {"reasoning_format", "auto"}}, &status);
  EXPECT_EQ(r["choices"][0]["message"]["content"], "Hello there, friend!");
}

TEST(Dropin, ReasoningBudgetClosesTheThought) {
  server::ServerOptions o;
  o.reasoning_budget = 2;
  // A long thought: the budget forces <channel|> after two thought tokens.
  json script = {{"entries", {{{"match", "Think"},
                               {"output", "<|channel>thought\none two three four five six<channel|>Done.<turn|>"}}}}};
  TestServer ts(o, script);
  auto c = ts.client();
  int status = 0;
  json r = post_json(c, "/v1/chat/completions", {{"messages", user_msgs("Think")}, {"max_tokens", 12}}, &status);
  ASSERT_EQ(status, 200) << r;
  const std::string reasoning = r["choices"][0]["message"].value("reasoning_content", "");
  EXPECT_EQ(reasoning, "one two") << r;  // two tokens after the "thought\n" header
  // A request budget of 0 turns thinking off: the prompt ends with the empty thought channel.
  json t = post_json(c, "/apply-template", {{"messages", user_msgs("hi")}, {"reasoning_budget_tokens", 0}}, &status);
  ASSERT_EQ(status, 200) << t;
  const std::string prompt = t["prompt"];
  EXPECT_NE(prompt.find("<|channel>thought\n<channel|>"), std::string::npos) << prompt;
}

TEST(Dropin, MetricsAndSlots) {
  server::ServerOptions o;
  o.metrics = true;
  TestServer ts(o);
  auto c = ts.client();
  int status = 0;
  post_json(c, "/v1/chat/completions", {{"messages", user_msgs("Count")}, {"max_tokens", 4}}, &status);
  ASSERT_EQ(status, 200);
  auto m = c.Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->status, 200);
  EXPECT_NE(m->get_header_value("Content-Type").find("text/plain"), std::string::npos);
  for (const char* name : {"llamacpp:prompt_tokens_total", "llamacpp:prompt_seconds_total",
                           "llamacpp:tokens_predicted_total", "llamacpp:tokens_predicted_seconds_total",
                           "llamacpp:n_decode_total", "llamacpp:n_tokens_max",
                           "llamacpp:prompt_tokens_seconds", "llamacpp:predicted_tokens_seconds",
                           "llamacpp:requests_processing", "llamacpp:requests_deferred"}) {
    EXPECT_NE(m->body.find(std::string("# TYPE ") + name), std::string::npos) << name;
  }
  EXPECT_NE(m->body.find("llamacpp:tokens_predicted_total 4\n"), std::string::npos) << m->body;
  auto s = c.Get("/slots");
  ASSERT_TRUE(s);
  EXPECT_EQ(s->status, 200);
  json slots = json::parse(s->body);
  ASSERT_EQ(slots.size(), 1u);
  EXPECT_EQ(slots[0]["id"], 0);
  EXPECT_EQ(slots[0]["n_ctx"], 1024);
  EXPECT_EQ(slots[0]["is_processing"], false);
  EXPECT_EQ(slots[0]["next_token"][0]["n_decoded"], 4);
  EXPECT_EQ(c.Get("/slots?fail_on_no_slot=1")->status, 200);
  // llama-server's slot actions: refused (501, as llama-server without --slot-save-path), saying
  // why, not a 404.
  for (const char* action : {"save", "restore", "erase"}) {
    auto a = c.Post((std::string("/slots/0?action=") + action).c_str(), R"({"filename":"s.bin"})",
                    "application/json");
    ASSERT_TRUE(a);
    EXPECT_EQ(a->status, 501) << action;
    const json e = json::parse(a->body)["error"];
    EXPECT_EQ(e["type"], "not_supported_error") << action;
    EXPECT_NE(e["message"].get<std::string>().find("slots action"), std::string::npos) << action;
  }

  // Switched off: 501 with an error naming the flag.
  server::ServerOptions off;
  off.slots = false;
  TestServer ts2(off);
  auto c2 = ts2.client();
  auto m2 = c2.Get("/metrics");
  EXPECT_EQ(m2->status, 501);
  EXPECT_NE(json::parse(m2->body)["error"]["message"].get<std::string>().find("--metrics"), std::string::npos);
  auto s2 = c2.Get("/slots");
  EXPECT_EQ(s2->status, 501);
  EXPECT_EQ(json::parse(s2->body)["error"]["type"], "not_supported_error");
}

TEST(Dropin, TextCompletions) {
  json script = {{"entries", {{{"match", "Once upon"}, {"output", " a time there was a cat.<eos>"}}}}};
  TestServer ts({}, script);
  auto c = ts.client();
  int status = 0;
  for (const char* path : {"/v1/completions", "/completions"}) {
    json r = post_json(c, path, {{"prompt", "Once upon"}, {"max_tokens", 20}}, &status);
    ASSERT_EQ(status, 200) << r;
    EXPECT_EQ(r["object"], "text_completion");
    EXPECT_EQ(r["choices"][0]["text"], " a time there was a cat.");
    EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
    EXPECT_TRUE(r["choices"][0]["logprobs"].is_null());
    EXPECT_NE(r["id"].get<std::string>().find("cmpl-"), std::string::npos);
    EXPECT_GT(r["usage"]["prompt_tokens"].get<int>(), 1);
  }
  // Token ids as the prompt (<bos> "Once upon" as ids), a stop string, max_tokens.
  json ids = json::parse(c.Post("/tokenize", R"({"content":"Once upon","add_special":true})", "application/json")->body)["tokens"];
  json r = post_json(c, "/v1/completions", {{"prompt", ids}, {"max_tokens", 20}, {"stop", "cat"}}, &status);
  ASSERT_EQ(status, 200) << r;
  EXPECT_EQ(r["choices"][0]["text"], " a time there was a ");
  EXPECT_EQ(r["usage"]["prompt_tokens"], ids.size());
  r = post_json(c, "/v1/completions", {{"prompt", "Once upon"}, {"max_tokens", 2}}, &status);
  EXPECT_EQ(r["choices"][0]["finish_reason"], "length");
  // Streamed: text chunks, a finish chunk with usage, [DONE].
  Sse s = post_stream(c, "/v1/completions", {{"prompt", "Once upon"}, {"stream", true}, {"max_tokens", 20}});
  EXPECT_TRUE(s.done);
  std::string text;
  json last;
  for (const json& ch : s.chunks) {
    ASSERT_EQ(ch["object"], "text_completion") << ch;
    if (!ch["choices"].empty()) {
      text += ch["choices"][0]["text"].get<std::string>();
      last = ch;
    }
  }
  EXPECT_EQ(text, " a time there was a cat.");
  EXPECT_EQ(last["choices"][0]["finish_reason"], "stop");
  EXPECT_TRUE(last.contains("usage"));
  // logprobs as a count of alternatives.
  r = post_json(c, "/v1/completions", {{"prompt", "Once upon"}, {"max_tokens", 20}, {"logprobs", 2}}, &status);
  ASSERT_EQ(status, 200) << r;
  std::string joined;
  for (const json& e : r["choices"][0]["logprobs"]["content"]) {
    joined += e["token"].get<std::string>();
    EXPECT_EQ(e["top_logprobs"].size(), 2u);
  }
  EXPECT_EQ(joined, r["choices"][0]["text"]);
}

TEST(Dropin, TokenizeDetokenizeApplyTemplate) {
  TestServer ts;
  auto c = ts.client();
  int status = 0;
  json t = post_json(c, "/tokenize", {{"content", "Hello world"}}, &status);
  ASSERT_EQ(status, 200) << t;
  ASSERT_TRUE(t["tokens"].is_array());
  ASSERT_FALSE(t["tokens"].empty());
  EXPECT_TRUE(t["tokens"][0].is_number_integer());
  json with_bos = post_json(c, "/tokenize", {{"content", "Hello world"}, {"add_special", true}}, &status);
  EXPECT_EQ(with_bos["tokens"][0], 2);  // <bos>
  EXPECT_EQ(with_bos["tokens"].size(), t["tokens"].size() + 1);
  json pieces = post_json(c, "/tokenize", {{"content", "Hello world"}, {"with_pieces", true}}, &status);
  std::string joined;
  for (const json& p : pieces["tokens"]) joined += p["piece"].get<std::string>();
  EXPECT_EQ(joined, "Hello world");
  // Special tokens written in the text are parsed unless parse_special is false.
  json sp = post_json(c, "/tokenize", {{"content", "<turn|>"}}, &status);
  EXPECT_EQ(sp["tokens"], json::array({106}));
  sp = post_json(c, "/tokenize", {{"content", "<turn|>"}, {"parse_special", false}}, &status);
  EXPECT_GT(sp["tokens"].size(), 1u);
  json d = post_json(c, "/detokenize", {{"tokens", t["tokens"]}}, &status);
  ASSERT_EQ(status, 200) << d;
  EXPECT_EQ(d["content"], "Hello world");
  EXPECT_EQ(post_json(c, "/detokenize", json::object(), &status)["content"], "");
  json a = post_json(c, "/apply-template", {{"messages", user_msgs("Hi there")}}, &status);
  ASSERT_EQ(status, 200) << a;
  EXPECT_EQ(a["prompt"], "<bos><|turn>system\n<|think|>\n<turn|>\n<|turn>user\nHi there<turn|>\n<|turn>model\n");
  a = post_json(c, "/apply-template",
                {{"messages", user_msgs("Hi there")}, {"chat_template_kwargs", {{"enable_thinking", false}}}}, &status);
  EXPECT_EQ(a["prompt"], "<bos><|turn>user\nHi there<turn|>\n<|turn>model\n<|channel>thought\n<channel|>");
}

// The tokens' text of every logprobs entry, joined.
std::string join_tokens(const json& entries) {
  std::string s;
  for (const json& e : entries) s += e["token"].get<std::string>();
  return s;
}

void expect_entry_shape(const json& e, size_t top) {
  ASSERT_TRUE(e["id"].is_number_integer()) << e;
  ASSERT_TRUE(e["token"].is_string()) << e;
  ASSERT_TRUE(e["bytes"].is_array()) << e;
  ASSERT_TRUE(e["logprob"].is_number()) << e;
  EXPECT_LE(e["logprob"].get<double>(), 1e-9) << e;
  ASSERT_EQ(e["top_logprobs"].size(), top) << e;
  for (size_t i = 1; i < top; ++i) {
    EXPECT_GE(e["top_logprobs"][i - 1]["logprob"].get<double>(), e["top_logprobs"][i]["logprob"].get<double>());
  }
}

TEST(Dropin, LogprobsStreamedAndNot) {
  TestServer ts;
  auto c = ts.client();
  int status = 0;
  json r = post_json(c, "/v1/chat/completions",
                     {{"messages", user_msgs("Say hello")}, {"logprobs", true}, {"top_logprobs", 3}}, &status);
  ASSERT_EQ(status, 200) << r;
  const json& content = r["choices"][0]["logprobs"]["content"];
  ASSERT_FALSE(content.empty()) << r;
  // Only the answer's tokens: they join to the content (the reasoning is not in them).
  EXPECT_EQ(join_tokens(content), r["choices"][0]["message"]["content"]);
  for (const json& e : content) {
    expect_entry_shape(e, 3);
    // The scripted backend puts all the mass on the drawn token.
    EXPECT_NEAR(e["logprob"].get<double>(), 0.0, 1e-6);
    EXPECT_EQ(e["top_logprobs"][0]["id"], e["id"]);
  }
  // Streamed: each content chunk carries the entries of its tokens.
  Sse s = post_stream(c, "/v1/chat/completions",
                      {{"messages", user_msgs("Say hello")}, {"stream", true}, {"logprobs", true}});
  json entries = json::array();
  for (const json& ch : s.chunks) {
    if (ch["choices"].empty() || !ch["choices"][0].contains("logprobs")) continue;
    for (const json& e : ch["choices"][0]["logprobs"]["content"]) {
      expect_entry_shape(e, 0);
      entries.push_back(e);
    }
  }
  EXPECT_EQ(join_tokens(entries), s.content);
  EXPECT_EQ(s.content, "Hello there, friend!");
  // Random logits: the log-probabilities are a proper distribution's.
  TestServer rnd({}, random_script());
  auto c2 = rnd.client();
  r = post_json(c2, "/v1/chat/completions",
                {{"messages", user_msgs("anything")}, {"logprobs", true}, {"top_logprobs", 5}, {"max_tokens", 6},
                 {"chat_template_kwargs", {{"enable_thinking", false}}}},
                &status);
  ASSERT_EQ(status, 200) << r;
  for (const json& e : r["choices"][0]["logprobs"]["content"]) {
    expect_entry_shape(e, 5);
    double mass = 0;
    for (const json& a : e["top_logprobs"]) mass += std::exp(a["logprob"].get<double>());
    EXPECT_LT(mass, 1.0 + 1e-6);
    EXPECT_GT(e["logprob"].get<double>(), -30.0);
  }
}

// The output of a random model under response_format parses and follows the schema.
TEST(Dropin, ResponseFormatUnderRandomLogits) {
  TestServer ts({}, random_script(), 2048);
  auto c = ts.client();
  const std::string schema = R"({"type":"object","properties":{"name":{"type":"string","maxLength":20},
      "age":{"type":"integer"},"ok":{"type":"boolean"},"tags":{"type":"array","items":{"enum":["a","b"]},"maxItems":3}},
      "required":["name","age","ok"],"additionalProperties":false})";
  for (int i = 0; i < 3; ++i) {
    for (bool stream : {false, true}) {
      for (int max_tokens : {12, 40, 200}) {
        const std::string body = R"({"messages":[{"role":"user","content":"random )" + std::to_string(i) +
                                 R"("}],"max_tokens":)" + std::to_string(max_tokens) +
                                 R"(,"stream":)" + (stream ? "true" : "false") +
                                 R"(,"response_format":{"type":"json_schema","json_schema":{"name":"p","schema":)" +
                                 schema + "}}}";
        std::string text;
        if (stream) {
          auto r = c.Post("/v1/chat/completions", body, "application/json");
          ASSERT_TRUE(r);
          ASSERT_EQ(r->status, 200) << r->body;
          text = parse_sse(r->body).content;
        } else {
          int status = 0;
          json r = post_raw(c, "/v1/chat/completions", body, &status);
          ASSERT_EQ(status, 200) << r;
          EXPECT_EQ(r["choices"][0]["finish_reason"], "stop") << r;
          text = r["choices"][0]["message"]["content"];
        }
        json v = json::parse(text, nullptr, false);
        ASSERT_FALSE(v.is_discarded()) << "max_tokens " << max_tokens << ": " << text;
        ASSERT_TRUE(v.is_object()) << text;
        EXPECT_TRUE(v["name"].is_string()) << text;
        EXPECT_TRUE(v["age"].is_number_integer()) << text;
        EXPECT_TRUE(v["ok"].is_boolean()) << text;
        for (auto it = v.begin(); it != v.end(); ++it) {
          EXPECT_TRUE(it.key() == "name" || it.key() == "age" || it.key() == "ok" || it.key() == "tags") << text;
        }
      }
    }
  }
  // json_object: any object.
  int status = 0;
  json r = post_json(c, "/v1/chat/completions",
                     {{"messages", user_msgs("random object")}, {"max_tokens", 30},
                      {"response_format", {{"type", "json_object"}}}},
                     &status);
  ASSERT_EQ(status, 200) << r;
  json v = json::parse(r["choices"][0]["message"]["content"].get<std::string>(), nullptr, false);
  EXPECT_TRUE(v.is_object()) << r;
}

// Every new path answers bad input with a 4xx naming the field, and the server keeps serving.
TEST(Dropin, BadInputOnNewPathsIs4xxAndTheServerKeepsServing) {
  server::ServerOptions o;
  o.metrics = true;
  TestServer ts(o);
  auto c = ts.client();
  const struct {
    const char* path;
    std::string body;
    const char* expected;
  } bad[] = {
      {"/tokenize", R"({"content":5})", "content: expected a string, got a number"},
      {"/tokenize", R"({"content":"x","with_pieces":"yes"})", "with_pieces: expected true or false"},
      {"/tokenize", R"({"content":"x","add_special":1})", "add_special: expected true or false"},
      {"/tokenize", R"([1])", "the request body: expected a JSON object"},
      {"/tokenize", "{", "expected JSON"},
      {"/detokenize", R"({"tokens":"abc"})", "tokens: expected an array of token ids, got a string"},
      {"/detokenize", R"({"tokens":[1,"a"]})", "tokens[1]: expected a token id (an integer), got a string"},
      {"/detokenize", R"({"tokens":[1,99999999999]})", "tokens[1]: expected a token id in [0, 262144)"},
      {"/detokenize", R"({"tokens":[-1]})", "tokens[0]: expected a token id in [0, 262144), got -1"},
      {"/apply-template", R"({"messages":"hi"})", "messages: expected an array"},
      {"/apply-template", R"({})", "messages: expected an array of messages (the field is required)"},
      {"/v1/completions", R"({"prompt":{"a":1}})", "prompt: expected a string or an array of token ids"},
      {"/v1/completions", R"({"prompt":[1,300000]})", "prompt[1]: expected a token id in [0, 262144), got 300000"},
      {"/v1/completions", R"({"prompt":"x","max_tokens":-7})", "max_tokens: expected an integer in [-1,"},
      {"/v1/completions", R"({"prompt":"x","stream":1})", "stream: expected true or false"},
      {"/v1/completions", R"({"prompt":"x","logprobs":-1})", "logprobs: expected an integer in [0, 20], got -1"},
      {"/v1/chat/completions", R"({"messages":[{"role":"user","content":"x"}],"logprobs":true,"top_logprobs":1000})",
       "top_logprobs: expected an integer in [0, 20], got 1000"},
      {"/v1/chat/completions",
       R"({"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema","json_schema":{"schema":{"type":"string","pattern":"(a)\\1"}}}})",
       "response_format.json_schema.schema.pattern: backreferences are not supported"},
      {"/v1/chat/completions",
       R"({"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema","json_schema":{"schema":{"type":"integer","minimum":10,"maximum":"x"}}}})",
       "response_format.json_schema.schema.maximum: expected a number, got a string"},
      {"/v1/chat/completions",
       R"({"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema","json_schema":{"schema":{"oneOf":[{"type":"number"},{"type":"integer"}]}}}})",
       "response_format.json_schema.schema.oneOf: options 0 and 1 may both match"},
      {"/v1/chat/completions",
       R"({"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema","json_schema":{"schema":{"type":"string","format":"iri"}}}})",
       "response_format.json_schema.schema.format: the format \"iri\" is not supported"},
      {"/v1/chat/completions",
       R"({"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_schema","json_schema":{"schema":{"anyOf":"x"}}}})",
       "response_format.json_schema.schema.anyOf: expected a non-empty array of schemas, got a string"},
      {"/v1/chat/completions", R"({"messages":[{"role":"user","content":"x"}],"n":2})", "n: expected 1"},
  };
  for (const auto& b : bad) {
    int status = 0;
    json e = post_raw(c, b.path, b.body, &status);
    EXPECT_EQ(status, 400) << b.path << " " << b.body;
    ASSERT_TRUE(e.is_object() && e.contains("error")) << b.path << " " << b.body << " -> " << e;
    EXPECT_NE(e["error"]["message"].get<std::string>().find(b.expected), std::string::npos)
        << b.path << " " << b.body << " -> " << e["error"]["message"];
  }
  // A deeply nested body and a huge schema are refused by their bounds.
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  int status = 0;
  post_raw(c, "/tokenize", R"({"content":)" + deep + "}", &status);
  EXPECT_EQ(status, 400);
  json props = json::object();
  for (int i = 0; i < 2000; ++i) {
    std::string name = "k";
    name += std::to_string(i);
    props[name] = {{"enum", json::array({1, 2})}};
  }
  post_json(c, "/v1/chat/completions",
            {{"messages", user_msgs("x")},
             {"response_format", {{"type", "json_schema"}, {"json_schema", {{"schema", {{"properties", props}}}}}}}},
            &status);
  EXPECT_EQ(status, 400);
  // Wrong methods.
  EXPECT_EQ(c.Get("/tokenize")->status, 405);
  EXPECT_EQ(c.Post("/metrics", "", "text/plain")->status, 405);
  // Still serving.
  json ok = post_json(c, "/v1/chat/completions", {{"messages", user_msgs("Say hello")}}, &status);
  EXPECT_EQ(status, 200) << ok;
  EXPECT_EQ(ok["choices"][0]["message"]["content"], "Hello there, friend!");
  EXPECT_EQ(c.Get("/metrics")->status, 200);
}

}  // namespace
}  // namespace gem::test
