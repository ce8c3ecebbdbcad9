// byte_dfa.h: patterns parsed to a small syntax tree, compiled to a Thompson NFA over UTF-8
// bytes, made deterministic by subset construction over byte classes, then trimmed (only states
// that can still accept), minimised (Moore's partition refinement) and given their shortest
// completions (Dijkstra from the accepting states). Numbers with bounds are built directly as
// automata that compare the digits read with the bounds' digits.
#include "chat/byte_dfa.h"

#include <algorithm>
#include <array>
#include <functional>
#include <map>
#include <queue>
#include <set>

namespace gem::chat {

namespace {

constexpr int kMaxBuildStates = 20000;  // states while building, before trimming
constexpr int kMaxNfaStates = 200000;
constexpr int64_t kMaxBuildWork = 5'000'000;  // subset construction: NFA states × classes

using Range = std::pair<uint32_t, uint32_t>;  // code points, inclusive
using Ranges = std::vector<Range>;

Ranges normalized(Ranges r) {
  std::sort(r.begin(), r.end());
  Ranges out;
  for (const Range& x : r) {
    if (!out.empty() && x.first <= out.back().second + 1) {
      out.back().second = std::max(out.back().second, x.second);
    } else {
      out.push_back(x);
    }
  }
  return out;
}

Ranges complement(const Ranges& r) {
  Ranges out;
  uint32_t next = 0;
  for (const Range& x : normalized(r)) {
    if (x.first > next) out.push_back({next, x.first - 1});
    next = x.second + 1;
  }
  if (next <= 0x10FFFF) out.push_back({next, 0x10FFFF});
  return out;
}

Ranges intersect_ranges(const Ranges& a, const Ranges& b) {
  Ranges out;
  for (const Range& x : a) {
    for (const Range& y : b) {
      const uint32_t lo = std::max(x.first, y.first), hi = std::min(x.second, y.second);
      if (lo <= hi) out.push_back({lo, hi});
    }
  }
  return normalized(out);
}

// Characters a JSON string carries without \u: no surrogates (no UTF-8 form), and of the
// controls only \b \t \n \f \r.
const Ranges& encodable() {
  static const Ranges r = {{0x08, 0x0A}, {0x0C, 0x0D}, {0x20, 0xD7FF}, {0xE000, 0x10FFFF}};
  return r;
}

// UTF-8 byte-range sequences for code points [lo, hi] (one encoded length, no surrogates): the
// splitting of utf8-ranges / Go's regexp/syntax, so each sequence is a product of byte ranges.
using ByteSeq = std::vector<std::pair<uint8_t, uint8_t>>;
int utf8_encode(uint32_t c, uint8_t* b) {
  if (c < 0x80) {
    b[0] = static_cast<uint8_t>(c);
    return 1;
  }
  if (c < 0x800) {
    b[0] = static_cast<uint8_t>(0xC0 | (c >> 6));
    b[1] = static_cast<uint8_t>(0x80 | (c & 0x3F));
    return 2;
  }
  if (c < 0x10000) {
    b[0] = static_cast<uint8_t>(0xE0 | (c >> 12));
    b[1] = static_cast<uint8_t>(0x80 | ((c >> 6) & 0x3F));
    b[2] = static_cast<uint8_t>(0x80 | (c & 0x3F));
    return 3;
  }
  b[0] = static_cast<uint8_t>(0xF0 | (c >> 18));
  b[1] = static_cast<uint8_t>(0x80 | ((c >> 12) & 0x3F));
  b[2] = static_cast<uint8_t>(0x80 | ((c >> 6) & 0x3F));
  b[3] = static_cast<uint8_t>(0x80 | (c & 0x3F));
  return 4;
}

void utf8_sequences(uint32_t lo, uint32_t hi, std::vector<ByteSeq>& out) {
  if (lo > hi) return;
  // One encoded length at a time.
  for (uint32_t limit : {0x7Fu, 0x7FFu, 0xFFFFu}) {
    if (lo <= limit && hi > limit) {
      utf8_sequences(lo, limit, out);
      utf8_sequences(limit + 1, hi, out);
      return;
    }
  }
  // Split until every continuation byte ranges over its whole 6 bits or the prefix is shared.
  for (int i = 1; i < 4; ++i) {
    const uint32_t m = (1u << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        utf8_sequences(lo, lo | m, out);
        utf8_sequences((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        utf8_sequences(lo, (hi & ~m) - 1, out);
        utf8_sequences(hi & ~m, hi, out);
        return;
      }
    }
  }
  uint8_t a[4], b[4];
  const int n = utf8_encode(lo, a);
  utf8_encode(hi, b);
  ByteSeq seq;
  for (int i = 0; i < n; ++i) seq.push_back({a[i], b[i]});
  out.push_back(std::move(seq));
}

// ---------------------------------------------------------------------------------------------
// The pattern's syntax tree

struct Rx {
  enum Kind { kSet, kCat, kAlt, kRepeat, kBol, kEol } kind = kCat;
  Ranges set;            // kSet
  std::vector<Rx> subs;  // kCat, kAlt, kRepeat (one)
  int min = 0, max = -1;
};

class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  Result<Rx> parse() {
    // Decode the pattern as UTF-8 code points.
    for (size_t i = 0; i < text_.size();) {
      const auto c = static_cast<uint8_t>(text_[i]);
      uint32_t cp = c;
      int len = 1;
      if (c >= 0xF0) {
        cp = c & 0x07, len = 4;
      } else if (c >= 0xE0) {
        cp = c & 0x0F, len = 3;
      } else if (c >= 0xC0) {
        cp = c & 0x1F, len = 2;
      } else if (c >= 0x80) {
        return errorf("byte %zu is not valid UTF-8", i);
      }
      if (i + static_cast<size_t>(len) > text_.size()) return errorf("byte %zu is not valid UTF-8", i);
      for (int k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<uint8_t>(text_[i + k]) & 0x3F);
      cps_.push_back(cp);
      i += static_cast<size_t>(len);
    }
    GEM_ASSIGN_OR_RETURN(Rx r, alternation(0));
    if (pos_ < cps_.size()) return err("unmatched ')'");
    return r;
  }

 private:
  Status err(const std::string& what) const {
    return errorf("%s at character %zu", what.c_str(), pos_);
  }
  bool more() const { return pos_ < cps_.size(); }
  uint32_t peek() const { return cps_[pos_]; }
  bool eat(uint32_t c) {
    if (more() && peek() == c) {
      ++pos_;
      return true;
    }
    return false;
  }

  Result<Rx> alternation(int depth) {
    if (depth > 64) return err("groups nested deeper than 64");
    Rx alt;
    alt.kind = Rx::kAlt;
    for (;;) {
      GEM_ASSIGN_OR_RETURN(Rx cat, concatenation(depth));
      alt.subs.push_back(std::move(cat));
      if (!eat('|')) break;
    }
    if (alt.subs.size() == 1) return std::move(alt.subs[0]);
    return alt;
  }

  Result<Rx> concatenation(int depth) {
    Rx cat;
    cat.kind = Rx::kCat;
    while (more() && peek() != '|' && peek() != ')') {
      GEM_ASSIGN_OR_RETURN(Rx atom, this->atom(depth));
      GEM_ASSIGN_OR_RETURN(atom, quantified(std::move(atom)));
      cat.subs.push_back(std::move(atom));
    }
    return cat;
  }

  Result<int> number() {
    if (!more() || peek() < '0' || peek() > '9') return err("expected a repetition count");
    int64_t v = 0;
    while (more() && peek() >= '0' && peek() <= '9') {
      v = std::min<int64_t>(v * 10 + (peek() - '0'), 1 << 30);
      ++pos_;
    }
    if (v > kMaxRepeat) return err("repetition count " + std::to_string(v) + " over " + std::to_string(kMaxRepeat));
    return static_cast<int>(v);
  }

  Result<Rx> quantified(Rx atom) {
    for (;;) {
      int min = 0, max = -1;
      if (eat('*')) {
      } else if (eat('+')) {
        min = 1;
      } else if (eat('?')) {
        max = 1;
      } else if (more() && peek() == '{') {
        ++pos_;
        GEM_ASSIGN_OR_RETURN(min, number());
        max = min;
        if (eat(',')) {
          max = -1;
          if (more() && peek() != '}') {
            GEM_ASSIGN_OR_RETURN(max, number());
          }
        }
        if (!eat('}')) return err("expected '}' closing a {m,n} repetition");
        if (max >= 0 && max < min) return err("repetition {m,n} with n < m");
      } else {
        return atom;
      }
      eat('?');  // lazy: the same strings match
      if (atom.kind == Rx::kBol || atom.kind == Rx::kEol) return err("nothing to repeat");
      Rx rep;
      rep.kind = Rx::kRepeat;
      rep.min = min;
      rep.max = max;
      rep.subs.push_back(std::move(atom));
      atom = std::move(rep);
    }
  }

  static Rx set_of(Ranges r) {
    Rx x;
    x.kind = Rx::kSet;
    x.set = normalized(std::move(r));
    return x;
  }
  static Ranges digits() { return {{'0', '9'}}; }
  static Ranges word() { return {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}}; }
  static Ranges space() {  // ECMA-262 WhiteSpace and LineTerminator
    return {{0x09, 0x0D}, {0x20, 0x20}, {0xA0, 0xA0}, {0x1680, 0x1680}, {0x2000, 0x200A},
            {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};
  }

  Result<uint32_t> hex(int n) {
    uint32_t v = 0;
    for (int i = 0; i < n; ++i) {
      if (!more() || !std::isxdigit(static_cast<int>(peek() < 0x80 ? peek() : 0))) return err("expected a hex digit");
      const uint32_t c = peek();
      v = v * 16 + (c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10);
      ++pos_;
    }
    return v;
  }

  // After a backslash: a class escape (\d ...) into *set, or one character into *cp.
  Status escape(bool in_class, Ranges* set, uint32_t* cp) {
    if (!more()) return err("a pattern may not end with '\\'");
    const uint32_t c = peek();
    ++pos_;
    switch (c) {
      case 'd': *set = digits(); return ok_status();
      case 'D': *set = complement(digits()); return ok_status();
      case 'w': *set = word(); return ok_status();
      case 'W': *set = complement(word()); return ok_status();
      case 's': *set = space(); return ok_status();
      case 'S': *set = complement(space()); return ok_status();
      case 't': *cp = '\t'; return ok_status();
      case 'n': *cp = '\n'; return ok_status();
      case 'r': *cp = '\r'; return ok_status();
      case 'f': *cp = '\f'; return ok_status();
      case 'v': *cp = '\v'; return ok_status();
      case '0':
        if (more() && peek() >= '0' && peek() <= '9') return err("octal escapes are not supported");
        *cp = 0;
        return ok_status();
      case 'x': {
        GEM_ASSIGN_OR_RETURN(*cp, hex(2));
        return ok_status();
      }
      case 'u':
        if (eat('{')) {
          uint32_t v = 0;
          int n = 0;
          while (more() && peek() != '}') {
            GEM_ASSIGN_OR_RETURN(uint32_t d, hex(1));
            v = v * 16 + d;
            if (++n > 6 || v > 0x10FFFF) return err("\\u{...} beyond U+10FFFF");
          }
          if (!eat('}') || n == 0) return err("expected \\u{hex digits}");
          *cp = v;
          return ok_status();
        } else {
          GEM_ASSIGN_OR_RETURN(*cp, hex(4));
          return ok_status();
        }
      case 'c':
        if (!more() || !((peek() >= 'a' && peek() <= 'z') || (peek() >= 'A' && peek() <= 'Z'))) {
          return err("expected a letter after \\c");
        }
        *cp = peek() % 32;
        ++pos_;
        return ok_status();
      case 'b':
        if (in_class) {
          *cp = 0x08;
          return ok_status();
        }
        return err("word boundaries (\\b) are not supported");
      case 'B': return err("word boundaries (\\B) are not supported");
      case 'p':
      case 'P': return err("Unicode property escapes (\\p{...}) are not supported");
      case 'k': return err("named backreferences (\\k<...>) are not supported");
      default:
        if (c >= '1' && c <= '9') return err("backreferences are not supported");
        // With the u flag only syntax characters (and '-' in a class) may be escaped.
        if (std::string_view("^$\\.*+?()[]{}|/").find(static_cast<char>(c)) != std::string_view::npos ||
            (in_class && c == '-')) {
          *cp = c;
          return ok_status();
        }
        return err("unknown escape");
    }
  }

  Result<Rx> char_class() {
    const bool negated = eat('^');
    Ranges set;
    bool first = true;
    while (more() && (peek() != ']' || false)) {
      (void)first;
      first = false;
      Ranges lo_set;
      uint32_t lo = 0;
      bool is_set = false;
      if (eat('\\')) {
        GEM_RETURN_IF_ERROR(escape(true, &lo_set, &lo));
        is_set = !lo_set.empty();
      } else {
        lo = peek();
        ++pos_;
      }
      if (is_set) {
        set.insert(set.end(), lo_set.begin(), lo_set.end());
        continue;
      }
      // A range lo-hi (a '-' first, last or after a class escape is itself).
      if (more() && peek() == '-' && pos_ + 1 < cps_.size() && cps_[pos_ + 1] != ']') {
        ++pos_;
        uint32_t hi = 0;
        Ranges hi_set;
        if (eat('\\')) {
          GEM_RETURN_IF_ERROR(escape(true, &hi_set, &hi));
          if (!hi_set.empty()) return err("a class escape cannot end a range");
        } else {
          hi = peek();
          ++pos_;
        }
        if (hi < lo) return err("range out of order in a character class");
        set.push_back({lo, hi});
      } else {
        set.push_back({lo, lo});
      }
    }
    if (!eat(']')) return err("unterminated character class");
    return set_of(negated ? complement(set) : set);
  }

  Result<Rx> atom(int depth) {
    const uint32_t c = peek();
    ++pos_;
    switch (c) {
      case '^': {
        Rx r;
        r.kind = Rx::kBol;
        return r;
      }
      case '$': {
        Rx r;
        r.kind = Rx::kEol;
        return r;
      }
      case '.': return set_of(complement({{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}}));
      case '(': {
        if (eat('?')) {
          if (eat(':')) {
          } else if (more() && peek() == '<' && pos_ + 1 < cps_.size() && cps_[pos_ + 1] != '=' &&
                     cps_[pos_ + 1] != '!') {
            while (more() && peek() != '>') ++pos_;  // a named group: the name is not needed
            if (!eat('>')) return err("unterminated group name");
          } else {
            return err("lookahead and lookbehind are not supported");
          }
        }
        GEM_ASSIGN_OR_RETURN(Rx inner, alternation(depth + 1));
        if (!eat(')')) return err("missing ')'");
        return inner;
      }
      case ')': return err("unmatched ')'");
      case '[': return char_class();
      case '*':
      case '+':
      case '?': return err("nothing to repeat");
      case '{': return err("a lone '{' (write \\{)");
      case '}': return err("a lone '}' (write \\})");
      case ']': return err("a lone ']' (write \\])");
      case '\\': {
        Ranges set;
        uint32_t cp = 0;
        GEM_RETURN_IF_ERROR(escape(false, &set, &cp));
        return set.empty() ? set_of({{cp, cp}}) : set_of(set);
      }
      default: return set_of({{c, c}});
    }
  }

  std::string_view text_;
  std::vector<uint32_t> cps_;
  size_t pos_ = 0;
};

// ---------------------------------------------------------------------------------------------
// NFA and subset construction

struct Nfa {
  struct Edge {
    uint8_t lo, hi;
    int to;
  };
  struct State {
    std::vector<Edge> edges;
    std::vector<int> eps, bol, eol;
  };
  std::vector<State> states;
  bool overflow = false;
  mutable std::vector<uint32_t> seen_;  // closure()'s marks
  mutable uint32_t generation_ = 0;

  int add() {
    if (states.size() >= static_cast<size_t>(kMaxNfaStates)) {
      overflow = true;
      return 0;
    }
    states.emplace_back();
    return static_cast<int>(states.size()) - 1;
  }

  int emit(const Rx& r, int from) {
    if (overflow) return from;
    switch (r.kind) {
      case Rx::kSet: {
        const int end = add();
        std::vector<ByteSeq> seqs;
        for (const Range& x : intersect_ranges(r.set, encodable())) utf8_sequences(x.first, x.second, seqs);
        for (const ByteSeq& seq : seqs) {
          int cur = from;
          for (size_t i = 0; i < seq.size(); ++i) {
            const int to = i + 1 == seq.size() ? end : add();
            if (overflow) return from;
            states[static_cast<size_t>(cur)].edges.push_back({seq[i].first, seq[i].second, to});
            cur = to;
          }
        }
        return end;
      }
      case Rx::kCat: {
        int cur = from;
        for (const Rx& s : r.subs) cur = emit(s, cur);
        return cur;
      }
      case Rx::kAlt: {
        const int end = add();
        for (const Rx& s : r.subs) {
          const int start = add();
          if (overflow) return from;
          states[static_cast<size_t>(from)].eps.push_back(start);
          const int e = emit(s, start);
          if (overflow) return from;
          states[static_cast<size_t>(e)].eps.push_back(end);
        }
        return end;
      }
      case Rx::kRepeat: {
        int cur = from;
        for (int i = 0; i < r.min && !overflow; ++i) cur = emit(r.subs[0], cur);
        if (r.max < 0) {
          const int loop = add();
          if (overflow) return from;
          states[static_cast<size_t>(cur)].eps.push_back(loop);
          const int e = emit(r.subs[0], loop);
          if (overflow) return from;
          states[static_cast<size_t>(e)].eps.push_back(loop);
          return loop;
        }
        const int end = add();
        for (int i = r.min; i < r.max && !overflow; ++i) {
          states[static_cast<size_t>(cur)].eps.push_back(end);
          cur = emit(r.subs[0], cur);
        }
        if (overflow) return from;
        states[static_cast<size_t>(cur)].eps.push_back(end);
        return end;
      }
      case Rx::kBol:
      case Rx::kEol: {
        const int end = add();
        if (overflow) return from;
        (r.kind == Rx::kBol ? states[static_cast<size_t>(from)].bol : states[static_cast<size_t>(from)].eol)
            .push_back(end);
        return end;
      }
    }
    return from;
  }

  // The states reachable from `set` through ε (and ^ at the start, $ when asked).
  std::vector<int> closure(std::vector<int> set, bool at_start, bool at_end) const {
    // Marks by generation: one array for every call (a fresh one per call cost seconds on
    // patterns with tens of thousands of NFA states).
    if (seen_.size() != states.size()) seen_.assign(states.size(), 0);
    if (++generation_ == 0) {
      std::fill(seen_.begin(), seen_.end(), 0);
      generation_ = 1;
    }
    const uint32_t gen = generation_;
    std::vector<int> stack;
    std::vector<int> unique;
    for (int s : set) {
      if (seen_[static_cast<size_t>(s)] != gen) {
        seen_[static_cast<size_t>(s)] = gen;
        unique.push_back(s);
      }
    }
    set = std::move(unique);
    stack = set;
    auto visit = [&](int t) {
      if (seen_[static_cast<size_t>(t)] != gen) {
        seen_[static_cast<size_t>(t)] = gen;
        set.push_back(t);
        stack.push_back(t);
      }
    };
    while (!stack.empty()) {
      const int s = stack.back();
      stack.pop_back();
      const State& st = states[static_cast<size_t>(s)];
      for (int t : st.eps) visit(t);
      if (at_start) {
        for (int t : st.bol) visit(t);
      }
      if (at_end) {
        for (int t : st.eol) visit(t);
      }
    }
    std::sort(set.begin(), set.end());
    return set;
  }
};

Result<ByteDfa::Raw> determinize(const Nfa& nfa, int start, int final) {
  ByteDfa::Raw raw;
  // Byte classes: bytes no edge tells apart.
  std::array<bool, 257> cut{};
  cut[0] = true;
  for (const Nfa::State& s : nfa.states) {
    for (const Nfa::Edge& e : s.edges) {
      cut[e.lo] = true;
      cut[static_cast<size_t>(e.hi) + 1] = true;
    }
  }
  std::vector<uint8_t> rep;
  for (int b = 0; b < 256; ++b) {
    if (cut[static_cast<size_t>(b)]) rep.push_back(static_cast<uint8_t>(b));
    raw.byte_class[b] = static_cast<uint8_t>(rep.size() - 1);
  }
  raw.n_classes = static_cast<int>(rep.size());
  std::map<std::vector<int>, int> ids;
  std::vector<std::vector<int>> sets;
  // State 0 is the start (^ may match there); a later state with the same NFA set is another
  // DFA state, since ^ no longer can.
  sets.push_back(nfa.closure({start}, true, false));
  size_t done = 0;
  int64_t work = 0;  // NFA states visited: bounded, so that no pattern costs more than ~50 ms
  while (done < sets.size()) {
    const std::vector<int> cur = sets[done];
    work += static_cast<int64_t>(cur.size()) * raw.n_classes;
    if (work > kMaxBuildWork) {
      return errorf("building its automaton takes more than %lld steps; simplify the pattern",
                    static_cast<long long>(kMaxBuildWork));
    }
    const bool at_start = done == 0;
    const std::vector<int> end = nfa.closure(cur, at_start, true);
    raw.accept.push_back(std::binary_search(end.begin(), end.end(), final) ? 1 : 0);
    for (int c = 0; c < raw.n_classes; ++c) {
      const uint8_t b = rep[static_cast<size_t>(c)];
      std::vector<int> to;
      for (int s : cur) {
        for (const Nfa::Edge& e : nfa.states[static_cast<size_t>(s)].edges) {
          if (e.lo <= b && b <= e.hi) to.push_back(e.to);
        }
      }
      int id = -1;
      if (!to.empty()) {
        std::sort(to.begin(), to.end());
        to.erase(std::unique(to.begin(), to.end()), to.end());
        to = nfa.closure(to, false, false);
        auto [it, added] = ids.emplace(to, static_cast<int>(sets.size()));
        if (added) {
          if (sets.size() >= static_cast<size_t>(kMaxBuildStates)) {
            return errorf("the automaton needs more than %d states while it is built; simplify the "
                          "pattern", kMaxBuildStates);
          }
          sets.push_back(to);
        }
        id = it->second;
      }
      raw.next.push_back(id);
    }
    ++done;
  }
  return raw;
}

// Bytes a JSON string writes as two (\" \\ \b \f \n \r \t), -1 for ones it cannot write.
int json_cost(uint8_t b) {
  if (b == '"' || b == '\\' || b == '\b' || b == '\f' || b == '\n' || b == '\r' || b == '\t') return 2;
  return b < 0x20 ? -1 : 1;
}

void append_json_byte(std::string& out, uint8_t b) {
  switch (b) {
    case '"': out += "\\\""; return;
    case '\\': out += "\\\\"; return;
    case '\b': out += "\\b"; return;
    case '\f': out += "\\f"; return;
    case '\n': out += "\\n"; return;
    case '\r': out += "\\r"; return;
    case '\t': out += "\\t"; return;
    default: out += static_cast<char>(b);
  }
}

// Which byte stands for a class in completions: the cheapest, letters and digits first.
int byte_rank(uint8_t b) {
  if (b >= 'a' && b <= 'z') return b - 'a';
  if (b >= '0' && b <= '9') return 32 + b - '0';
  if (b >= 'A' && b <= 'Z') return 64 + b - 'A';
  return 128 + b;
}

}  // namespace

Result<ByteDfa> ByteDfa::finish(const Raw& raw, bool json_string, const std::string& what) {
  const int n = static_cast<int>(raw.accept.size());
  const int nc = raw.n_classes;
  auto next = [&](int s, int c) { return raw.next[static_cast<size_t>(s) * nc + c]; };
  // Reachable from the start, then able to accept.
  std::vector<uint8_t> reach(n, 0), live(n, 0);
  std::vector<int> stack = {0};
  reach[0] = 1;
  std::vector<std::vector<int>> rev(n);
  while (!stack.empty()) {
    const int s = stack.back();
    stack.pop_back();
    for (int c = 0; c < nc; ++c) {
      const int t = next(s, c);
      if (t < 0) continue;
      rev[static_cast<size_t>(t)].push_back(s);
      if (!reach[static_cast<size_t>(t)]) {
        reach[static_cast<size_t>(t)] = 1;
        stack.push_back(t);
      }
    }
  }
  for (int s = 0; s < n; ++s) {
    if (reach[static_cast<size_t>(s)] && raw.accept[static_cast<size_t>(s)]) {
      live[static_cast<size_t>(s)] = 1;
      stack.push_back(s);
    }
  }
  while (!stack.empty()) {
    const int s = stack.back();
    stack.pop_back();
    for (int p : rev[static_cast<size_t>(s)]) {
      if (!live[static_cast<size_t>(p)]) {
        live[static_cast<size_t>(p)] = 1;
        stack.push_back(p);
      }
    }
  }
  if (!live[0]) return errorf("%s matches nothing", what.c_str());
  // Hopcroft's partition refinement over the live states and a sink (the target of every
  // missing or dead transition): blocks start split by acceptance and are split by the
  // preimages of blocks under each class until no splitter is left (n·classes·log n).
  const int sink = n;
  auto target = [&](int s, int c) {
    if (s == sink) return sink;
    const int t = next(s, c);
    return t >= 0 && live[static_cast<size_t>(t)] ? t : sink;
  };
  // Preimages per class, as offsets into one array.
  std::vector<int> pre_start(static_cast<size_t>(nc) * (n + 2), 0), pre;
  for (int c = 0; c < nc; ++c) {
    int* start = &pre_start[static_cast<size_t>(c) * (n + 2)];
    for (int s = 0; s <= n; ++s) {
      if (s == sink || live[static_cast<size_t>(s)]) start[target(s, c) + 1]++;
    }
    for (int t = 0; t <= n; ++t) start[t + 1] += start[t];
  }
  pre.resize(static_cast<size_t>(nc) * (n + 1));
  {
    std::vector<int> fill(pre_start);
    for (int c = 0; c < nc; ++c) {
      const size_t base = static_cast<size_t>(c) * (n + 1);
      int* f = &fill[static_cast<size_t>(c) * (n + 2)];
      for (int s = 0; s <= n; ++s) {
        if (s == sink || live[static_cast<size_t>(s)]) pre[base + static_cast<size_t>(f[target(s, c)]++)] = s;
      }
    }
  }
  std::vector<int> block(static_cast<size_t>(n) + 1, -1);
  std::vector<std::vector<int>> members;
  {
    std::vector<int> acc, rej;
    for (int s = 0; s < n; ++s) {
      if (live[static_cast<size_t>(s)]) (raw.accept[static_cast<size_t>(s)] ? acc : rej).push_back(s);
    }
    rej.push_back(sink);
    for (auto* b : {&acc, &rej}) {
      if (b->empty()) continue;
      for (int s : *b) block[static_cast<size_t>(s)] = static_cast<int>(members.size());
      members.push_back(std::move(*b));
    }
  }
  std::vector<std::pair<int, int>> work;  // (block, class)
  std::vector<uint8_t> in_work;           // [block * nc + class]
  auto push_work = [&](int b, int c) {
    if (in_work.size() < (static_cast<size_t>(b) + 1) * nc) in_work.resize((static_cast<size_t>(b) + 1) * nc, 0);
    if (in_work[static_cast<size_t>(b) * nc + c]) return;
    in_work[static_cast<size_t>(b) * nc + c] = 1;
    work.push_back({b, c});
  };
  if (members.size() == 2) {
    const int smaller = members[0].size() <= members[1].size() ? 0 : 1;
    for (int c = 0; c < nc; ++c) push_work(smaller, c);
  }
  std::vector<uint8_t> seen(static_cast<size_t>(n) + 1, 0);
  std::vector<int> x, touched;
  std::vector<std::vector<int>> marked;
  while (!work.empty()) {
    const auto [a, c] = work.back();
    work.pop_back();
    in_work[static_cast<size_t>(a) * nc + c] = 0;
    // X: the states that class c takes into block a.
    x.clear();
    const size_t base = static_cast<size_t>(c) * (n + 1);
    const int* start = &pre_start[static_cast<size_t>(c) * (n + 2)];
    for (int t : members[static_cast<size_t>(a)]) {
      for (int k = start[t]; k < start[t + 1]; ++k) {
        const int s = pre[base + static_cast<size_t>(k)];
        if (!seen[static_cast<size_t>(s)]) {
          seen[static_cast<size_t>(s)] = 1;
          x.push_back(s);
        }
      }
    }
    if (marked.size() < members.size()) marked.resize(members.size());
    touched.clear();
    for (int s : x) {
      seen[static_cast<size_t>(s)] = 0;
      const int b = block[static_cast<size_t>(s)];
      if (marked[static_cast<size_t>(b)].empty()) touched.push_back(b);
      marked[static_cast<size_t>(b)].push_back(s);
    }
    for (int y : touched) {
      std::vector<int> in = std::move(marked[static_cast<size_t>(y)]);
      marked[static_cast<size_t>(y)].clear();
      if (in.size() < members[static_cast<size_t>(y)].size()) {
        // Split y: the marked states form block z, the rest stay in y.
        const int z = static_cast<int>(members.size());
        for (int s : in) block[static_cast<size_t>(s)] = z;
        std::vector<int> rest;
        for (int s : members[static_cast<size_t>(y)]) {
          if (block[static_cast<size_t>(s)] == y) rest.push_back(s);
        }
        members[static_cast<size_t>(y)] = std::move(rest);
        members.push_back(in);
        marked.resize(members.size());
        for (int d = 0; d < nc; ++d) {
          const bool y_waiting = static_cast<size_t>(y) * nc + d < in_work.size() &&
                                 in_work[static_cast<size_t>(y) * nc + d];
          if (y_waiting || members[static_cast<size_t>(z)].size() <= members[static_cast<size_t>(y)].size()) {
            push_work(z, d);
          } else {
            push_work(y, d);
          }
        }
      }
    }
    if (members.size() > static_cast<size_t>(kMaxDfaStates) + 1) break;  // refused below
  }
  // Blocks of live states, numbered apart from the sink's.
  const int sink_block = block[static_cast<size_t>(sink)];
  int n_blocks = 0;
  {
    std::vector<int> renumber(members.size(), -1);
    for (size_t b = 0; b < members.size(); ++b) {
      if (static_cast<int>(b) != sink_block) renumber[b] = n_blocks++;
    }
    for (int s = 0; s < n; ++s) {
      if (live[static_cast<size_t>(s)]) block[static_cast<size_t>(s)] = renumber[static_cast<size_t>(block[static_cast<size_t>(s)])];
    }
  }
  if (n_blocks > kMaxDfaStates) {
    return errorf("%s needs an automaton of more than %d states; simplify it", what.c_str(),
                  kMaxDfaStates);
  }
  // Number the blocks from the start in breadth-first order; one representative each.
  std::vector<int> order(static_cast<size_t>(n_blocks), -1), rep_of;
  std::vector<int> bfs = {0};
  order[static_cast<size_t>(block[0])] = 0;
  rep_of.push_back(0);
  for (size_t i = 0; i < bfs.size(); ++i) {
    for (int c = 0; c < nc; ++c) {
      const int t = next(bfs[i], c);
      if (t < 0 || !live[static_cast<size_t>(t)]) continue;
      int& o = order[static_cast<size_t>(block[static_cast<size_t>(t)])];
      if (o < 0) {
        o = static_cast<int>(rep_of.size());
        rep_of.push_back(t);
        bfs.push_back(t);
      }
    }
  }
  const int m = static_cast<int>(rep_of.size());
  // Classes again: raw classes whose columns agree become one; a class that leads nowhere is
  // the dead class.
  std::map<std::vector<int>, int> col_ids;
  std::vector<int> class_map(static_cast<size_t>(nc));
  std::vector<std::vector<int>> cols;
  for (int c = 0; c < nc; ++c) {
    std::vector<int> col(static_cast<size_t>(m));
    for (int s = 0; s < m; ++s) {
      const int t = next(rep_of[static_cast<size_t>(s)], c);
      col[static_cast<size_t>(s)] = t >= 0 && live[static_cast<size_t>(t)]
                                        ? order[static_cast<size_t>(block[static_cast<size_t>(t)])]
                                        : -1;
    }
    auto [it, added] = col_ids.emplace(col, static_cast<int>(cols.size()));
    if (added) cols.push_back(col);
    class_map[static_cast<size_t>(c)] = it->second;
  }
  ByteDfa d;
  d.json_string_ = json_string;
  d.n_classes_ = static_cast<int>(cols.size());
  for (int b = 0; b < 256; ++b) d.byte_class_[b] = static_cast<uint8_t>(class_map[raw.byte_class[b]]);
  d.next_.assign(static_cast<size_t>(m) * d.n_classes_, -1);
  d.accept_.assign(static_cast<size_t>(m), 0);
  for (int s = 0; s < m; ++s) {
    d.accept_[static_cast<size_t>(s)] = raw.accept[static_cast<size_t>(rep_of[static_cast<size_t>(s)])];
    for (int c = 0; c < d.n_classes_; ++c) {
      d.next_[static_cast<size_t>(s) * d.n_classes_ + c] = cols[static_cast<size_t>(c)][static_cast<size_t>(s)];
    }
  }
  // The cheapest byte of each class; a JSON string never uses the controls it cannot write.
  std::vector<int> class_byte(static_cast<size_t>(d.n_classes_), -1), class_cost(static_cast<size_t>(d.n_classes_), -1);
  for (int b = 0; b < 256; ++b) {
    const int cost = json_string ? json_cost(static_cast<uint8_t>(b)) : 1;
    if (cost < 0) continue;
    const int c = d.byte_class_[b];
    int& cb = class_byte[static_cast<size_t>(c)];
    int& cc = class_cost[static_cast<size_t>(c)];
    if (cb < 0 || cost < cc || (cost == cc && byte_rank(static_cast<uint8_t>(b)) < byte_rank(static_cast<uint8_t>(cb)))) {
      cb = b;
      cc = cost;
    }
  }
  // Shortest completions: Dijkstra from the accepting states over reversed edges.
  std::vector<std::vector<std::pair<int, int>>> back(static_cast<size_t>(m));  // (from, class)
  for (int s = 0; s < m; ++s) {
    for (int c = 0; c < d.n_classes_; ++c) {
      const int t = d.next_[static_cast<size_t>(s) * d.n_classes_ + c];
      if (t >= 0 && class_byte[static_cast<size_t>(c)] >= 0) back[static_cast<size_t>(t)].push_back({s, c});
    }
  }
  constexpr int32_t kInf = INT32_MAX / 2;
  d.dist_.assign(static_cast<size_t>(m), kInf);
  d.best_.assign(static_cast<size_t>(m), 0);
  using Item = std::pair<int32_t, int>;
  std::priority_queue<Item, std::vector<Item>, std::greater<Item>> q;
  for (int s = 0; s < m; ++s) {
    if (d.accept_[static_cast<size_t>(s)]) {
      d.dist_[static_cast<size_t>(s)] = 0;
      q.push({0, s});
    }
  }
  while (!q.empty()) {
    const auto [dist, t] = q.top();
    q.pop();
    if (dist != d.dist_[static_cast<size_t>(t)]) continue;
    for (const auto& [s, c] : back[static_cast<size_t>(t)]) {
      const int32_t nd = dist + class_cost[static_cast<size_t>(c)];
      if (nd < d.dist_[static_cast<size_t>(s)]) {
        d.dist_[static_cast<size_t>(s)] = nd;
        d.best_[static_cast<size_t>(s)] = static_cast<uint8_t>(class_byte[static_cast<size_t>(c)]);
        q.push({nd, s});
      }
    }
  }
  for (int s = 0; s < m; ++s) {
    // Every state can accept (trimmed above) through bytes a JSON string can write (the
    // patterns never match the others).
    if (d.dist_[static_cast<size_t>(s)] >= kInf) {
      return errorf("%s: an automaton state cannot complete (internal)", what.c_str());
    }
    d.max_dist_ = std::max(d.max_dist_, d.dist_[static_cast<size_t>(s)]);
  }
  return d;
}

std::string ByteDfa::completion(int32_t state) const {
  std::string out;
  while (!accepting(state)) {
    const uint8_t b = best_[static_cast<size_t>(state)];
    if (json_string_) {
      append_json_byte(out, b);
    } else {
      out += static_cast<char>(b);
    }
    state = step(state, b);
  }
  return out;
}

Result<ByteDfa> ByteDfa::pattern(std::string_view pattern) {
  Parser parser(pattern);
  Result<Rx> rx = parser.parse();
  if (!rx.ok()) return rx.status();
  // Searched for: any characters before and after (JSON Schema patterns are not anchored).
  Rx any;
  any.kind = Rx::kRepeat;
  Rx ch;
  ch.kind = Rx::kSet;
  ch.set = {{0, 0x10FFFF}};
  any.subs.push_back(ch);
  Rx whole;
  whole.kind = Rx::kCat;
  whole.subs = {any, std::move(*rx), any};
  Nfa nfa;
  const int start = nfa.add();
  const int final = nfa.emit(whole, start);
  if (nfa.overflow) {
    return errorf("the pattern needs more than %d automaton states; simplify it", kMaxNfaStates);
  }
  GEM_ASSIGN_OR_RETURN(Raw raw, determinize(nfa, start, final));
  return finish(raw, /*json_string=*/true, "the pattern");
}

namespace {

// Each format as a pattern that admits a strict subset of what the format allows (as RFC 3339,
// RFC 4122, RFC 5321, RFC 3986, RFC 1123 and ajv-formats' "full" mode check them; uri: http(s)
// URLs without query, user or port; ipv6: the full eight groups; hostname: up to five labels of
// up to 20 characters, well within 253; duration: PnYnMnD(TnH), PTnHnMnS or PnW): outputs in these shapes validate.
struct Format {
  const char* name;
  const char* pattern;
};
#define GEM_DATE                                                                         \
  "(\\d{4}-(0[13578]|1[02])-(0[1-9]|[12]\\d|3[01])|\\d{4}-(0[469]|11)-(0[1-9]|[12]\\d|30)|" \
  "\\d{4}-02-(0[1-9]|1\\d|2[0-8])|(\\d\\d(0[48]|[2468][048]|[13579][26])|"                 \
  "([02468][048]|[13579][26])00)-02-29)"
#define GEM_TIME "([01]\\d|2[0-3]):[0-5]\\d:[0-5]\\d(\\.\\d{1,6})?(Z|[+-]([01]\\d|2[0-3]):[0-5]\\d)"
constexpr Format kFormats[] = {
    {"date", "^" GEM_DATE "$"},
    {"time", "^" GEM_TIME "$"},
    {"date-time", "^" GEM_DATE "T" GEM_TIME "$"},
    {"uuid", "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"},
    {"email", "^[A-Za-z0-9_+-]+(\\.[A-Za-z0-9_+-]+)*@([A-Za-z0-9]([A-Za-z0-9-]{0,20}[A-Za-z0-9])?\\.)+[A-Za-z]{2,12}$"},
    {"ipv4", "^((25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)\\.){3}(25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)$"},
    {"uri", "^https?://[a-z0-9-]+(\\.[a-z0-9-]+)*(/[A-Za-z0-9._~-]*)*$"},
    {"ipv6", "^([0-9a-f]{1,4}:){7}[0-9a-f]{1,4}$"},
    {"hostname", "^[a-z0-9]([a-z0-9-]{0,18}[a-z0-9])?(\\.[a-z0-9]([a-z0-9-]{0,18}[a-z0-9])?){0,4}$"},
    {"duration", "^(P(\\d{1,4}Y)?(\\d{1,4}M)?\\d{1,4}D(T\\d{1,2}H)?|PT(\\d{1,2}H)?(\\d{1,2}M)?\\d{1,2}S|P\\d{1,3}W)$"},
};
#undef GEM_DATE
#undef GEM_TIME

}  // namespace

bool ByteDfa::known_format(std::string_view format) {
  return std::any_of(std::begin(kFormats), std::end(kFormats),
                     [&](const Format& f) { return format == f.name; });
}

const char* ByteDfa::known_formats() {
  return "date, time, date-time, duration, uuid, email, hostname, ipv4, ipv6, uri";
}

Result<ByteDfa> ByteDfa::format(std::string_view format) {
  for (const Format& f : kFormats) {
    if (format == f.name) return pattern(f.pattern);
  }
  return errorf("unknown format \"%.*s\"", static_cast<int>(std::min<size_t>(format.size(), 64)), format.data());
}

ByteDfa ByteDfa::length(int min_chars, int max_chars) {
  // Class 0 starts a character (ASCII or a lead byte), class 1 continues one (10xxxxxx).
  ByteDfa d;
  d.json_string_ = true;
  d.n_classes_ = 2;
  for (int b = 0; b < 256; ++b) d.byte_class_[b] = (b & 0xC0) == 0x80 ? 1 : 0;
  const int n = (max_chars >= 0 ? max_chars : min_chars) + 1;
  d.next_.assign(static_cast<size_t>(n) * 2, -1);
  d.accept_.assign(static_cast<size_t>(n), 0);
  for (int s = 0; s < n; ++s) {
    d.next_[static_cast<size_t>(s) * 2 + 0] = s + 1 < n ? s + 1 : (max_chars < 0 ? s : -1);
    d.next_[static_cast<size_t>(s) * 2 + 1] = s;
    d.accept_[static_cast<size_t>(s)] = s >= min_chars;
  }
  return d;  // only intersected, never matched alone: no completions
}

Result<ByteDfa> ByteDfa::intersect(const ByteDfa& a, const ByteDfa& b) {
  Raw raw;
  // Classes: pairs of the two automata's classes.
  std::map<std::pair<int, int>, int> cls;
  std::vector<std::pair<int, int>> reps;
  for (int x = 0; x < 256; ++x) {
    auto [it, added] = cls.emplace(std::make_pair(a.byte_class_[x], b.byte_class_[x]), static_cast<int>(reps.size()));
    if (added) reps.push_back(it->first);
    raw.byte_class[x] = static_cast<uint8_t>(it->second);
  }
  raw.n_classes = static_cast<int>(reps.size());
  std::map<std::pair<int, int>, int> ids;
  std::vector<std::pair<int, int>> states = {{0, 0}};
  ids[{0, 0}] = 0;
  for (size_t i = 0; i < states.size(); ++i) {
    const auto [sa, sb] = states[i];
    raw.accept.push_back(a.accepting(sa) && b.accepting(sb));
    for (const auto& [ca, cb] : reps) {
      const int ta = a.next_[static_cast<size_t>(sa) * a.n_classes_ + ca];
      const int tb = b.next_[static_cast<size_t>(sb) * b.n_classes_ + cb];
      int id = -1;
      if (ta >= 0 && tb >= 0) {
        auto [it, added] = ids.emplace(std::make_pair(ta, tb), static_cast<int>(states.size()));
        if (added) {
          if (states.size() >= static_cast<size_t>(kMaxBuildStates)) {
            return errorf("together they need more than %d automaton states; simplify them",
                          kMaxBuildStates);
          }
          states.push_back({ta, tb});
        }
        id = it->second;
      }
      raw.next.push_back(id);
    }
  }
  return finish(raw, a.json_string_, "together they");
}

Result<ByteDfa> ByteDfa::number(bool integer, const Bound& lo, const Bound& hi, int multiple) {
  if (multiple > 1) integer = true;
  // The state read so far: phase, sign, whether a non-zero digit came, digits of the integer
  // part and of the fraction, and per bound how |x| compares with |bound| so far.
  enum Phase : uint8_t { kStart, kMinus, kZero, kInt, kDot, kFrac };
  struct S {
    uint8_t phase = kStart;
    bool neg = false, nz = false;
    uint8_t n_int = 0, n_frac = 0;
    int16_t rem = 0;  // the integer part modulo `multiple`
    // Integer phases: -1/0/1 comparing the digits with the bound's first ones, 2: more digits
    // than the bound's integer part. Fraction phases: -1/1 decided, 0 equal so far.
    int8_t cmp[2] = {0, 0};
    auto key() const { return std::make_tuple(phase, neg, nz, n_int, n_frac, cmp[0], cmp[1], rem); }
    bool operator<(const S& o) const { return key() < o.key(); }
  };
  const Bound* bounds[2] = {&lo, &hi};
  // The integer part's verdict for bound b once it ends: -1, 0 (equal), 1.
  auto int_verdict = [&](const S& s, int b) -> int {
    const size_t len = bounds[b]->int_digits.size();
    if (s.cmp[b] == 2 || s.n_int > len) return 1;
    if (s.n_int < len) return -1;
    return s.cmp[b];
  };
  auto magnitude = [&](const S& s, int b) -> int {
    const Bound& B = *bounds[b];
    int c = 0;
    if (s.phase == kZero || s.phase == kInt) {
      c = int_verdict(s, b);
      if (c == 0 && !B.frac_digits.empty()) c = -1;
    } else {
      c = s.cmp[b];
      if (c == 0 && B.frac_digits.size() > s.n_frac) c = -1;  // the bound's rest is non-zero
    }
    return c;
  };
  // sign(x - bound).
  auto value_cmp = [&](const S& s, int b) -> int {
    const Bound& B = *bounds[b];
    const bool b_zero = B.int_digits.empty() && B.frac_digits.empty();
    if (!s.nz) return b_zero ? 0 : (B.negative ? 1 : -1);
    if (!s.neg) return B.negative ? 1 : magnitude(s, b);
    return B.negative ? -magnitude(s, b) : -1;
  };
  auto accepts = [&](const S& s) {
    if (s.phase != kZero && s.phase != kInt && s.phase != kFrac) return false;
    if (s.rem != 0) return false;
    if (lo.present) {
      const int c = value_cmp(s, 0);
      if (c < 0 || (c == 0 && lo.exclusive)) return false;
    }
    if (hi.present) {
      const int c = value_cmp(s, 1);
      if (c > 0 || (c == 0 && hi.exclusive)) return false;
    }
    return true;
  };
  // Symbols: '-', '.', then the ten digits.
  auto step = [&](S s, int sym, S* out) -> bool {
    const int digits = s.n_int + s.n_frac;
    if (sym == 0) {  // '-'
      if (s.phase != kStart) return false;
      s.phase = kMinus;
      s.neg = true;
    } else if (sym == 1) {  // '.'
      if (integer || (s.phase != kZero && s.phase != kInt)) return false;
      for (int b = 0; b < 2; ++b) s.cmp[b] = static_cast<int8_t>(int_verdict(s, b));
      s.phase = kDot;
    } else {
      const int d = sym - 2;
      if (digits >= kMaxBoundedDigits) return false;
      switch (s.phase) {
        case kStart:
        case kMinus:
          if (d == 0) {
            s.phase = kZero;
            break;
          }
          [[fallthrough]];
        case kInt:
          if (s.phase != kInt) s.phase = kInt;
          for (int b = 0; b < 2; ++b) {
            const std::string& bi = bounds[b]->int_digits;
            if (s.cmp[b] == 2) continue;
            if (s.n_int >= bi.size()) {
              s.cmp[b] = 2;
            } else if (s.cmp[b] == 0) {
              s.cmp[b] = static_cast<int8_t>(d < bi[s.n_int] - '0' ? -1 : d > bi[s.n_int] - '0' ? 1 : 0);
            }
          }
          s.n_int++;
          break;
        case kDot:
        case kFrac:
          s.phase = kFrac;
          for (int b = 0; b < 2; ++b) {
            if (s.cmp[b] != 0) continue;
            const std::string& bf = bounds[b]->frac_digits;
            const int bd = s.n_frac < bf.size() ? bf[s.n_frac] - '0' : 0;
            s.cmp[b] = static_cast<int8_t>(d < bd ? -1 : d > bd ? 1 : 0);
          }
          s.n_frac++;
          break;
        default:
          return false;  // kZero: no digit after a leading zero
      }
      if (d != 0) s.nz = true;
      if (multiple > 1 && s.phase == kInt) s.rem = static_cast<int16_t>((s.rem * 10 + d) % multiple);
    }
    *out = s;
    return true;
  };
  Raw raw;
  raw.n_classes = 13;  // 12 symbols and "anything else"
  for (int b = 0; b < 256; ++b) raw.byte_class[b] = 12;
  raw.byte_class[static_cast<uint8_t>('-')] = 0;
  raw.byte_class[static_cast<uint8_t>('.')] = 1;
  for (int d = 0; d < 10; ++d) raw.byte_class['0' + d] = static_cast<uint8_t>(2 + d);
  std::map<S, int> ids;
  std::vector<S> states = {S{}};
  ids[S{}] = 0;
  for (size_t i = 0; i < states.size(); ++i) {
    const S s = states[i];
    raw.accept.push_back(accepts(s));
    for (int sym = 0; sym < 13; ++sym) {
      S t;
      int id = -1;
      if (sym < 12 && step(s, sym, &t)) {
        auto [it, added] = ids.emplace(t, static_cast<int>(states.size()));
        if (added) {
          if (states.size() >= static_cast<size_t>(kMaxBuildStates)) {
            return errorf("the bounds need more than %d automaton states", kMaxBuildStates);
          }
          states.push_back(t);
        }
        id = it->second;
      }
      raw.next.push_back(id);
    }
  }
  return finish(raw, /*json_string=*/false, "the range");
}

}  // namespace gem::chat
