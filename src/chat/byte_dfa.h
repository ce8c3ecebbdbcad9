// Deterministic automata over bytes for the JSON Schema compiler (json_schema.h): a string's
// `pattern` and `format`, its length bounds when it has either, and a number's bounds
// (minimum/maximum, exclusive or not). Each is built, trimmed to the states from which an
// accepting one can still be reached (so a matcher that follows it never walks into a dead end),
// minimised, and knows the shortest way from every state to acceptance.
//
// Pattern dialect (JSON Schema's: ECMA-262 with the `u` flag, as Ajv runs it): literals, `.`
// (any character but a line terminator), classes [...] with ranges and negation, \d \w \s and
// their negations, \t \n \r \f \v \0 \xHH \uHHHH \u{H...} \cX and escaped syntax characters,
// groups (...) (?:...) (?<name>...), alternation |, quantifiers ? * + {m} {m,} {m,n} (lazy forms
// too: the same strings match), and the anchors ^ $. A pattern is searched for, unanchored, as
// JSON Schema says: "a" matches any string holding an "a"; "^a$" only "a". Refused, by name:
// backreferences, lookaround, \b \B, \p{...}, and repetition counts over kMaxRepeat.
//
// Strings are automata over the decoded string's UTF-8 bytes, restricted to characters JSON can
// carry without a \u escape: U+0000-U+001F other than \b \f \n \r \t never match.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace gem::chat {

inline constexpr int kMaxDfaStates = 4096;  // states of one automaton, after minimisation
inline constexpr int kMaxRepeat = 1000;     // m and n of {m,n}

class ByteDfa {
 public:
  int n_states() const { return static_cast<int>(accept_.size()); }
  static constexpr int32_t kStart = 0;
  // The state after byte c, -1 when c cannot follow (every state reached can still accept).
  int32_t step(int32_t state, uint8_t c) const {
    return next_[static_cast<size_t>(state) * n_classes_ + byte_class_[c]];
  }
  bool accepting(int32_t state) const { return accept_[static_cast<size_t>(state)] != 0; }
  // The shortest completion from `state` as the bytes a matcher reads: for a JSON string's
  // automaton, '"', '\\' and the control characters are written as escapes (\" \\ \n ...).
  std::string completion(int32_t state) const;
  // completion(state).size(), and the largest over all states.
  int32_t completion_size(int32_t state) const { return dist_[static_cast<size_t>(state)]; }
  int32_t max_completion_size() const { return max_dist_; }
  bool json_string() const { return json_string_; }

  // Builders (byte_dfa.cc). Errors name what is wrong in the pattern and where.
  static Result<ByteDfa> pattern(std::string_view pattern);
  // `format` as a pattern: date, time, date-time, duration, uuid, email, hostname, ipv4, ipv6, uri (a strict subset of each:
  // see byte_dfa.cc); nullopt-like error for other names.
  static Result<ByteDfa> format(std::string_view format);
  static bool known_format(std::string_view format);
  static const char* known_formats();
  // Strings of min_chars..max_chars characters (max_chars -1: no limit).
  static ByteDfa length(int min_chars, int max_chars);
  // Strings both accept (errors: no string does, or too many states).
  static Result<ByteDfa> intersect(const ByteDfa& a, const ByteDfa& b);

  // A JSON number's text within bounds: an optional '-', an integer part without leading zeros,
  // a fraction unless `integer`; no exponent; at most kMaxBoundedDigits digits in all (a lone
  // integer part "0" not counted). Each bound is a decimal (the bound's shortest round-trip
  // spelling); the comparison is exact on the decimal values, and with at most 15 significant
  // digits the f64 a validator parses compares with the f64 bound in the same way.
  struct Bound {
    bool present = false;
    bool exclusive = false;
    bool negative = false;
    std::string int_digits;   // no leading zeros; "" for 0
    std::string frac_digits;  // no trailing zeros
  };
  static constexpr int kMaxBoundedDigits = 15;
  // multiple > 1: integers only (no fraction), divisible by it (the remainder is tracked digit
  // by digit: exact); at most kMaxMultiple.
  static constexpr int kMaxMultiple = 1000;
  static Result<ByteDfa> number(bool integer, const Bound& lo, const Bound& hi, int multiple = 1);

  // The automaton before trimming: states [n][n_classes] of targets (-1: none), state 0 the start.
  struct Raw {
    int n_classes = 0;
    uint8_t byte_class[256] = {};
    std::vector<int32_t> next;
    std::vector<uint8_t> accept;
  };
  // Trims, minimises and prepares completions; an error when nothing is accepted (`what` names
  // the automaton in the message).
  static Result<ByteDfa> finish(const Raw& raw, bool json_string, const std::string& what);

 private:
  int n_classes_ = 0;
  uint8_t byte_class_[256] = {};
  std::vector<int32_t> next_;
  std::vector<uint8_t> accept_;
  std::vector<int32_t> dist_;     // completion bytes
  std::vector<uint8_t> best_;     // the first byte of the shortest completion
  int32_t max_dist_ = 0;
  bool json_string_ = false;
};

}  // namespace gem::chat
