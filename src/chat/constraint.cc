// The constraints of constraint.h. Each tracks the generated tokens incrementally with the
// output parser's token-level view of the grammar: a thought runs from <|channel> to <channel|>,
// a call from <|tool_call> to <tool_call|>, and "call:NAME{" opens the arguments. The JSON
// constraint reads the bytes of every candidate token through a JsonMatcher, walking the
// vocabulary sorted by bytes so that a prefix the matcher refuses rules out every token that
// starts with it at once.
#include "chat/constraint.h"

#include <algorithm>
#include <climits>
#include <deque>
#include <functional>
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

namespace {

// Whether `p` is plain JSON string text (no '"', '\\', control bytes; whole, valid UTF-8
// characters, by the matcher's rules), and how many characters it holds.
bool plain_string_text(std::string_view p, int* chars) {
  int n = 0;
  for (size_t i = 0; i < p.size();) {
    const auto c = static_cast<uint8_t>(p[i]);
    if (c < 0x20 || c == '"' || c == '\\') return false;
    size_t len = 1;
    uint8_t lo = 0x80, hi = 0xBF;
    if (c >= 0x80) {
      if (c >= 0xC2 && c <= 0xDF) {
        len = 2;
      } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
      } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
      } else {
        return false;
      }
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
      if (i + len > p.size()) return false;
      for (size_t k = 1; k < len; ++k) {
        const auto b = static_cast<uint8_t>(p[i + k]);
        if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xBF)) return false;
      }
    }
    i += len;
    ++n;
  }
  *chars = n;
  return true;
}

void sort_by_bytes(const std::vector<std::string_view>& pieces, JsonTokenTable::Sorted& s) {
  std::sort(s.ids.begin(), s.ids.end(), [&](int32_t a, int32_t b) {
    return pieces[static_cast<size_t>(a)] < pieces[static_cast<size_t>(b)];
  });
  s.lcp.assign(s.ids.size(), 0);
  for (size_t i = 1; i < s.ids.size(); ++i) {
    const std::string_view a = pieces[static_cast<size_t>(s.ids[i - 1])];
    const std::string_view b = pieces[static_cast<size_t>(s.ids[i])];
    size_t k = 0;
    while (k < a.size() && k < b.size() && a[k] == b[k]) ++k;
    s.lcp[i] = static_cast<uint16_t>(k);
  }
}

// Marks in `allowed` every token of `sorted` whose bytes the matcher accepts. `states[d]` holds
// the matcher's threads after the first d bytes of the token being read; a token reuses the
// states of the prefix it shares with the one before, and a refused prefix skips every token
// that shares it.
// `keep`, when given, must also approve the matcher's threads after the whole token.
using KeepFn = std::function<bool(const JsonMatcher::Threads& after)>;
void walk(const JsonMatcher& m, const JsonTokenTable& table, const JsonTokenTable::Sorted& sorted,
          std::vector<JsonMatcher::Threads>& states, std::vector<uint8_t>& allowed,
          const KeepFn& keep = {}) {
  if (states.size() < table.max_piece_bytes() + 1) states.resize(table.max_piece_bytes() + 1);
  states[0] = m.threads();
  size_t valid = 0;                  // states[0..valid] follow the current path
  size_t dead = SIZE_MAX;            // the last token's first refused prefix length
  for (size_t i = 0; i < sorted.ids.size(); ++i) {
    const size_t shared = sorted.lcp[i];
    if (shared >= dead) continue;    // starts with the refused prefix
    dead = SIZE_MAX;
    const int32_t id = sorted.ids[i];
    const std::string_view p = table.piece(id);
    size_t d = std::min(shared, valid);
    for (; d < p.size(); ++d) {
      m.step(states[d], static_cast<uint8_t>(p[d]), states[d + 1]);
      if (states[d + 1].empty()) break;
    }
    if (d < p.size()) {
      dead = d + 1;
      valid = d;
    } else {
      valid = p.size();
      if (!keep || keep(states[p.size()])) allowed[static_cast<size_t>(id)] = 1;
    }
  }
}

void ban_token(std::span<float> logits, int32_t id) {
  if (id >= 0 && static_cast<size_t>(id) < logits.size()) logits[static_cast<size_t>(id)] = kBanned;
}

}  // namespace

JsonTokenTable::JsonTokenTable(const Tokenizer& tokenizer) {
  const int n = tokenizer.n_vocab();
  pieces_.resize(static_cast<size_t>(n));
  for (int32_t id = 0; id < n; ++id) {
    const TokenType type = tokenizer.token_type(id);
    if ((type != TokenType::kNormal && type != TokenType::kByte) || tokenizer.is_control(id)) continue;
    const std::string_view p = tokenizer.piece_view(id, /*render_special=*/false);
    if (p.empty() || p.size() > 0xFFFF) continue;
    pieces_[static_cast<size_t>(id)] = p;
    max_piece_ = std::max(max_piece_, p.size());
    all_.ids.push_back(id);
    int chars = 0;
    if (plain_string_text(p, &chars)) {
      plain_.emplace_back(id, chars);
    } else {
      not_plain_.ids.push_back(id);
    }
  }
  sort_by_bytes(pieces_, all_);
  sort_by_bytes(pieces_, not_plain_);
}

Constraint make_json_constraint(std::shared_ptr<const JsonGrammar> grammar,
                                std::shared_ptr<const JsonTokenTable> table,
                                const Tokenizer& tokenizer, JsonConstraintOptions options) {
  enum class Phase { kStart, kThought, kJson };
  struct State {
    explicit State(std::shared_ptr<const JsonGrammar> g) : matcher(std::move(g)) {}
    JsonMatcher matcher;
    size_t seen = 0;
    Phase phase = Phase::kStart;
    int n_thought = 0;
    bool broken = false;
    std::vector<uint8_t> allowed;
    std::vector<JsonMatcher::Threads> states;
    std::vector<int32_t> completion;
    std::vector<JsonMatcher::PlainReading> plain;
    std::deque<int32_t> forced;  // the completion being played, then <turn|>
  };
  auto state = std::make_shared<State>(std::move(grammar));
  const Tokenizer* tok = &tokenizer;
  // A thought opens with "<|channel>thought\n" (the parser reads a channel without the word as
  // no thought at all), so the word is forced after <|channel>.
  std::vector<int32_t> thought_header;
  tokenizer.encode_text(std::string(grammar::kThoughtWord) + "\n", thought_header);
  return [state, table, tok, options, thought_header](std::span<float> logits,
                                                      std::span<const int32_t> gen) -> int32_t {
    State& s = *state;
    for (; s.seen < gen.size(); ++s.seen) {
      const int32_t t = gen[s.seen];
      if (s.phase == Phase::kStart) {
        if (options.thinking && t == tok::kChannelStart) {
          s.phase = Phase::kThought;
          s.forced.assign(thought_header.begin(), thought_header.end());
          s.n_thought = -static_cast<int>(thought_header.size());  // the header is not thought
          continue;
        }
        s.phase = Phase::kJson;
      }
      if (s.phase == Phase::kThought) {
        if (t == tok::kChannelEnd) {
          s.phase = Phase::kJson;
        } else {
          s.n_thought++;
        }
        continue;
      }
      const bool known = t >= 0 && t < table->n_vocab() && !table->piece(t).empty();
      if (!known || !s.matcher.feed(table->piece(t))) s.broken = true;
    }
    // Only allowed tokens are drawn, so this does not happen; if it did, end the turn.
    if (s.broken) return tok::kTurnEnd;
    if (!s.forced.empty()) {
      const int32_t t = s.forced.front();
      s.forced.pop_front();
      return t;
    }
    const int remaining =
        options.budget < 0 ? INT_MAX : options.budget - static_cast<int>(gen.size());
    // Budget accounting is in bytes: the shortest completion never takes more tokens than it has
    // bytes (every byte has a token), so "bytes + 1 (for <turn|>) fit in what is left" is an
    // invariant the constraint keeps: once it would break, the completion is forced.
    const std::string rest = s.matcher.shortest_completion();
    const int need = static_cast<int>(rest.size()) + 1;  // the instance, <turn|>
    // From here on the completion's tokens as encoded now (re-encoding what is left after each
    // one could take a token more), then <turn|>.
    auto force_completion = [&] {
      s.forced.clear();
      s.completion.clear();
      tok->encode_text(rest, s.completion);
      s.forced.assign(s.completion.begin(), s.completion.end());
      s.forced.push_back(tok::kTurnEnd);
      const int32_t t = s.forced.front();
      s.forced.pop_front();
      return t;
    };
    if (s.phase == Phase::kThought) {
      const bool over = options.reasoning_budget >= 0 && s.n_thought >= options.reasoning_budget;
      if (over || remaining <= need + 1) return tok::kChannelEnd;
      for (int32_t id : {tok::kEos, tok::kTurnEnd, tok::kToolRespStart, tok::kToolCallStart,
                         tok::kTurnStart, tok::kChannelStart}) {
        ban_token(logits, id);
      }
      return -1;
    }
    if (s.matcher.finished()) return tok::kTurnEnd;
    if (remaining <= need) return force_completion();
    s.allowed.assign(logits.size(), 0);
    // Near the end of the budget a token may not lengthen the completion past what is left after
    // it. Further away no token can: one byte adds at most max_growth_per_byte().
    const size_t margin = table->max_piece_bytes() * s.matcher.max_growth_per_byte();
    KeepFn keep;
    if (static_cast<size_t>(remaining) <= static_cast<size_t>(need) + margin) {
      keep = [&](const JsonMatcher::Threads& after) {
        return static_cast<int>(s.matcher.completion_size(after)) + 1 <= remaining - 1;
      };
    }
    // Plain text inside strings: each reading takes it up to its length limit (which only
    // shortens the completion: fewer filler characters due), or as its automaton steps through
    // it (which may lengthen the completion: near the budget's end, only as far as keep allows).
    if (s.matcher.plain_readings(&s.plain)) {
      for (const auto& [id, chars] : table->plain()) {
        if (static_cast<size_t>(id) >= s.allowed.size()) continue;
        for (const JsonMatcher::PlainReading& r : s.plain) {
          bool ok = false;
          if (r.dfa == nullptr) {
            ok = r.max_chars < 0 || chars <= r.max_chars;
          } else {
            int32_t state = r.state;
            for (char b : table->piece(id)) {
              state = r.dfa->step(state, static_cast<uint8_t>(b));
              if (state < 0) break;
            }
            ok = state >= 0 &&
                 (!keep || static_cast<int>(static_cast<size_t>(r.dfa->completion_size(state)) + r.rest) + 1 <=
                               remaining - 1);
          }
          if (ok) {
            s.allowed[static_cast<size_t>(id)] = 1;
            break;
          }
        }
      }
      walk(s.matcher, *table, table->not_plain(), s.states, s.allowed, keep);
    } else {
      walk(s.matcher, *table, table->all(), s.states, s.allowed, keep);
    }
    if (s.phase == Phase::kStart && options.thinking &&
        remaining > need + 2 + static_cast<int>(thought_header.size())) {
      s.allowed[tok::kChannelStart] = 1;
    }
    if (s.matcher.accepting()) s.allowed[tok::kTurnEnd] = 1;
    bool any = false;
    for (size_t i = 0; i < logits.size(); ++i) {
      if (s.allowed[i] != 0) {
        any = true;
      } else {
        logits[i] = kBanned;
      }
    }
    return any ? -1 : force_completion();
  };
}

Constraint make_reasoning_budget_constraint(int budget, const Tokenizer& tokenizer) {
  struct State {
    size_t seen = 0;
    bool in_thought = false;
    int n = 0;
  };
  auto state = std::make_shared<State>();
  // The thought's "thought\n" header is not counted.
  std::vector<int32_t> header;
  tokenizer.encode_text(std::string(grammar::kThoughtWord) + "\n", header);
  const int n_header = static_cast<int>(header.size());
  return [state, budget, n_header](std::span<float>, std::span<const int32_t> gen) -> int32_t {
    State& s = *state;
    for (; s.seen < gen.size(); ++s.seen) {
      const int32_t t = gen[s.seen];
      if (t == tok::kChannelStart) {
        s.in_thought = true;
        s.n = -n_header;
      } else if (t == tok::kChannelEnd) {
        s.in_thought = false;
      } else if (s.in_thought) {
        s.n++;
      }
    }
    return s.in_thought && s.n >= budget ? tok::kChannelEnd : -1;
  };
}

Constraint combine_constraints(std::vector<Constraint> constraints) {
  std::erase_if(constraints, [](const Constraint& c) { return !c; });
  if (constraints.empty()) return {};
  if (constraints.size() == 1) return constraints[0];
  return [cs = std::move(constraints)](std::span<float> logits,
                                       std::span<const int32_t> gen) -> int32_t {
    for (const Constraint& c : cs) {
      const int32_t t = c(logits, gen);
      if (t >= 0) return t;
    }
    return -1;
  };
}

}  // namespace gem::chat
