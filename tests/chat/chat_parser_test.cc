// The streaming output parser on token streams from the real Gemma 4 tokenizer (the vocabulary
// gem ships): every construct of spec §6 with its exact JSON, one case per
// malformed input with its documented result, streaming certainty, and a property test over
// random token streams.
#include <gtest/gtest.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "chat/parser.h"
#include "chat/chat_test_util.h"
#include "common/test_util.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

namespace gem::chat {
namespace {

using json = nlohmann::json;

using test_util::tokenizer;

struct Call {
  std::string name;
  std::string args;
  bool closed = false;
};

// What a stream of events adds up to, with the structural checks every stream must pass.
struct Outcome {
  std::string reasoning;
  std::string content;
  std::vector<Call> calls;
  std::string finish_reason;
  bool ended = false;
  std::vector<Event> events;
  std::string problems;  // empty when the event stream is well formed
};

void check_event(const Event& e, Outcome& o) {
  auto problem = [&](const std::string& p) { o.problems += p + "; "; };
  switch (e.kind) {
    case EventKind::kReasoning:
    case EventKind::kContent:
      if (e.text.empty()) problem("empty text delta");
      if (e.tool_index != -1) problem("text event with a tool index");
      (e.kind == EventKind::kReasoning ? o.reasoning : o.content) += e.text;
      break;
    case EventKind::kToolCallBegin:
      if (e.tool_index != static_cast<int>(o.calls.size())) problem("call index out of order");
      if (!o.calls.empty() && !o.calls.back().closed) problem("call begun before the last ended");
      if (e.text.empty()) problem("empty call name");
      o.calls.push_back(Call{e.text, "", false});
      break;
    case EventKind::kToolCallArgs:
      if (e.text.empty()) problem("empty args delta");
      if (o.calls.empty() || e.tool_index != static_cast<int>(o.calls.size()) - 1 ||
          o.calls.back().closed) {
        problem("args outside an open call");
      } else {
        o.calls.back().args += e.text;
      }
      break;
    case EventKind::kToolCallEnd:
      if (o.calls.empty() || e.tool_index != static_cast<int>(o.calls.size()) - 1 ||
          o.calls.back().closed) {
        problem("end outside an open call");
      } else {
        o.calls.back().closed = true;
      }
      break;
  }
}

Outcome run_ids(const Tokenizer& tk, const std::vector<int32_t>& ids, ParserOptions opt,
                StopCause cause) {
  OutputParser parser(tk, opt);
  Outcome o;
  for (int32_t id : ids) {
    std::vector<Event> ev;
    parser.push(id, ev);
    for (const Event& e : ev) {
      check_event(e, o);
      o.events.push_back(e);
    }
  }
  o.ended = parser.ended();
  std::vector<Event> ev;
  parser.finish(cause, ev);
  for (const Event& e : ev) {
    check_event(e, o);
    o.events.push_back(e);
  }
  for (const Call& c : o.calls) {
    if (!c.closed) o.problems += "call " + c.name + " never ended; ";
  }
  o.finish_reason = parser.finish_reason(cause);
  return o;
}

std::vector<int32_t> encode(const Tokenizer& tk, const std::string& text) {
  return tk.encode(text, /*add_bos=*/false, /*parse_special=*/true);
}

Outcome run(const Tokenizer& tk, const std::string& text, ParserOptions opt = {},
            StopCause cause = StopCause::kEog) {
  return run_ids(tk, encode(tk, text), opt, cause);
}

// One table row: model output (special tokens written as text), options, expected result.
struct Case {
  const char* name;
  const char* output;
  const char* reasoning;
  const char* content;
  std::vector<std::pair<const char*, const char*>> calls;  // (name, exact JSON arguments)
  const char* finish_reason;
  bool tools = true;
  StopCause cause = StopCause::kEog;
};

void check_case(const Tokenizer& tk, const Case& c) {
  SCOPED_TRACE(std::string("case ") + c.name + ": " + c.output);
  ParserOptions opt;
  opt.tools = c.tools;
  const Outcome o = run(tk, c.output, opt, c.cause);
  EXPECT_EQ(o.problems, "");
  EXPECT_EQ(o.reasoning, c.reasoning);
  EXPECT_EQ(o.content, c.content);
  ASSERT_EQ(o.calls.size(), c.calls.size());
  for (size_t i = 0; i < c.calls.size(); ++i) {
    EXPECT_EQ(o.calls[i].name, c.calls[i].first) << "call " << i;
    EXPECT_EQ(o.calls[i].args, c.calls[i].second) << "call " << i;
    EXPECT_TRUE(json::accept(o.calls[i].args)) << o.calls[i].args;
  }
  EXPECT_EQ(o.finish_reason, c.finish_reason);
}

// Every construct of spec §6 (and llama.cpp's gemma4 parser tests) with its exact JSON.
const Case kConstructs[] = {
    {"plain_content", "Hello, world!\nWhat's up?<turn|>", "", "Hello, world!\nWhat's up?", {}, "stop"},
    {"thought_then_content", "<|channel>thought\nI'm\nthinking<channel|>Hello, world!\nWhat's up?<turn|>",
     "I'm\nthinking", "Hello, world!\nWhat's up?", {}, "stop"},
    {"empty_thought_no_newline", "<|channel>thought<channel|>Hello", "", "Hello", {}, "stop"},
    {"thought_trailing_newline_dropped", "<|channel>thought\nNeed the tool.\n<channel|>4<turn|>",
     "Need the tool.", "4", {}, "stop"},
    {"string_argument", "<|tool_call>call:get_time{city:<|\"|>London<|\"|>}<tool_call|><|tool_response>",
     "", "", {{"get_time", R"({"city":"London"})"}}, "tool_calls"},
    {"string_with_space", "<|tool_call>call:get_time{city:<|\"|>San Francisco<|\"|>}<tool_call|>", "", "",
     {{"get_time", R"({"city":"San Francisco"})"}}, "tool_calls"},
    {"empty_arguments", "<|tool_call>call:empty_args{}<tool_call|>", "", "", {{"empty_args", "{}"}}, "tool_calls"},
    {"content_then_call", "Hello, world!\nWhat's up?<|tool_call>call:get_time{city:<|\"|>Paris<|\"|>}<tool_call|>",
     "", "Hello, world!\nWhat's up?", {{"get_time", R"({"city":"Paris"})"}}, "tool_calls"},
    {"thought_then_call", "<|channel>thought\nI'm\nthinking<channel|><|tool_call>call:get_time{city:<|\"|>Paris<|\"|>}<tool_call|><|tool_response>",
     "I'm\nthinking", "", {{"get_time", R"({"city":"Paris"})"}}, "tool_calls"},
    {"parallel_calls", "<|tool_call>call:get_time{city:<|\"|>London<|\"|>}<tool_call|><|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>}<tool_call|><|tool_response>",
     "", "", {{"get_time", R"({"city":"London"})"}, {"get_weather", R"({"city":"Paris"})"}}, "tool_calls"},
    {"integer", "<|tool_call>call:special_function{arg1:42}<tool_call|>", "", "", {{"special_function", R"({"arg1":42})"}}, "tool_calls"},
    {"negative", "<|tool_call>call:special_function{arg1:-7}<tool_call|>", "", "", {{"special_function", R"({"arg1":-7})"}}, "tool_calls"},
    {"decimal", "<|tool_call>call:amount{orig:3.14}<tool_call|>", "", "", {{"amount", R"({"orig":3.14})"}}, "tool_calls"},
    {"exponent", "<|tool_call>call:amount{orig:1.5e10,small:1e-05,big:1e+16}<tool_call|>", "", "",
     {{"amount", R"({"orig":1.5e10,"small":1e-05,"big":1e+16})"}}, "tool_calls"},
    {"booleans", "<|tool_call>call:toggle{enabled:true,other:false}<tool_call|>", "", "",
     {{"toggle", R"({"enabled":true,"other":false})"}}, "tool_calls"},
    {"null", "<|tool_call>call:set_nullable{value:null}<tool_call|>", "", "", {{"set_nullable", R"({"value":null})"}}, "tool_calls"},
    {"python_literals", "<|tool_call>call:f{a:None,b:True,c:False}<tool_call|>", "", "",
     {{"f", R"({"a":null,"b":true,"c":false})"}}, "tool_calls"},
    {"array_of_strings", "<|tool_call>call:todo_list{todos:[<|\"|>buy milk<|\"|>,<|\"|>walk dog<|\"|>]}<tool_call|>", "", "",
     {{"todo_list", R"({"todos":["buy milk","walk dog"]})"}}, "tool_calls"},
    {"nested_object", "<|tool_call>call:set_config{config:{theme:<|\"|>dark<|\"|>,count:3}}<tool_call|>", "", "",
     {{"set_config", R"({"config":{"theme":"dark","count":3}})"}}, "tool_calls"},
    {"empty_array", "<|tool_call>call:todo_list{todos:[]}<tool_call|>", "", "", {{"todo_list", R"({"todos":[]})"}}, "tool_calls"},
    {"empty_object", "<|tool_call>call:set_config{config:{}}<tool_call|>", "", "", {{"set_config", R"({"config":{}})"}}, "tool_calls"},
    {"spec_6_4_example_8", "<|tool_call>call:f{b:true,lst:[1,<|\"|>two<|\"|>,{k:<|\"|>v<|\"|>}],n:3.5,obj:{x:<|\"|>s<|\"|>,y:1},z:None}<tool_call|><|tool_response>",
     "", "", {{"f", R"({"b":true,"lst":[1,"two",{"k":"v"}],"n":3.5,"obj":{"x":"s","y":1},"z":null})"}}, "tool_calls"},
    {"arrays_of_objects", "<|tool_call>call:add{items:[{title:<|\"|>milk<|\"|>,tags:[<|\"|>a<|\"|>]},{title:<|\"|>dog<|\"|>,tags:[]}],m:[[1,2.5],[],[-3]]}<tool_call|>",
     "", "", {{"add", R"({"items":[{"title":"milk","tags":["a"]},{"title":"dog","tags":[]}],"m":[[1,2.5],[],[-3]]})"}}, "tool_calls"},
    {"string_escapes", "<|tool_call>call:write{text:<|\"|>say \"hi\" \\ {a:b}, [x]\n\ttab<|\"|>}<tool_call|>", "", "",
     {{"write", R"({"text":"say \"hi\" \\ {a:b}, [x]\n\ttab"})"}}, "tool_calls"},
    {"unicode_string", "<|tool_call>call:find{q:<|\"|>café ☕ 東京 🦙 مرحبا<|\"|>}<tool_call|>", "", "",
     {{"find", R"({"q":"café ☕ 東京 🦙 مرحبا"})"}}, "tool_calls"},
    {"whitespace_in_arguments", "<|tool_call>call:f{ a: 1, b: [ 1, 2 ], c:\n{ d: <|\"|>x<|\"|> } }<tool_call|>", "", "",
     {{"f", R"({"a":1,"b":[1,2],"c":{"d":"x"}})"}}, "tool_calls"},
    {"quoted_keys", "<|tool_call>call:f{<|\"|>my key<|\"|>:1,<|\"|>k:2<|\"|>:<|\"|>v<|\"|>}<tool_call|>", "", "",
     {{"f", R"({"my key":1,"k:2":"v"})"}}, "tool_calls"},
    {"bare_text_value_becomes_string", "<|tool_call>call:f{city:Paris,path:/tmp/a b,n:007}<tool_call|>", "", "",
     {{"f", R"({"city":"Paris","path":"/tmp/a b","n":"007"})"}}, "tool_calls"},
    {"trailing_commas_dropped", "<|tool_call>call:f{a:[1,2,],b:1,}<tool_call|>", "", "", {{"f", R"({"a":[1,2],"b":1})"}}, "tool_calls"},
    {"missing_value_is_null", "<|tool_call>call:f{a:,b:}<tool_call|>", "", "", {{"f", R"({"a":null,"b":null})"}}, "tool_calls"},
    {"trailing_empty_thought", "<|channel>thought\n<channel|>Hello, world!\nWhat's up?<|channel>thought\n<channel|>", "",
     "Hello, world!\nWhat's up?", {}, "stop"},
    {"trailing_stray_channel_end", "<|channel>thought\n<channel|>Hello, world!\nWhat's up?<channel|>", "",
     "Hello, world!\nWhat's up?", {}, "stop"},
    {"trailing_empty_thought_and_stray", "<|channel>thought\n<channel|>Hello, world!\nWhat's up?<|channel>thought\n<channel|><channel|>", "",
     "Hello, world!\nWhat's up?", {}, "stop"},
    {"leading_empty_channel", "<|channel><|channel>thought\n<channel|>Hello, world!\nWhat's up?", "",
     "Hello, world!\nWhat's up?", {}, "stop"},
    {"leading_model_turn_skipped", "<|turn>model\n<|channel>thought\nhm<channel|>Hi<turn|>", "hm", "Hi", {}, "stop"},
    {"string_delimiter_in_content", "He said <|\"|>hi<|\"|>.", "", "He said \"hi\".", {}, "stop"},
    {"ignored_control_tokens", "<bos>He<|think|>llo<tool_response|><|tool><tool|>!", "", "Hello!", {}, "stop"},
    {"thought_whitespace_only", "<|channel>thought  \n\n  <channel|>x", "", "x", {}, "stop"},
    {"thoughtful_is_a_thought", "<|channel>thoughtful words<channel|>x", "ful words", "x", {}, "stop"},
    {"call_then_response_token_without_close", "<|tool_call>call:f{a:1}<|tool_response>", "", "", {{"f", R"({"a":1})"}}, "tool_calls"},
    {"content_between_calls", "<|tool_call>call:f{}<tool_call|>\nand<|tool_call>call:g{}<tool_call|>", "", "\nand",
     {{"f", "{}"}, {"g", "{}"}}, "tool_calls"},
    {"text_after_end_ignored", "Done<turn|>ignored<|tool_call>call:f{}<tool_call|>", "", "Done", {}, "stop"},
};
// One process loads the tokenizer once for the whole table (ctest runs each TEST in its own
// process); a failure names its case.
TEST(Parser, EveryConstructExact) {
  REQUIRE_TOKENIZER();
  for (const Case& c : kConstructs) check_case(tk, c);
}

// Malformed and truncated output: each has the result documented at the top of parser.cc.
const Case kMalformed[] = {
    {"truncated_in_string", "<|tool_call>call:f{a:<|\"|>abc", "", "", {{"f", R"({"a":"abc"})"}}, "length", true, StopCause::kLength},
    {"truncated_in_key", "<|tool_call>call:f{a:1,bb", "", "", {{"f", R"({"a":1})"}}, "length", true, StopCause::kLength},
    {"truncated_after_colon", "<|tool_call>call:f{a:", "", "", {{"f", R"({"a":null})"}}, "length", true, StopCause::kLength},
    {"truncated_in_number", "<|tool_call>call:f{a:12", "", "", {{"f", R"({"a":12})"}}, "length", true, StopCause::kLength},
    {"truncated_nested", "<|tool_call>call:f{a:[1,{b:<|\"|>x", "", "", {{"f", R"({"a":[1,{"b":"x"}]})"}}, "length", true, StopCause::kLength},
    {"truncated_after_comma", "<|tool_call>call:f{a:[1,", "", "", {{"f", R"({"a":[1]})"}}, "length", true, StopCause::kLength},
    {"truncated_in_header", "Let me check.<|tool_call>call:get_wea", "", "Let me check.", {}, "length", true, StopCause::kLength},
    {"truncated_in_thought", "<|channel>thought\nstill thinking\n", "still thinking", "", {}, "length", true, StopCause::kLength},
    {"truncated_channel_header", "ok<|channel>tho", "", "oktho", {}, "length", true, StopCause::kLength},
    {"cancelled_in_call", "<|tool_call>call:f{a:<|\"|>x", "", "", {{"f", R"({"a":"x"})"}}, "tool_calls", true, StopCause::kCancelled},
    {"bad_nesting_brace_in_array", "<|tool_call>call:f{a:[1}<tool_call|>after", "", "after", {{"f", R"({"a":[1]})"}}, "tool_calls"},
    {"bad_nesting_bracket_in_object", "<|tool_call>call:f{a:1]<tool_call|>", "", "", {{"f", R"({"a":1})"}}, "tool_calls"},
    {"garbage_after_value", "<|tool_call>call:f{a:<|\"|>x<|\"|>y,b:2}<tool_call|>z", "", "z", {{"f", R"({"a":"x"})"}}, "tool_calls"},
    {"garbage_key_with_brace", "<|tool_call>call:f{a:1,b}<tool_call|>", "", "", {{"f", R"({"a":1})"}}, "tool_calls"},
    {"garbage_colon_first", "<|tool_call>call:f{:1}<tool_call|>", "", "", {{"f", "{}"}}, "tool_calls"},
    {"delimiter_in_bare_value", "<|tool_call>call:f{a:x<|\"|>y<|\"|>}<tool_call|>", "", "", {{"f", R"({"a":"x"})"}}, "tool_calls"},
    {"text_after_closing_brace", "<|tool_call>call:f{a:1} trailing{b:2}<tool_call|>x", "", "x", {{"f", R"({"a":1})"}}, "tool_calls"},
    {"unbalanced_string_delimiter", "<|tool_call>call:f{a:<|\"|>abc}<tool_call|>after", "", "after", {{"f", R"({"a":"abc}"})"}}, "tool_calls"},
    {"channel_inside_call", "<|tool_call>call:f{a:<|channel>thought\nx<channel|>}<tool_call|>y", "", "y", {{"f", R"({"a":null})"}}, "tool_calls"},
    {"unclosed_call_then_new_call", "<|tool_call>call:f{a:1<|tool_call>call:g{}<tool_call|>", "", "", {{"f", R"({"a":1})"}, {"g", "{}"}}, "tool_calls"},
    {"unclosed_call_then_end", "<|tool_call>call:f{a:<|\"|>x<turn|>", "", "", {{"f", R"({"a":"x"})"}}, "tool_calls"},
    {"bad_header_prefix", "<|tool_call>cal:f{}<tool_call|>x", "", "x", {}, "stop"},
    {"bad_header_empty_name", "<|tool_call>call:{a:1}<tool_call|>x", "", "x", {}, "stop"},
    {"bad_header_space_in_name", "<|tool_call>call:get weather{}<tool_call|>x", "", "x", {}, "stop"},
    {"bad_header_delimiter", "<|tool_call>call:<|\"|>f<|\"|>{}<tool_call|>x", "", "x", {}, "stop"},
    {"header_never_opens_brace", "<|tool_call>call:f<tool_call|>x", "", "x", {}, "stop"},
    {"stray_channel_end", "Hello<channel|>World", "", "HelloWorld", {}, "stop"},
    {"stray_channel_start", "Hello<|channel>World", "", "HelloWorld", {}, "stop"},
    {"channel_start_inside_thought", "<|channel>thought\nA<|channel>B<channel|>C", "AB", "C", {}, "stop"},
    {"stray_tool_call_end", "a<tool_call|>b", "", "ab", {}, "stop"},
    {"stray_tool_call_end_in_header", "<|channel><tool_call|>thought\nx<channel|>y", "x", "y", {}, "stop"},
    {"tools_disabled_markers_in_thought", "<|channel>thought\na<|tool_call>b<tool_call|>c<channel|>", "abc", "", {}, "stop", false},
    {"tool_call_inside_thought", "<|channel>thought\nplan \n<|tool_call>call:f{}<tool_call|>", "plan", "", {{"f", "{}"}}, "tool_calls"},
    {"second_thought_block", "<|channel>thought\nA<channel|>B<|channel>thought\nC<channel|>D", "AC", "BD", {}, "stop"},
    {"tools_disabled", "<|tool_call>call:f{a:<|\"|>x<|\"|>}<tool_call|>", "", "call:f{a:\"x\"}", {}, "stop", false},
    {"turn_start_mid_stream_ends", "Hi<|turn>user\nmore", "", "Hi", {}, "stop"},
    {"leading_turn_other_role_ends", "<|turn>user\nHi", "", "", {}, "stop"},
    {"eos_ends", "a<eos>b", "", "a", {}, "stop"},
    {"length_after_end_token_is_not_length", "a<turn|>", "", "a", {}, "stop", true, StopCause::kLength},
};
TEST(Parser, EveryMalformedCaseAsDocumented) {
  REQUIRE_TOKENIZER();
  for (const Case& c : kMalformed) check_case(tk, c);
}

TEST(Parser, EventOrderOfSecondThought) {
  REQUIRE_TOKENIZER();
  const Outcome o = run(tk, "<|channel>thought\nA<channel|>B<|channel>thought\nC<channel|>D");
  std::vector<std::pair<EventKind, std::string>> got;
  for (const Event& e : o.events) got.emplace_back(e.kind, e.text);
  const std::vector<std::pair<EventKind, std::string>> want = {
      {EventKind::kReasoning, "A"}, {EventKind::kContent, "B"},
      {EventKind::kReasoning, "C"}, {EventKind::kContent, "D"}};
  EXPECT_EQ(got, want);
}

// Arguments stream as soon as they are certain: the name when '{' arrives, string text as it
// comes, a number or separator only once its terminator or the next member shows it complete.
TEST(Parser, StreamsArgumentsAsSoonAsCertain) {
  REQUIRE_TOKENIZER();
  OutputParser parser(tk, ParserOptions{});
  std::string args;
  std::string name;
  bool ended_call = false;
  auto feed = [&](const std::string& text) {
    std::vector<Event> ev;
    for (int32_t id : encode(tk, text)) parser.push(id, ev);
    for (const Event& e : ev) {
      if (e.kind == EventKind::kToolCallBegin) name = e.text;
      if (e.kind == EventKind::kToolCallArgs) args += e.text;
      if (e.kind == EventKind::kToolCallEnd) ended_call = true;
      EXPECT_NE(e.kind, EventKind::kContent) << e.text;
    }
  };
  feed("<|tool_call>call:get_weather");
  EXPECT_EQ(name, "");
  feed("{");
  EXPECT_EQ(name, "get_weather");
  EXPECT_EQ(args, "{");
  feed("city");
  EXPECT_EQ(args, "{");
  feed(":");
  EXPECT_EQ(args, "{\"city\":");
  feed("<|\"|>Pa");
  EXPECT_EQ(args, "{\"city\":\"Pa");
  feed("ris");
  EXPECT_EQ(args, "{\"city\":\"Paris");
  feed("<|\"|>,");
  EXPECT_EQ(args, "{\"city\":\"Paris\"");  // the comma waits for the next member
  feed("days:");
  EXPECT_EQ(args, "{\"city\":\"Paris\",\"days\":");
  feed("2");
  EXPECT_EQ(args, "{\"city\":\"Paris\",\"days\":");  // 2 might become 25
  EXPECT_FALSE(ended_call);
  feed("}");
  EXPECT_EQ(args, "{\"city\":\"Paris\",\"days\":2}");
  EXPECT_TRUE(ended_call);
  EXPECT_EQ(parser.n_tool_calls(), 1);
  EXPECT_FALSE(parser.ended());
  feed("<tool_call|><|tool_response>");
  EXPECT_TRUE(parser.ended());
  EXPECT_EQ(parser.finish_reason(StopCause::kEog), "tool_calls");
}

TEST(Parser, ReasoningStreamsAndHoldsOnlyTrailingWhitespace) {
  REQUIRE_TOKENIZER();
  OutputParser parser(tk, ParserOptions{});
  std::vector<Event> ev;
  for (int32_t id : encode(tk, "<|channel>thought\n")) parser.push(id, ev);
  EXPECT_TRUE(ev.empty());
  for (int32_t id : encode(tk, "one two")) parser.push(id, ev);
  ASSERT_FALSE(ev.empty());
  std::string r;
  for (const Event& e : ev) r += e.text;
  EXPECT_EQ(r, "one two");
  ev.clear();
  for (int32_t id : encode(tk, "\n\n")) parser.push(id, ev);
  EXPECT_TRUE(ev.empty());  // held: it may be the block's end
  for (int32_t id : encode(tk, "three")) parser.push(id, ev);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].text, "\n\nthree");
}

// UTF-8 is assembled from byte tokens; broken sequences become U+FFFD, never raw bytes.
TEST(Parser, Utf8FromByteTokens) {
  REQUIRE_TOKENIZER();
  const int32_t llama[] = {238 + 0xF0, 238 + 0x9F, 238 + 0xA6, 238 + 0x99};  // 🦙
  ASSERT_EQ(tk.token_to_piece(llama[0], false), "\xF0");
  OutputParser parser(tk, ParserOptions{});
  std::vector<Event> ev;
  for (int i = 0; i < 3; ++i) parser.push(llama[i], ev);
  EXPECT_TRUE(ev.empty());
  parser.push(llama[3], ev);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].text, "\xF0\x9F\xA6\x99");

  // An invalid byte, then an incomplete sequence cut by a special token.
  ev.clear();
  parser.push(238 + 0xFF, ev);
  parser.push(llama[0], ev);
  parser.push(llama[1], ev);
  parser.push(tok::kChannelEnd, ev);  // stray: dropped, but it cuts the sequence
  std::string content;
  for (const Event& e : ev) content += e.text;
  EXPECT_EQ(content, "\xEF\xBF\xBD\xEF\xBF\xBD");
  // Held bytes at finish() also become U+FFFD.
  ev.clear();
  parser.push(llama[0], ev);
  parser.finish(StopCause::kLength, ev);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].text, "\xEF\xBF\xBD");
}

TEST(Parser, OutOfRangeIdsAreIgnored) {
  REQUIRE_TOKENIZER();
  const Outcome o = run_ids(tk, {-5, tk.n_vocab(), tk.n_vocab() + 100, 9259}, ParserOptions{}, StopCause::kEog);
  EXPECT_EQ(o.content, "Hello");
}

// ---- property test ------------------------------------------------------------------------

// The visible text of a token stream, computed over the whole list (not streaming):
//  1. cut at the first <eos>, <turn|> or <|tool_response>; drop ignored tokens (other control,
//     user-defined, unknown or unused ids);
//  2. with tools on, a call region (<|tool_call> up to and including the next <tool_call|>, or
//     up to the next <|tool_call> / the end) becomes a BOUNDARY item; with tools off, both
//     markers are dropped;
//  3. the rest is text (<|"|> is the text `"`; adjacent text joins), <|channel> and <channel|>;
//  4. content mode: text is content; <channel|> is dropped; <|channel> followed directly by a
//     text item starting with "thought" opens a thought, else it is dropped. A thought's text
//     is the text items after "thought" up to the next <channel|>, BOUNDARY or the end (further
//     <|channel> ignored), with leading and trailing ASCII whitespace removed: it is reasoning.
// (The random streams never contain <|turn>, whose start rule is covered above.)
struct Visible {
  std::string reasoning;
  std::string content;
};

Visible visible_text(const Tokenizer& tk, const std::vector<int32_t>& ids, bool tools) {
  enum Kind { kText, kOpen, kClose, kBoundary };
  std::vector<std::pair<Kind, std::string>> items;
  auto add_text = [&](const std::string& t) {
    if (!items.empty() && items.back().first == kText) {
      items.back().second += t;
    } else {
      items.emplace_back(kText, t);
    }
  };
  bool in_region = false;
  for (int32_t id : ids) {
    if (id == tok::kEos || id == tok::kTurnEnd || id == tok::kToolRespStart) break;
    if (id == tok::kToolCallStart) {
      if (!tools) continue;
      if (!in_region) items.emplace_back(kBoundary, "");
      in_region = true;
      continue;
    }
    if (id == tok::kToolCallEnd) {
      in_region = false;
      continue;
    }
    if (in_region) continue;
    if (id == tok::kStrDelim) {
      add_text("\"");
    } else if (id == tok::kChannelStart) {
      items.emplace_back(kOpen, "");
    } else if (id == tok::kChannelEnd) {
      items.emplace_back(kClose, "");
    } else {
      const TokenType t = tk.token_type(id);
      if (t == TokenType::kControl || t == TokenType::kUserDefined || t == TokenType::kUnknown ||
          t == TokenType::kUnused) {
        continue;
      }
      add_text(tk.token_to_piece(id, false));
    }
  }
  auto strip = [](std::string s) {
    auto ws = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; };
    while (!s.empty() && ws(s.front())) s.erase(s.begin());
    while (!s.empty() && ws(s.back())) s.pop_back();
    return s;
  };
  Visible v;
  for (size_t i = 0; i < items.size(); ++i) {
    const auto& [kind, text] = items[i];
    if (kind == kText) {
      v.content += text;
    } else if (kind == kOpen && i + 1 < items.size() && items[i + 1].first == kText &&
               items[i + 1].second.rfind("thought", 0) == 0) {
      std::string thought = items[i + 1].second.substr(7);
      size_t j = i + 2;
      for (; j < items.size() && items[j].first != kClose && items[j].first != kBoundary; ++j) {
        if (items[j].first == kText) thought += items[j].second;
      }
      v.reasoning += strip(thought);
      i = j < items.size() && items[j].first == kClose ? j : j - 1;
    }
  }
  return v;
}

TEST(Parser, PropertyRandomStreams) {
  REQUIRE_TOKENIZER();
  // Text pieces that matter to the grammar, plus ordinary words and multi-byte text.
  const char* const kTexts[] = {
      "call", ":", "call:", "get_weather", "f", "{", "}", "[", "]", ",", "thought", "tho", "ught",
      "\n", " ", "  ", "\t", "model", "true", "None", "12", "-3.5", "1e5", "city", "a", "b:",
      "Hello", " world", "é", "日本語", "🦙", "مرحبا", "\"", "\\", "x y", "{a:", "}}", "<", "|",
  };
  std::vector<std::vector<int32_t>> text_groups;  // each an atomic group (🦙 is 4 byte tokens)
  for (const char* t : kTexts) text_groups.push_back(tk.encode(t, false, false));
  const int32_t kSpecials[] = {tok::kToolCallStart, tok::kToolCallEnd, tok::kStrDelim,
                               tok::kChannelStart, tok::kChannelEnd};
  const int32_t kIgnored[] = {tok::kBos, tok::kThink, tok::kToolRespEnd, tok::kToolDeclStart, tok::kPad};
  const int32_t kEnds[] = {tok::kEos, tok::kTurnEnd, tok::kToolRespStart};
  // Well-formed outputs, mutated below.
  const std::vector<int32_t> kGood[] = {
      encode(tk, "<|channel>thought\nplan<channel|>Hi<|tool_call>call:f{a:<|\"|>x<|\"|>,b:[1,{c:true}]}<tool_call|>"),
      encode(tk, "<|tool_call>call:get_weather{city:<|\"|>Paris<|\"|>,n:3}<tool_call|><|tool_call>call:g{}<tool_call|>"),
      encode(tk, "<|channel>thought\n\n<channel|>Answer <|\"|>q<|\"|> done"),
  };

  std::mt19937 rng(1234);
  int n_calls_total = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    std::vector<int32_t> ids;
    if (iter % 3 == 2) {
      ids = kGood[rng() % 3];
      const int n_mut = 1 + static_cast<int>(rng() % 4);
      for (int m = 0; m < n_mut && !ids.empty(); ++m) {
        const size_t at = rng() % ids.size();
        switch (rng() % 3) {
          case 0: ids.erase(ids.begin() + static_cast<long>(at)); break;
          case 1: ids.insert(ids.begin() + static_cast<long>(at), kSpecials[rng() % 5]); break;
          default: std::swap(ids[at], ids[rng() % ids.size()]); break;
        }
      }
    } else {
      const int len = static_cast<int>(rng() % 40);
      for (int k = 0; k < len; ++k) {
        const uint32_t r = rng() % 100;
        if (r < 55) {
          const auto& g = text_groups[rng() % text_groups.size()];
          ids.insert(ids.end(), g.begin(), g.end());
        } else if (r < 90) {
          ids.push_back(kSpecials[rng() % 5]);
        } else if (r < 98) {
          ids.push_back(kIgnored[rng() % 5]);
        } else {
          ids.push_back(kEnds[rng() % 3]);
        }
      }
    }
    const bool tools = iter % 5 != 4;
    ParserOptions opt;
    opt.tools = tools;
    const StopCause cause = iter % 2 ? StopCause::kEog : StopCause::kLength;
    const Outcome o = run_ids(tk, ids, opt, cause);
    std::string dump;
    for (int32_t id : ids) dump += std::to_string(id) + " ";
    ASSERT_EQ(o.problems, "") << "ids: " << dump;
    for (const Call& c : o.calls) {
      const json parsed = json::parse(c.args, nullptr, false);
      ASSERT_FALSE(parsed.is_discarded()) << c.args << "\nids: " << dump;
      ASSERT_TRUE(parsed.is_object()) << c.args << "\nids: " << dump;
    }
    if (!tools) {
      ASSERT_TRUE(o.calls.empty());
    }
    n_calls_total += static_cast<int>(o.calls.size());
    const Visible v = visible_text(tk, ids, tools);
    ASSERT_EQ(o.content, v.content) << "ids: " << dump;
    ASSERT_EQ(o.reasoning, v.reasoning) << "ids: " << dump;
    ASSERT_EQ(o.reasoning + o.content, v.reasoning + v.content);
  }
  EXPECT_GT(n_calls_total, 300) << "the generator should produce many calls";
}

}  // namespace
}  // namespace gem::chat
