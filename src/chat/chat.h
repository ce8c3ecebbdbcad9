// Chat formatting: OpenAI messages + tools -> the Gemma 4 prompt, byte for byte what the official
// template (google-gemma-4-31B-it.jinja) renders through a real Jinja engine (spec §6) for the
// messages as validate_messages() normalises them (text parts joined, developer as system).
// Input gem cannot honour (image/audio parts, unknown roles, malformed tool schemas, tool
// results without a matching call, nesting deeper than kMaxJsonDepth) is an error, never a
// silent drop.
//
// Text inside messages is text: render_prompt() records which bytes are the control tokens the
// format itself inserted, and tokenize_prompt() encodes everything else with no special-token
// parsing, so content that spells "<turn|><|turn>system" or "<|tool_call>" cannot open or close
// turns. For prompts whose content spells no control token, the ids equal those of encoding
// the whole text with special-token parsing on.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"
#include "tokenizer/tokenizer.h"

namespace gem::chat {

struct RenderOptions {
  bool add_generation_prompt = true;
  bool enable_thinking = false;   // the template's enable_thinking variable
  bool emit_bos_text = true;      // render the template's leading "<bos>" text
  // Not the template: when the generation prompt is requested but the template appended none
  // although it closed the model turn (an assistant message with text after its tool results
  // ends in "<turn|>\n"), open a new model turn as a normal generation prompt would
  // (llama.cpp does the same in common_chat_params_init_gemma4). Servers should set this;
  // off, render() is byte for byte the template.
  bool reopen_model_turn = false;
};

// `messages`: the OpenAI array; `tools`: the OpenAI tools array (or null / empty). Both go
// through validate_messages() / validate_tools() (validate.h) first.
Result<std::string> render(const nlohmann::json& messages, const nlohmann::json& tools,
                           const RenderOptions& options);

// A rendered prompt with its control tokens marked.
struct Prompt {
  std::string text;  // render()'s text
  // [offset, length) of each control token the format inserted (<|turn>, <|"|>, ...), in
  // order. Every other byte is text: message content, names, arguments, the template's words.
  std::vector<std::pair<size_t, size_t>> controls;
  size_t history_bytes = 0;  // history_size(text, options)
};
Result<Prompt> render_prompt(const nlohmann::json& messages, const nlohmann::json& tools,
                             const RenderOptions& options);

struct PromptTokens {
  std::vector<int32_t> ids;
  int n_history = 0;  // leading ids that encode the first history_bytes (<bos> included)
};
// The prompt's token ids: each control range becomes its token, the text between is encoded
// with Tokenizer::encode_text (nothing in it is read as a special token). With add_bos exactly
// one <bos> leads (a rendered "<bos>" is not doubled).
PromptTokens tokenize_prompt(const Prompt& prompt, const Tokenizer& tokenizer, bool add_bos);

// The text the template appends as the generation prompt for these options
// ("<|turn>model\n" plus, with thinking off, the empty thought channel), or "" when the
// conversation ends in a tool call/response and generation continues the same model turn.
// "" too when the messages are invalid (render() reports why).
std::string generation_prefix(const nlohmann::json& messages, const RenderOptions& options);

// How much of render()'s text (rendered with `options`) is conversation that the next turn
// renders again: all of it, except that with thinking off the generation prompt's empty thought
// channel ("<|channel>thought\n<channel|>" after "<|turn>model\n") is left out, because a reply
// added to the history renders without it. A server keeps this prefix cached across turns.
size_t history_size(std::string_view rendered, const RenderOptions& options);

}  // namespace gem::chat
