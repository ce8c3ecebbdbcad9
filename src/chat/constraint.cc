// The tool-choice constraint (constraint.h). It tracks the generated tokens incrementally with
// the output parser's token-level view of the grammar: a thought runs from <|channel> to
// <channel|>, a call from <|tool_call> to <tool_call|>, and "call:NAME{" opens the arguments.
#include "chat/constraint.h"

#include <deque>
#include <limits>
#include <memory>
#include <vector>

#include "chat/grammar.h"

namespace gem::chat {
namespace {
constexpr float kBanned = -std::numeric_limits<float>::infinity();
}  // namespace

Constraint make_tool_constraint(ToolChoice choice, const std::string& name, bool thinking,
                                const Tokenizer& tokenizer) {
  if (choice == ToolChoice::kAuto) return {};
  if (choice == ToolChoice::kNone) {
    return [](std::span<float> logits, std::span<const int32_t>) -> int32_t {
      if (static_cast<size_t>(tok::kToolCallStart) < logits.size()) {
        logits[tok::kToolCallStart] = kBanned;
      }
      return -1;
    };
  }
  // required / named: state tracked incrementally over the generated tokens.
  struct State {
    size_t seen = 0;
    bool in_thought = false;
    bool in_call = false;
    int calls_closed = 0;
    bool name_queued = false;
    std::deque<int32_t> forced;
  };
  auto state = std::make_shared<State>();
  std::vector<int32_t> header_tokens;
  const bool named = choice == ToolChoice::kNamed;
  // The call's opening text, as text: a name that spells a control token stays its characters.
  if (named) tokenizer.encode_text(grammar::call_header(name), header_tokens);
  return [state, header_tokens, named, thinking](std::span<float> logits,
                                                 std::span<const int32_t> gen) -> int32_t {
    State& s = *state;
    for (; s.seen < gen.size(); ++s.seen) {
      const int32_t t = gen[s.seen];
      if (t == tok::kChannelStart) s.in_thought = true;
      if (t == tok::kChannelEnd) s.in_thought = false;
      if (t == tok::kToolCallStart && !s.in_call) {
        s.in_call = true;
        if (named && !s.name_queued) {
          // The named call: its opening text is forced right after <|tool_call>.
          s.forced.assign(header_tokens.begin(), header_tokens.end());
          s.name_queued = true;
        }
      }
      if (t == tok::kToolCallEnd && s.in_call) {
        s.in_call = false;
        s.calls_closed++;
      }
    }
    if (!s.forced.empty()) {
      const int32_t t = s.forced.front();
      s.forced.pop_front();
      return t;
    }
    if (s.in_call) return -1;
    if (s.calls_closed > 0) return named ? tok::kToolRespStart : -1;
    auto ban = [&](int32_t id) {
      if (id >= 0 && static_cast<size_t>(id) < logits.size()) logits[static_cast<size_t>(id)] = kBanned;
    };
    // No call yet: the turn may not end.
    ban(tok::kEos);
    ban(tok::kTurnEnd);
    ban(tok::kToolRespStart);
    if (s.in_thought) return -1;  // let it finish thinking first
    if (thinking && gen.empty()) {
      // First step with thinking on: open the thought channel or start the call.
      for (size_t i = 0; i < logits.size(); ++i) {
        if (i != static_cast<size_t>(tok::kChannelStart) &&
            i != static_cast<size_t>(tok::kToolCallStart)) {
          logits[i] = kBanned;
        }
      }
      return -1;
    }
    return tok::kToolCallStart;
  };
}

}  // namespace gem::chat
