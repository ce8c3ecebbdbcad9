// The streaming output parser: generated token ids -> reasoning, content and tool-call events
// (spec §6.6). Driven by the special token ids, not by regexes over text. Malformed or truncated
// output never crashes; each case has a defined, documented result (see parser.cc).
#pragma once

#include <cstdint>
#include <string>
#include <memory>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace gem::chat {

enum class EventKind {
  kReasoning,      // text: a fragment of the thought channel (never empty)
  kContent,        // text: a fragment of the visible answer (never empty)
  kToolCallBegin,  // tool_index, text = function name (emitted once the name is complete)
  kToolCallArgs,   // tool_index, text = a fragment of the JSON arguments string (never empty)
  kToolCallEnd,    // tool_index, text empty: the arguments JSON is complete (one JSON object)
};

struct Event {
  EventKind kind;
  std::string text;
  int tool_index = -1;
};

enum class StopCause {
  kEog,          // an end-of-generation token (<turn|>, <eos>, <|tool_response>) was pushed
  kLength,       // max tokens or the context ran out
  kCancelled,
};

struct ParserOptions {
  // The prompt ended inside an open model turn with thinking on: the model may open
  // "<|channel>thought\n" itself. (With thinking off the template already closed the channel.)
  bool thinking = true;
  bool tools = true;  // tool-call syntax is parsed into tool calls (else kept as content)
};

class OutputParser {
 public:
  OutputParser(const Tokenizer& tokenizer, ParserOptions options);
  // Feeds one generated token; appends the events it completes.
  void push(int32_t token, std::vector<Event>& out);
  // Ends the stream; flushes what is held and closes any open call (see parser.cc).
  void finish(StopCause cause, std::vector<Event>& out);

  int n_tool_calls() const;
  // An end token (<eos>, <turn|>, <|tool_response>, or a <|turn> that starts another turn) was
  // pushed: the message is complete and later tokens are ignored; the caller may stop decoding.
  bool ended() const;
  // The finish reason OpenAI clients expect: "tool_calls", "stop" or "length".
  std::string finish_reason(StopCause cause) const;

  struct State;

 private:
  const Tokenizer* tokenizer_;
  ParserOptions options_;
  std::shared_ptr<State> state_;
};

}  // namespace gem::chat
