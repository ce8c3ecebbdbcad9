// The one validator of chat requests, shared by `gem serve` (server/api.cc), `gem template` and
// the renderer itself: the parts of an OpenAI chat request that shape the prompt (messages,
// tools, the thinking switch), checked and normalised. Every error names the field path, what
// was expected and what came: "messages[2].tool_calls[0].function.name: expected a non-empty
// string, got a number".
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "base/status.h"
#include "chat/json_util.h"

namespace gem::chat {

// Checks the OpenAI `messages` array and returns it normalised for the renderer:
//  * role: system, developer, user, assistant or tool; `developer` becomes `system` (Gemma 4
//    has no developer turn; OpenAI's newer name for the system prompt).
//  * content: a string, null/absent (assistant messages only) or an array of parts;
//    the text parts are joined with "\n" into one string for every role (llama.cpp's
//    concat_content_parts). Image, audio, video and file parts are refused: gem is text-only.
//  * tool_calls (assistant only): each {"function":{"name": non-empty string, "arguments":
//    an object, or a string holding one (parsed; blank = {})}, "id"?: string}.
//  * tool_responses (assistant only, Gemma's own form): objects with an optional string name.
//  * tool_call_id, name, reasoning_content, reasoning: strings when present.
//  * nesting: at most kMaxJsonDepth levels, checked before anything copies or walks the input
//    recursively (an arguments string is counted where it sits once parsed).
// Normalising twice gives the same result.
Result<nlohmann::json> validate_messages(const nlohmann::json& messages);

// Checks the OpenAI `tools` array (null or absent = none): each {"type"?: "function",
// "function": {"name": non-empty string, "description"?: string, "parameters"?: a schema object
// whose "properties" is an object and "required" an array, "response"?: an object}}, nested at
// most kMaxJsonDepth levels. Returns the tools, an empty array for none.
Result<nlohmann::json> validate_tools(const nlohmann::json& tools);

// Fails when `value` nests arrays/objects deeper than `max_depth` (a scalar is depth 0, [] is 1),
// naming the path of the first container past the limit. Iterative: any depth is safe.
Status check_depth(const nlohmann::json& value, const std::string& where,
                   int max_depth = kMaxJsonDepth);

// The prompt-shaping fields of a chat request body.
struct ChatInput {
  nlohmann::json messages;  // validate_messages()
  nlohmann::json tools;     // validate_tools(); an empty array for none
  bool enable_thinking = true;
};

// Reads messages (required), tools, and the thinking switch from a request body: thinking is
// `default_thinking`, off when reasoning_effort is "none", and chat_template_kwargs.enable_thinking
// (read last) decides when given. Unknown keys are ignored; null counts as absent.
Result<ChatInput> read_chat_input(const nlohmann::json& request, bool default_thinking);

}  // namespace gem::chat
