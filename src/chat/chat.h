// Chat formatting: OpenAI messages + tools -> the Gemma 4 prompt, byte for byte what the official
// template (google-gemma-4-31B-it.jinja) renders through a real Jinja engine (spec §6).
// Input gem cannot honour (image/audio parts, unknown roles, malformed tool schemas, tool
// results without a matching call) is an error, never a silent drop.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "base/status.h"

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

// `messages`: the OpenAI array; `tools`: the OpenAI tools array (or null / empty).
Result<std::string> render(const nlohmann::json& messages, const nlohmann::json& tools,
                           const RenderOptions& options);

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
