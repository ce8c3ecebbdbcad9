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
#include "common/test_util.h"

namespace gem::chat {
namespace {

using json = nlohmann::json;

std::string template_path() {
  return test::fixture("chat/google-gemma-4-31B-it.jinja");
}

std::vector<std::string> corpus_files() {
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(test::source_dir() + "/tests/chat/corpus")) {
    if (e.path().extension() == ".json") files.push_back(e.path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

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
      {"role missing", R"([{"content":"x"}])", "null", "messages[0]: a message needs a string \"role\""},
      {"content a number", R"([{"role":"user","content":42}])", "null",
       "messages[0].content: expected a string, null or an array of text parts, got a number"},
      {"content an object", R"([{"role":"user","content":{"text":"x"}}])", "null",
       "messages[0].content: expected a string, null or an array of text parts, got an object"},
      {"image part", R"([{"role":"user","content":[{"type":"text","text":"see"},{"type":"image_url","image_url":{"url":"data:"}}]}])",
       "null", "messages[0].content[1]: content part type \"image_url\" is not supported"},
      {"audio part", R"([{"role":"user","content":[{"type":"input_audio","input_audio":{}}]}])", "null",
       "content part type \"input_audio\" is not supported"},
      {"image part in a tool result", R"([{"role":"user","content":"q"},{"role":"assistant","tool_calls":[{"id":"a","function":{"name":"f"}}]},{"role":"tool","tool_call_id":"a","content":[{"type":"image","image":"x"}]}])",
       "null", "messages[2].content[0]: content part type \"image\" is not supported"},
      {"text part without text", R"([{"role":"user","content":[{"type":"text"}]}])", "null",
       "messages[0].content[0]: a text part needs a string \"text\""},
      {"system parts", R"([{"role":"system","content":[{"type":"text","text":"x"}]},{"role":"user","content":"q"}])",
       "null", "messages[0].content: the Gemma 4 template prints a leading system message"},
      {"tools not an array", R"([{"role":"user","content":"q"}])", R"({"type":"function"})",
       "tools: expected an array of tool objects, got an object"},
      {"function without name", R"([{"role":"user","content":"q"}])", R"([{"type":"function","function":{"description":"d"}}])",
       "tools[0].function: a function needs a non-empty string \"name\""},
      {"tool without function", R"([{"role":"user","content":"q"}])", R"([{"type":"function"}])",
       "tools[0]: missing \"function\""},
      {"non-function tool", R"([{"role":"user","content":"q"}])", R"([{"type":"retrieval","function":{"name":"f"}}])",
       "tools[0].type: only \"function\" tools are supported"},
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
       "null", "messages[2]: tool_call_id \"b\" matches none of the calls in messages[1].tool_calls"},
      {"tool result without id or name", R"([{"role":"user","content":"q"},{"role":"assistant","tool_calls":[{"id":"a","function":{"name":"f"}}]},{"role":"tool","content":"r"}])",
       "null", "messages[2]: a tool result needs a tool_call_id matching a call of messages[1]"},
      {"tool_calls not an array", R"([{"role":"user","content":"q"},{"role":"assistant","tool_calls":{"id":"a"}}])", "null",
       "messages[1].tool_calls: expected an array of tool calls, got an object"},
      {"tool call without name", R"([{"role":"user","content":"q"},{"role":"assistant","tool_calls":[{"id":"a","function":{"arguments":"{}"}}]}])",
       "null", "messages[1].tool_calls[0].function: a tool call needs a non-empty string \"name\""},
      {"arguments not JSON", R"([{"role":"user","content":"q"},{"role":"assistant","tool_calls":[{"id":"a","function":{"name":"f","arguments":"{city: Paris"}}]}])",
       "null", "messages[1].tool_calls[0].function.arguments: the arguments string must hold a JSON object"},
      {"arguments an array", R"([{"role":"user","content":"q"},{"role":"assistant","tool_calls":[{"id":"a","function":{"name":"f","arguments":[1]}}]}])",
       "null", "messages[1].tool_calls[0].function.arguments: expected a JSON object or a string holding one, got an array"},
      {"tool calls on a user message", R"([{"role":"user","content":"q","tool_calls":[{"function":{"name":"f"}}]}])",
       "null", "messages[0].tool_calls: only assistant messages may carry tool calls"},
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

}  // namespace
}  // namespace gem::chat
