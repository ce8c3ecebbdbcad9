// Constraints on what the model may generate, applied per token by the engine: Gemma 4 tool-call
// syntax (the server's tool_choice, from the same grammar the renderer writes and the output
// parser reads, grammar.h), JSON that follows a schema (response_format, json_schema.h), and a
// budget on thinking (reasoning_budget).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "chat/json_schema.h"
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

// The vocabulary as bytes, arranged for the JSON constraint: the tokens that stand for plain
// bytes (normal and byte tokens; no control or user-defined token), sorted by their bytes so that
// a walk over them reads each shared prefix once, and the subset that is plain string text (no
// '"', '\\' or control byte, whole UTF-8 characters) with its character counts. Built once per
// tokenizer (about 0.2 s for Gemma's 262,144 tokens); valid while the tokenizer lives.
class JsonTokenTable {
 public:
  explicit JsonTokenTable(const Tokenizer& tokenizer);
  int n_vocab() const { return static_cast<int>(pieces_.size()); }
  std::string_view piece(int32_t id) const { return pieces_[static_cast<size_t>(id)]; }

  struct Sorted {
    std::vector<int32_t> ids;   // by bytes
    std::vector<uint16_t> lcp;  // lcp[i]: bytes ids[i] shares with ids[i-1] (0 for i = 0)
  };
  const Sorted& all() const { return all_; }
  const Sorted& not_plain() const { return not_plain_; }
  // Plain string text: (id, characters).
  const std::vector<std::pair<int32_t, int>>& plain() const { return plain_; }
  size_t max_piece_bytes() const { return max_piece_; }

 private:
  std::vector<std::string_view> pieces_;  // empty for tokens the constraint never allows
  Sorted all_, not_plain_;
  std::vector<std::pair<int32_t, int>> plain_;
  size_t max_piece_ = 0;
};

struct JsonConstraintOptions {
  bool thinking = false;      // the model may open a thought channel before the JSON
  int budget = -1;            // tokens the reply may use in all (-1: no limit)
  int reasoning_budget = -1;  // thought tokens before <channel|> is forced (-1: no limit)
};

// response_format as a per-step constraint: after an optional thought channel, only tokens whose
// bytes continue an instance of `grammar` may be drawn, <turn|> is allowed once the instance is
// complete and forced once nothing may follow. Control tokens (tool calls included) are banned.
// When the tokens left in `budget` only just suffice, the shortest completion is forced token by
// token, so a reply cut by max_tokens still parses whenever the budget allows any instance.
Constraint make_json_constraint(std::shared_ptr<const JsonGrammar> grammar,
                                std::shared_ptr<const JsonTokenTable> table,
                                const Tokenizer& tokenizer, JsonConstraintOptions options);

// Thinking limited to `budget` tokens: once a thought has that many after its "thought\n"
// header, <channel|> is forced.
Constraint make_reasoning_budget_constraint(int budget, const Tokenizer& tokenizer);

// Runs the constraints in order: each may mask the logits; the first that forces a token wins
// (the later ones catch up on it at the next step). Empty ones are skipped; none gives {}.
Constraint combine_constraints(std::vector<Constraint> constraints);

}  // namespace gem::chat
