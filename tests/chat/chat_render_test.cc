// Chat formatting: gem's native renderer against the official template rendered by python3
// jinja2 (render_jinja.py) on every case of tests/chat/corpus, byte for byte; plus the inputs
// gem refuses, each with a message naming the problem.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "chat/chat.h"
#include "chat/validate.h"
#include "chat/chat_test_util.h"
#include "common/test_util.h"

namespace gem::chat {
namespace {

using json = nlohmann::json;

std::string template_path() {
  return test::fixture("chat/google-gemma-4-31B-it.jinja");
}

using test_util::corpus_files;

// Runs render_jinja.py once over all files; returns {path: rendered}.
json render_with_jinja(const std::vector<std::string>& files) {
  // Debian's python3 (where scripts/setup.sh installs python3-jinja2) before whatever is on PATH.
  std::string cmd = test::file_exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3";
  cmd += " '" + test::source_dir() + "/tests/chat/render_jinja.py' '" + template_path() + "'";
  for (const std::string& f : files) cmd += " '" + f + "'";
  FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) return json();
  std::string out;
  char buf[65536];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), pipe)) > 0) out.append(buf, n);
  const int rc = pclose(pipe);
  if (rc != 0) return json();
  return json::parse(out, nullptr, false);
}

std::string escaped(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else {
      out += c;
    }
  }
  return out;
}

// "" when equal, else the first differing byte offset with context from both sides.
std::string first_difference(const std::string& expected, const std::string& actual) {
  if (expected == actual) return "";
  size_t i = 0;
  while (i < expected.size() && i < actual.size() && expected[i] == actual[i]) ++i;
  const size_t from = i > 60 ? i - 60 : 0;
  return "first difference at byte " + std::to_string(i) + " (lengths " +
         std::to_string(expected.size()) + " vs " + std::to_string(actual.size()) + ")\n" +
         "  jinja: ..." + escaped(expected.substr(from, 140)) + "\n" +
         "  gem:   ..." + escaped(actual.substr(from, 140));
}

TEST(ChatRender, CorpusMatchesJinjaByteForByte) {
  GEM_REQUIRE_FIXTURE(template_path());
  const std::vector<std::string> files = corpus_files();
  ASSERT_GE(files.size(), 50u) << "the corpus should hold at least 50 conversations";
  const json expected = render_with_jinja(files);
  ASSERT_TRUE(expected.is_object()) << "render_jinja.py failed (python3 with jinja2 on PATH?)";
  int n_equal = 0;
  for (const std::string& f : files) {
    const json c = json::parse(test::read_text(f));
    RenderOptions opt;
    opt.add_generation_prompt = c.value("add_generation_prompt", true);
    opt.enable_thinking = c.value("enable_thinking", false);
    const json tools = c.contains("tools") ? c["tools"] : json();
    auto r = render(c["messages"], tools, opt);
    ASSERT_TRUE(expected.contains(f)) << f;
    if (!r.ok()) {
      ADD_FAILURE() << f << ": gem refused: " << r.message();
      continue;
    }
    const std::string diff = first_difference(expected[f].get<std::string>(), *r);
    if (diff.empty()) {
      ++n_equal;
    } else {
      ADD_FAILURE() << f << ": " << diff;
    }
  }
  EXPECT_EQ(n_equal, static_cast<int>(files.size()));
}

// The generation prefix is exactly the tail the template appended.
TEST(ChatRender, GenerationPrefix) {
  const json user = json::parse(R"([{"role":"user","content":"Hi"}])");
  RenderOptions off;
  EXPECT_EQ(generation_prefix(user, off), "<|turn>model\n<|channel>thought\n<channel|>");
  RenderOptions on;
  on.enable_thinking = true;
  EXPECT_EQ(generation_prefix(user, on), "<|turn>model\n");
  const json after_tool = json::parse(R"([{"role":"user","content":"q"},
    {"role":"assistant","tool_calls":[{"id":"a","function":{"name":"f","arguments":"{}"}}]},
    {"role":"tool","tool_call_id":"a","content":"r"}])");
  EXPECT_EQ(generation_prefix(after_tool, off), "");
  const json pending = json::parse(R"([{"role":"user","content":"q"},
    {"role":"assistant","tool_calls":[{"id":"a","function":{"name":"f","arguments":{}}}]}])");
  EXPECT_EQ(generation_prefix(pending, off), "");
  // Every prefix is the suffix of the full render.
  for (const json* m : {&user, &after_tool}) {
    for (const RenderOptions* o : {&off, &on}) {
      auto r = render(*m, json(), *o);
      ASSERT_TRUE(r.ok()) << r.message();
      const std::string p = generation_prefix(*m, *o);
      ASSERT_GE(r->size(), p.size());
      EXPECT_EQ(r->substr(r->size() - p.size()), p);
    }
  }
}

// An assistant message with text after its tool results closes the model turn; with
// reopen_model_turn the server gets a fresh model turn (llama.cpp's fix), otherwise nothing.
TEST(ChatRender, ReopenModelTurn) {
  const json msgs = json::parse(R"([{"role":"user","content":"run"},
    {"role":"assistant","content":"Running.","tool_calls":[{"id":"a","function":{"name":"bash","arguments":"{\"command\":\"ls\"}"}}]},
    {"role":"tool","tool_call_id":"a","content":"ok"}])");
  RenderOptions opt;
  auto exact = render(msgs, json(), opt);
  ASSERT_TRUE(exact.ok()) << exact.message();
  EXPECT_TRUE(exact->ends_with("<tool_response|>Running.<turn|>\n")) << *exact;
  EXPECT_EQ(generation_prefix(msgs, opt), "");
  opt.reopen_model_turn = true;
  auto reopened = render(msgs, json(), opt);
  ASSERT_TRUE(reopened.ok());
  EXPECT_EQ(*reopened, *exact + "<|turn>model\n<|channel>thought\n<channel|>");
  EXPECT_EQ(generation_prefix(msgs, opt), "<|turn>model\n<|channel>thought\n<channel|>");
  opt.enable_thinking = true;
  EXPECT_EQ(generation_prefix(msgs, opt), "<|turn>model\n");
  // Without text after the results the model turn stays open: nothing to reopen.
  const json open = json::parse(R"([{"role":"user","content":"run"},
    {"role":"assistant","content":null,"tool_calls":[{"id":"a","function":{"name":"bash","arguments":"{}"}}]},
    {"role":"tool","tool_call_id":"a","content":"ok"}])");
  EXPECT_EQ(generation_prefix(open, opt), "");
}

TEST(ChatRender, BosTextOptional) {
  const json user = json::parse(R"([{"role":"user","content":"Hello!"}])");
  RenderOptions opt;
  opt.emit_bos_text = false;
  auto r = render(user, json(), opt);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, "<|turn>user\nHello!<turn|>\n<|turn>model\n<|channel>thought\n<channel|>");
}

struct ErrorCase {
  const char* name;
  const char* messages;
  const char* tools;
  const char* expected;  // a substring of the message
};

TEST(ChatRender, RefusedInputNamesTheProblem) {
  const ErrorCase cases[] = {
      {"messages not an array", R"({"role":"user"})", "null", "messages: expected an array"},
      {"no messages", "[]", "null", "at least one message"},
      {"unknown role", R"([{"role":"narrator","content":"x"}])", "null",
       "messages[0].role: expected system, developer, user, assistant or tool, got \"narrator\""},
      {"role missing", R"([{"content":"x"}])", "null",
       "messages[0].role: expected system, developer, user, assistant or tool, got nothing"},
      {"content a number", R"([{"role":"user","content":42}])", "null",
       "messages[0].content: expected a string, null or an array of text parts, got a number"},
      {"content an object", R"([{"role":"user","content":{"text":"x"}}])", "null",
       "messages[0].content: expected a string, null or an array of text parts, got an object"},
      {"image part", R"([{"role":"user","content":[{"type":"text","text":"see"},{"type":"image_url","image_url":{"url":"data:"}}]}])",
       "null", "messages[0].content[1].type: expected \"text\", got \"image_url\": image input is not supported"},
      {"audio part", R"([{"role":"user","content":[{"type":"input_audio","input_audio":{}}]}])", "null",
       "messages[0].content[0].type: expected \"text\", got \"input_audio\": audio input is not supported"},
      {"image part in a tool result", R"([{"role":"user","content":"q"},{"role":"assistant","tool_calls":[{"id":"a","function":{"name":"f"}}]},{"role":"tool","tool_call_id":"a","content":[{"type":"image","image":"x"}]}])",
       "null", "messages[2].content[0].type: expected \"text\", got \"image\""},
      {"text part without text", R"([{"role":"user","content":[{"type":"text"}]}])", "null",
       "messages[0].content[0].text: expected a string, got nothing"},
      {"system without content", R"([{"role":"system","content":null},{"role":"user","content":"q"}])",
       "null", "messages[0].content: expected a string or an array of text parts (a system message needs content), got null"},
      {"user without content", R"([{"role":"user"}])", "null",
       "messages[0].content: expected a string or an array of text parts (a user message needs content), got nothing"},
      {"tool result without content", R"([{"role":"user","content":"q"},{"role":"assistant","tool_calls":[{"id":"a","function":{"name":"f"}}]},{"role":"tool","tool_call_id":"a","content":null}])",
       "null", "messages[2].content: expected a string or an array of text parts (a tool message needs content), got null"},
      {"part type missing", R"([{"role":"user","content":[{"text":"x"}]}])", "null",
       "messages[0].content[0].type: expected a string (\"text\"), got nothing"},
      {"function name with a space", R"([{"role":"user","content":"q"}])", R"([{"type":"function","function":{"name":"get weather"}}])",
       "tools[0].function.name: expected a name without whitespace or any of , : { } [ ] (the Gemma 4 call syntax ends a name there), got \"get weather\""},
      {"tools not an array", R"([{"role":"user","content":"q"}])", R"({"type":"function"})",
       "tools: expected an array of tool objects, got an object"},
      {"function without name", R"([{"role":"user","content":"q"}])", R"([{"type":"function","function":{"description":"d"}}])",
       "tools[0].function.name: expected a non-empty string, got nothing"},
      {"tool without function", R"([{"role":"user","content":"q"}])", R"([{"type":"function"}])",
       "tools[0].function: expected a function object, got nothing"},
      {"non-function tool", R"([{"role":"user","content":"q"}])", R"([{"type":"retrieval","function":{"name":"f"}}])",
       "tools[0].type: expected \"function\" (only function tools are supported), got \"retrieval\""},
      {"parameters not an object", R"([{"role":"user","content":"q"}])", R"([{"type":"function","function":{"name":"f","parameters":"string"}}])",
       "tools[0].function.parameters: expected a JSON schema object, got a string"},
      {"properties not an object", R"([{"role":"user","content":"q"}])", R"([{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":["a"]}}}])",
       "tools[0].function.parameters.properties: expected an object of property schemas, got an array"},
      {"property schema not an object", R"([{"role":"user","content":"q"}])", R"([{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"a":"string"}}}}])",
       "tools[0].function.parameters.properties.a: expected a property schema object, got a string"},
      {"required not an array", R"([{"role":"user","content":"q"}])", R"([{"type":"function","function":{"name":"f","parameters":{"type":"object","required":"a"}}}])",
       "tools[0].function.parameters.required: expected an array of property names, got a string"},
      {"nested required not an array", R"([{"role":"user","content":"q"}])", R"([{"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"o":{"type":"object","properties":{},"required":true}}}}}])",
       "tools[0].function.parameters.properties.o.required: expected an array of property names, got a boolean"},
      {"description an object", R"([{"role":"user","content":"q"}])", R"([{"type":"function","function":{"name":"f","description":{"a":1}}}])",
       "tools[0].function.description: expected a string, got an object"},
      {"tool result without a call", R"([{"role":"user","content":"q"},{"role":"tool","tool_call_id":"x","content":"r"}])",
       "null", "messages[1]: a tool result must follow an assistant message with tool_calls"},
      {"tool result after plain answer", R"([{"role":"user","content":"q"},{"role":"assistant","content":"a"},{"role":"tool","content":"r","name":"f"}])",
       "null", "messages[2]: a tool result must follow an assistant message with tool_calls"},
      {"tool result with unknown id", R"([{"role":"user","content":"q"},{"role":"assistant","tool_calls":[{"id":"a","function":{"name":"f"}}]},{"role":"tool","tool_call_id":"b","content":"r"}])",
       "null", "messages[2].tool_call_id: expected the id of one of the calls in messages[1].tool_calls, got \"b\""},
      {"tool result without id or name", R"([{"role":"user","content":"q"},{"role":"assistant","tool_calls":[{"id":"a","function":{"name":"f"}}]},{"role":"tool","content":"r"}])",
       "null", "messages[2]: a tool result needs a tool_call_id matching a call of messages[1]"},
      {"tool_calls not an array", R"([{"role":"user","content":"q"},{"role":"assistant","tool_calls":{"id":"a"}}])", "null",
       "messages[1].tool_calls: expected an array of tool calls, got an object"},
      {"tool call without name", R"([{"role":"user","content":"q"},{"role":"assistant","tool_calls":[{"id":"a","function":{"arguments":"{}"}}]}])",
       "null", "messages[1].tool_calls[0].function.name: expected a non-empty string (a tool call needs a name), got nothing"},
      {"arguments not JSON", R"([{"role":"user","content":"q"},{"role":"assistant","tool_calls":[{"id":"a","function":{"name":"f","arguments":"{city: Paris"}}]}])",
       "null", "messages[1].tool_calls[0].function.arguments: expected a string holding a JSON object, got \"{city: Paris\""},
      {"arguments an array", R"([{"role":"user","content":"q"},{"role":"assistant","tool_calls":[{"id":"a","function":{"name":"f","arguments":[1]}}]}])",
       "null", "messages[1].tool_calls[0].function.arguments: expected a JSON object or a string holding one, got an array"},
      {"tool calls on a user message", R"([{"role":"user","content":"q","tool_calls":[{"function":{"name":"f"}}]}])",
       "null", "messages[0].tool_calls: expected no tool calls on a user message (only assistant messages carry them), got an array"},
      {"reasoning a number", R"([{"role":"user","content":"q"},{"role":"assistant","content":"a","reasoning_content":5}])",
       "null", "messages[1].reasoning_content: expected a string, got a number"},
      {"tool_call_id a number", R"([{"role":"user","content":"q"},{"role":"assistant","tool_calls":[{"id":"a","function":{"name":"f"}}]},{"role":"tool","tool_call_id":1,"content":"r"}])",
       "null", "messages[2].tool_call_id: expected a string, got a number"},
  };
  for (const ErrorCase& c : cases) {
    const json messages = json::parse(c.messages);
    const json tools = json::parse(c.tools);
    auto r = render(messages, tools, RenderOptions());
    ASSERT_FALSE(r.ok()) << c.name << ": rendered " << *r;
    EXPECT_NE(r.message().find(c.expected), std::string::npos)
        << c.name << ": message \"" << r.message() << "\" lacks \"" << c.expected << "\"";
  }
}

// One validator (validate.h), for gem serve and gem template: text parts joined with "\n" for
// every role, developer as system, and normalising twice changes nothing.
TEST(ChatValidate, NormalisesPartsAndDeveloper) {
  const json in = json::parse(R"([
    {"role":"developer","content":[{"type":"text","text":"be brief"},{"type":"text","text":"and kind"}]},
    {"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]},
    {"role":"assistant","content":[{"type":"text","text":"c"}],"tool_calls":[{"id":"1","function":{"name":"f","arguments":"{\"x\":1}"}}]},
    {"role":"tool","tool_call_id":"1","content":[{"type":"text","text":"r1"},{"type":"text","text":"r2"}]},
    {"role":"developer","content":"later"},
    {"role":"user","content":"q","tool_calls":null}])");
  auto v = validate_messages(in);
  ASSERT_TRUE(v.ok()) << v.message();
  const json& m = *v;
  EXPECT_EQ(m[0]["role"], "system");
  EXPECT_EQ(m[0]["content"], "be brief\nand kind");
  EXPECT_EQ(m[1]["content"], "a\nb");
  EXPECT_EQ(m[2]["content"], "c");
  EXPECT_EQ(m[2]["tool_calls"][0]["function"]["arguments"], json::parse(R"({"x":1})"));
  EXPECT_EQ(m[3]["content"], "r1\nr2");
  EXPECT_EQ(m[4]["role"], "system");
  EXPECT_FALSE(m[5].contains("tool_calls"));
  auto again = validate_messages(m);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, m);
  // The renderer reads the normalised form: a leading system message's parts (refused before,
  // while the server joined them) and a later developer turn as a system turn.
  RenderOptions opt;
  auto r = render(in, json(), opt);
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r->rfind("<bos><|turn>system\nbe brief\nand kind<turn|>\n<|turn>user\na\nb<turn|>\n", 0), 0u) << *r;
  EXPECT_NE(r->find("<|turn>system\nlater<turn|>\n"), std::string::npos) << *r;
  EXPECT_EQ(r->find("developer"), std::string::npos) << *r;
}

// The thinking switch as gem serve reads it: chat_template_kwargs decides when given,
// otherwise reasoning_effort "none" turns thinking off.
TEST(ChatValidate, ReadChatInput) {
  auto in = [](const char* body, bool def) { return read_chat_input(json::parse(body), def); };
  const char* kMsgs = R"("messages":[{"role":"user","content":"x"}])";
  auto plain = in((std::string("{") + kMsgs + "}").c_str(), true);
  ASSERT_TRUE(plain.ok()) << plain.message();
  EXPECT_TRUE(plain->enable_thinking);
  EXPECT_EQ(plain->tools, json::array());
  EXPECT_FALSE(in((std::string("{") + kMsgs + R"(,"reasoning_effort":"none"})").c_str(), true)->enable_thinking);
  EXPECT_TRUE(in((std::string("{") + kMsgs + R"(,"reasoning_effort":"none","chat_template_kwargs":{"enable_thinking":true}})").c_str(), true)->enable_thinking);
  EXPECT_TRUE(in((std::string("{") + kMsgs + R"(,"chat_template_kwargs":{"enable_thinking":true}})").c_str(), false)->enable_thinking);
  EXPECT_FALSE(in((std::string("{") + kMsgs + R"(,"reasoning_effort":null})").c_str(), false)->enable_thinking);
  const struct {
    const char* body;
    const char* expected;
  } bad[] = {
      {R"([])", "the request body: expected a JSON object, got an array"},
      {R"({})", "messages: expected an array of messages (the field is required), got nothing"},
      {R"({"messages":null})", "messages: expected an array of messages (the field is required), got null"},
      {R"({"messages":"hi"})", "messages: expected an array of messages, got a string"},
      {R"({"messages":[{"role":"user","content":"x"}],"reasoning_effort":1})", "reasoning_effort: expected a string, got a number"},
      {R"({"messages":[{"role":"user","content":"x"}],"chat_template_kwargs":[]})", "chat_template_kwargs: expected an object, got an array"},
      {R"({"messages":[{"role":"user","content":"x"}],"chat_template_kwargs":{"enable_thinking":"no"}})",
       "chat_template_kwargs.enable_thinking: expected true or false, got a string"},
      {R"({"messages":[{"role":"user","content":"x"}],"tools":{}})", "tools: expected an array of tool objects, got an object"},
  };
  for (const auto& b : bad) {
    auto r = in(b.body, true);
    ASSERT_FALSE(r.ok()) << b.body;
    EXPECT_NE(r.message().find(b.expected), std::string::npos) << b.body << ": " << r.message();
  }
}

// `n` nested arrays with `leaf` inside: "[[[...leaf...]]]".
std::string nested(int n, const std::string& leaf = "1", char open = '[', char close = ']') {
  return std::string(static_cast<size_t>(n), open) + leaf + std::string(static_cast<size_t>(n), close);
}

// 26.1: nesting never overflows the stack; past kMaxJsonDepth (64) it is an error naming the
// limit and the path, wherever it sits (before, these inputs crashed the renderer's recursive
// copy and walkers).
TEST(ChatValidate, DeepNestingIsAnErrorNamingTheLimit) {
  constexpr int kDeep = 300000;
  const std::string deep_obj = [] {
    std::string s;
    for (int i = 0; i < kDeep; ++i) s += "{\"a\":";
    s += "1";
    s += std::string(kDeep, '}');
    return s;
  }();
  // Built as text and parsed (nlohmann parses iteratively; copying a deep json would recurse).
  const std::string user = R"({"role":"user","content":"q"})";
  auto call_with = [&](const std::string& arguments_json) {
    return "[" + user + R"(,{"role":"assistant","tool_calls":[{"id":"1","function":{"name":"f","arguments":)" +
           arguments_json + "}}]}]";
  };
  auto quoted = [](const std::string& s) { return json(s).dump(); };
  struct Case {
    const char* name;
    std::string messages;
    std::string tools;
    const char* where;
  };
  const std::vector<Case> cases = {
      {"arguments object", call_with(deep_obj), "null", "messages[1].tool_calls[0].function.arguments.a.a"},
      {"arguments string", call_with(quoted(deep_obj)), "null", "messages[1].tool_calls[0].function.arguments.a.a"},
      {"arguments string of arrays", call_with(quoted("{\"a\":" + nested(kDeep) + "}")), "null",
       "messages[1].tool_calls[0].function.arguments.a[0][0]"},
      {"unknown key", R"([{"role":"user","content":"q","extra":)" + nested(kDeep) + "}]", "null", "messages[0].extra[0][0]"},
      {"tool_responses", "[" + user + R"(,{"role":"assistant","tool_responses":[{"name":"f","response":)" + nested(kDeep) + "}]}]",
       "null", "messages[1].tool_responses[0].response[0]"},
      {"tool parameters", "[" + user + "]", R"([{"type":"function","function":{"name":"f","parameters":)" + deep_obj + "}}]",
       "tools[0].function.parameters.a.a"},
  };
  for (const Case& c : cases) {
    const json messages = json::parse(c.messages);
    const json tools = json::parse(c.tools);
    auto r = render(messages, tools, RenderOptions());
    ASSERT_FALSE(r.ok()) << c.name;
    EXPECT_NE(r.message().find("expected JSON nested within the limit of 64 levels"), std::string::npos)
        << c.name << ": " << r.message().substr(0, 300);
    EXPECT_EQ(r.message().rfind(c.where, 0), 0u) << c.name << ": " << r.message().substr(0, 300);
  }
  // The limit counts from the request's field: messages[1].tool_calls[0].function.arguments
  // sits at depth 6, so its values may nest 58 more levels, not 59.
  std::string ok_args = "{\"a\":" + nested(58) + "}";
  auto fine = render(json::parse(call_with(ok_args)), json(), RenderOptions());
  ASSERT_TRUE(fine.ok()) << fine.message();
  EXPECT_NE(fine->find("a:" + nested(58)), std::string::npos);
  std::string over_args = "{\"a\":" + nested(59) + "}";
  EXPECT_FALSE(render(json::parse(call_with(over_args)), json(), RenderOptions()).ok());
  EXPECT_FALSE(render(json::parse(call_with(quoted(over_args))), json(), RenderOptions()).ok());
  EXPECT_TRUE(render(json::parse(call_with(quoted(ok_args))), json(), RenderOptions()).ok());
  // check_depth itself: scalars are depth 0, [] is 1; a long key is cut in the path.
  EXPECT_TRUE(check_depth(json(5), "x", 0).ok());
  EXPECT_TRUE(check_depth(json::parse(nested(3)), "x", 3).ok());
  const Status st = check_depth(json::parse(nested(4)), "x", 3);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.message(), "x[0][0][0]: expected JSON nested within the limit of 3 levels, got deeper nesting");
  const json long_key = {{std::string(100, 'k'), json::array({json::array()})}};
  const Status lk = check_depth(long_key, "x", 2);
  EXPECT_EQ(lk.message().rfind("x." + std::string(40, 'k') + "...[0]:", 0), 0u) << lk.message();
}

}  // namespace
}  // namespace gem::chat
