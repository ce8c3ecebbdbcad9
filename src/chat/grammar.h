// The Gemma 4 chat format's vocabulary in one place (spec §6): the control tokens the format
// inserts and the literal words around them. The renderer (chat.cc) writes them, the output
// parser (parser.cc) reads them, and the tool-choice constraint (constraint.cc) forces them, so
// the three cannot drift apart.
#pragma once

#include <string>
#include <string_view>

#include "tokenizer/tokenizer.h"

namespace gem::chat::grammar {

// Control tokens, by their vocabulary text (ids in tokenizer.h's tok::).
constexpr std::string_view kBos = "<bos>";
constexpr std::string_view kTurnOpen = "<|turn>";            // tok::kTurnStart, then ROLE "\n"
constexpr std::string_view kTurnClose = "<turn|>";           // tok::kTurnEnd
constexpr std::string_view kThink = "<|think|>";             // tok::kThink (thinking on)
constexpr std::string_view kToolDeclOpen = "<|tool>";        // tok::kToolDeclStart
constexpr std::string_view kToolDeclClose = "<tool|>";       // tok::kToolDeclEnd
constexpr std::string_view kToolCallOpen = "<|tool_call>";   // tok::kToolCallStart
constexpr std::string_view kToolCallClose = "<tool_call|>";  // tok::kToolCallEnd
constexpr std::string_view kToolRespOpen = "<|tool_response>";   // tok::kToolRespStart
constexpr std::string_view kToolRespClose = "<tool_response|>";  // tok::kToolRespEnd
constexpr std::string_view kStrDelim = "<|\"|>";             // tok::kStrDelim, around strings
constexpr std::string_view kChannelOpen = "<|channel>";      // tok::kChannelStart
constexpr std::string_view kChannelClose = "<channel|>";     // tok::kChannelEnd

// Words.
constexpr std::string_view kModelRole = "model";      // the assistant's turn: <|turn>model\n
constexpr std::string_view kThoughtWord = "thought";  // <|channel>thought\n...<channel|>
constexpr std::string_view kCallPrefix = "call:";     // <|tool_call>call:NAME{ARGS}<tool_call|>
constexpr char kArgsOpen = '{';
constexpr char kArgsClose = '}';
constexpr std::string_view kDeclarationPrefix = "declaration:";  // <|tool>declaration:NAME{...}
constexpr std::string_view kResponsePrefix = "response:";  // <|tool_response>response:NAME{...}

// A character that may not appear in a tool-call NAME (the parser ends or rejects the name there).
constexpr bool is_name_breaker(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == ',' || c == ':' || c == '{' ||
         c == '}' || c == '[' || c == ']';
}

// The text that opens a call's arguments after <|tool_call>: "call:NAME{".
inline std::string call_header(std::string_view name) {
  std::string s(kCallPrefix);
  s += name;
  s += kArgsOpen;
  return s;
}

}  // namespace gem::chat::grammar
