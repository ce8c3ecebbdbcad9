// Constraints that force Gemma 4 tool-call syntax during generation (the server's tool_choice),
// built from the same grammar the renderer writes and the output parser reads (grammar.h).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>

#include "tokenizer/tokenizer.h"

namespace gem::chat {

// Called before each draw with the tokens generated so far; it may lower entries of `logits`
// to -inf, or return a token id >= 0 to force that token without sampling; -1 samples normally.
// The same type as runtime::Constraint.
using Constraint = std::function<int32_t(std::span<float> logits,
                                         std::span<const int32_t> generated)>;

enum class ToolChoice { kAuto, kNone, kRequired, kNamed };

// tool_choice as a per-step constraint (empty for kAuto):
//  none: <|tool_call> is banned.
//  required: after the thought channel (or at once with thinking off) <|tool_call> is forced if
//    no call has been made yet, and the turn may not end before one.
//  named: as required, and the call is forced to open with "call:NAME{" (grammar::call_header);
//    after that call closes, <|tool_response> ends the turn.
// The arguments are always the model's own.
Constraint make_tool_constraint(ToolChoice choice, const std::string& name, bool thinking,
                                const Tokenizer& tokenizer);

}  // namespace gem::chat
