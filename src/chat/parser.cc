// The streaming output parser: generated token ids -> reasoning, content and tool-call events.
// It keys on the special token ids (tok:: in tokenizer.h), never on text that merely spells a
// control token, and it emits text as soon as it is certain.
//
// Rules (every input has a defined result; nothing here crashes or throws):
//
// Tokens. The handled ids are <eos> <turn|> <|tool_response> (end), <|turn>, <|channel>,
// <channel|>, <|tool_call>, <tool_call|> and <|"|>. Every other control, user-defined,
// unknown or unused token (<bos>, <|image|>, <tool_response|>, <|think|>, ...) is ignored as if
// absent. Every other token is text: Tokenizer::token_to_piece(id, false). Text bytes are
// assembled into UTF-8: an incomplete sequence is held until it completes; invalid bytes, and
// an incomplete sequence cut by a handled special token or by finish(), become U+FFFD. So every
// event's text is valid UTF-8 and never contains control-token text. A <|"|> outside a tool
// call is the text `"`.
//
// Start. Before anything else, `<|turn>model\n` is skipped (llama.cpp's optional start, for
// prompts that closed the model turn). A <|turn> anywhere else, or one followed by another
// role, ends the message like an end token.
//
// Thought. <|channel> followed by the text "thought" opens a thought block: the whitespace
// (space, tab, CR, LF) after "thought" is skipped, the text up to <channel|> is reasoning, and
// whitespace at the end of the block is dropped (the template writes "\n<channel|>").
// <|channel> followed by anything else (or by nothing) is dropped and what follows it is read
// as if it were absent; consecutive <|channel> tokens therefore collapse. Inside a thought,
// <|channel> is ignored. A stray <channel|> outside a thought is dropped. A second (third...)
// thought block is reasoning again, in stream order. <|tool_call> inside a thought closes the
// thought first.
//
// Tool calls (ParserOptions::tools). A call region runs from <|tool_call> to the next
// <tool_call|> (consumed), or up to the next <|tool_call>, end token, <|turn> or the end of the
// stream; nothing in a region is ever content or reasoning. Its text must read `call:NAME{`
// (NAME: at least one character, none of whitespace , : { } [ ]). When the `{` arrives,
// kToolCallBegin(NAME) is emitted and the arguments are converted from Gemma's syntax to JSON
// and streamed as kToolCallArgs fragments:
//   {key:value,...} -> {"key":value,...}   keys: bare text up to ':' (leading whitespace skipped,
//                                          kept verbatim otherwise) or <|"|>key<|"|>
//   <|"|>text<|"|>  -> "text"              any text, JSON-escaped, streamed as it arrives
//   [a,b]           -> [a,b]
//   true false null -> copied; True False None -> true false null
//   a JSON number   -> copied verbatim (after its terminator arrives)
//   any other bare text up to , } ] -> a JSON string of it, trimmed
// Whitespace after { [ , : and around values is skipped; a trailing comma is dropped; a
// missing value (`{a:}`) is null. A separator is emitted only once the next member starts, so
// the emitted text is always a prefix of valid JSON. When the top-level `}` arrives the call
// ends (kToolCallEnd); whatever follows inside the region is ignored.
// Malformed calls: a region whose header is not `call:NAME{` produces no events and is not
// counted. Garbage after the `{` (a stray } or ] or <|"|>, text after a complete value, a
// <|channel> / <channel|>) and a region cut off before its closing brace (by <tool_call|>, an
// end token, a new <|tool_call>, or finish() for any cause) are repaired: an open string is
// closed, a key without a value gets null, a half-read key is dropped, open containers are
// closed innermost first, then kToolCallEnd. Every kToolCallBegin is therefore followed by a
// kToolCallEnd whose joined arguments parse as one JSON object.
// Without ParserOptions::tools, <|tool_call> and <tool_call|> are ignored as if absent and the
// call text is ordinary content (with each <|"|> as `"`). A stray <tool_call|> (outside a call)
// is ignored as if absent too.
//
// End. <eos>, <turn|> and <|tool_response> end the message: held text is flushed, an open call
// is repaired and closed, and later tokens are ignored (ended() turns true). finish() does the
// same for a stream that stopped without an end token. finish_reason: "length" when
// finish(kLength) came without an end token, else "tool_calls" when at least one call began,
// else "stop".
//
// Events. Texts of kReasoning, kContent and kToolCallArgs are never empty; adjacent events of
// the same kind (and call) produced by one push()/finish() are merged into one.
// ParserOptions::thinking does not change the grammar: a thought block is reasoning whether or
// not the prompt enabled thinking (with thinking off the prompt already holds an empty one).
#include "chat/parser.h"

#include <string_view>
#include <utility>

#include "chat/grammar.h"

namespace gem::chat {
namespace {

namespace g = grammar;

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// How many bytes at s[0..n) form a valid (possibly incomplete) UTF-8 prefix, and how long the
// whole sequence must be. RFC 3629: no overlongs, no surrogates, nothing above U+10FFFF.
size_t utf8_valid_prefix(const unsigned char* s, size_t n, size_t* need) {
  const unsigned char b0 = s[0];
  unsigned char lo = 0x80, hi = 0xBF;
  if (b0 < 0x80) {
    *need = 1;
    return 1;
  } else if (b0 >= 0xC2 && b0 <= 0xDF) {
    *need = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    *need = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    *need = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    *need = 1;
    return 0;
  }
  size_t k = 1;
  for (; k < *need && k < n; ++k) {
    const unsigned char c = s[k];
    const unsigned char l = k == 1 ? lo : 0x80;
    const unsigned char h = k == 1 ? hi : 0xBF;
    if (c < l || c > h) break;
  }
  return k;
}

bool is_json_number(std::string_view s) {
  size_t i = 0;
  if (i < s.size() && s[i] == '-') ++i;
  if (i >= s.size()) return false;
  if (s[i] == '0') {
    ++i;
  } else if (s[i] >= '1' && s[i] <= '9') {
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
  } else {
    return false;
  }
  if (i < s.size() && s[i] == '.') {
    ++i;
    const size_t start = i;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
    if (i == start) return false;
  }
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
    const size_t start = i;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
    if (i == start) return false;
  }
  return i == s.size();
}

void append_json_escaped(std::string& out, std::string_view s) {
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          static const char* const kHex = "0123456789abcdef";
          out += "\\u00";
          out += kHex[c >> 4];
          out += kHex[c & 15];
        } else {
          out += ch;
        }
    }
  }
}

std::string json_string(std::string_view s) {
  std::string out = "\"";
  append_json_escaped(out, s);
  out += '"';
  return out;
}

std::string_view trim_ws(std::string_view s) {
  while (!s.empty() && is_ws(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_ws(s.back())) s.remove_suffix(1);
  return s;
}

}  // namespace

struct OutputParser::State {
  enum class Mode {
    kStart,          // nothing seen yet
    kStartTurn,      // after a leading <|turn>: expecting "model\n"
    kContent,
    kChannelHeader,  // after <|channel>: is it "thought"?
    kThoughtLead,    // after "thought": skipping whitespace
    kThought,
    kCall,           // inside a tool-call region
    kEnded,
  };
  // Where the arguments converter stands.
  enum class Arg {
    kObjKeyOrEnd,     // after '{' or ',' in an object
    kBareKey,         // reading a bare key
    kQuotedKey,       // inside <|"|>key<|"|>
    kAfterQuotedKey,  // expecting ':'
    kValue,           // expecting a value (after ':' or ',' in an array)
    kArrValueOrEnd,   // after '['
    kString,          // inside <|"|>...<|"|>
    kBare,            // reading a bare value
    kAfterValue,      // expecting ',' or the container's close
  };
  enum class CallPhase { kPrefix, kName, kArgs, kDone, kDead };

  Mode mode = Mode::kStart;
  bool saw_end = false;
  std::string held;        // <|turn> / <|channel> header text being matched
  std::string thought_ws;  // trailing whitespace of a thought, held until more text proves it inner
  std::string utf8;        // bytes of an unfinished UTF-8 sequence
  int n_calls = 0;

  // The current call region.
  CallPhase phase = CallPhase::kPrefix;
  std::string name;
  std::vector<char> stack;  // '{' or '[' per open container
  Arg arg = Arg::kObjKeyOrEnd;
  bool pending_comma = false;
  std::string buf;          // a key or bare value being read

  // Events of the current push()/finish(): adjacent ones of one kind merge.
  std::vector<Event>* out = nullptr;
  size_t out_start = 0;

  void emit(EventKind kind, std::string_view text, int index) {
    if (text.empty() && kind != EventKind::kToolCallEnd && kind != EventKind::kToolCallBegin) return;
    if (kind != EventKind::kToolCallBegin && kind != EventKind::kToolCallEnd &&
        out->size() > out_start) {
      Event& last = out->back();
      if (last.kind == kind && last.tool_index == index) {
        last.text += text;
        return;
      }
    }
    out->push_back(Event{kind, std::string(text), index});
  }
  void args(std::string_view s) { emit(EventKind::kToolCallArgs, s, n_calls - 1); }

  // ---- UTF-8 assembly ------------------------------------------------------------------------
  std::string assemble(std::string_view bytes) {
    utf8 += bytes;
    std::string text;
    size_t i = 0;
    const auto* s = reinterpret_cast<const unsigned char*>(utf8.data());
    while (i < utf8.size()) {
      size_t need = 1;
      const size_t k = utf8_valid_prefix(s + i, utf8.size() - i, &need);
      if (k == need) {
        text.append(utf8, i, k);
        i += k;
      } else if (i + k == utf8.size() && k > 0) {
        break;  // incomplete: wait for more bytes
      } else {
        text += kReplacement;
        i += k > 0 ? k : 1;
      }
    }
    utf8.erase(0, i);
    return text;
  }
  std::string flush_utf8() {
    std::string text = utf8.empty() ? std::string() : std::string(kReplacement);
    utf8.clear();
    return text;
  }

  // ---- text --------------------------------------------------------------------------------
  void text(std::string_view t) {
    while (!t.empty()) {
      switch (mode) {
        case Mode::kStart:
        case Mode::kContent:
          mode = Mode::kContent;
          emit(EventKind::kContent, t, -1);
          return;
        case Mode::kStartTurn: {
          const std::string kModel = std::string(g::kModelRole) + "\n";
          held += t;
          if (held.size() < kModel.size()) {
            if (kModel.compare(0, held.size(), held) != 0) end_message();
            return;
          }
          if (held.compare(0, kModel.size(), kModel) != 0) {
            end_message();
            return;
          }
          const std::string rest = held.substr(kModel.size());
          held.clear();
          mode = Mode::kStart;
          text(rest);
          return;
        }
        case Mode::kChannelHeader: {
          constexpr std::string_view kThoughtWord = g::kThoughtWord;
          held += t;
          if (held.size() < kThoughtWord.size()) {
            if (kThoughtWord.substr(0, held.size()) != held) not_a_thought();
            return;
          }
          if (held.compare(0, kThoughtWord.size(), kThoughtWord) != 0) {
            not_a_thought();
            return;
          }
          const std::string rest = held.substr(kThoughtWord.size());
          held.clear();
          mode = Mode::kThoughtLead;
          text(rest);
          return;
        }
        case Mode::kThoughtLead: {
          size_t i = 0;
          while (i < t.size() && is_ws(t[i])) ++i;
          t.remove_prefix(i);
          if (t.empty()) return;
          mode = Mode::kThought;
          break;
        }
        case Mode::kThought: {
          std::string all = thought_ws;
          all += t;
          size_t end = all.size();
          while (end > 0 && is_ws(all[end - 1])) --end;
          emit(EventKind::kReasoning, std::string_view(all).substr(0, end), -1);
          thought_ws = all.substr(end);
          return;
        }
        case Mode::kCall:
          for (char c : t) call_char(c);
          return;
        case Mode::kEnded:
          return;
      }
    }
  }

  // The held <|channel> header is not "thought": drop the marker, keep its text as content.
  void not_a_thought() {
    std::string h = std::move(held);
    held.clear();
    mode = Mode::kContent;
    text(h);
  }

  void close_thought() {
    thought_ws.clear();
    mode = Mode::kContent;
  }

  // ---- special tokens ------------------------------------------------------------------------
  // Tool-call markers without tools, and a <tool_call|> outside a call, are ignored as if
  // absent (they do not even interrupt a <|channel> header or a UTF-8 sequence).
  bool marker_ignored(int32_t id, bool tools) const {
    const bool call_marker = id == tok::kToolCallStart || id == tok::kToolCallEnd;
    return call_marker && (!tools || (id == tok::kToolCallEnd && mode != Mode::kCall));
  }

  void special(int32_t id) {
    if (id == tok::kStrDelim && mode != Mode::kCall) {
      text("\"");
      return;
    }
    // Resolve a pending header first: a special token is not "thought" / "model\n".
    if (mode == Mode::kChannelHeader) not_a_thought();
    if (mode == Mode::kStartTurn) {
      end_message();
      return;
    }
    switch (id) {
      case tok::kEos:
      case tok::kTurnEnd:
      case tok::kToolRespStart:
        end_message();
        return;
      case tok::kTurnStart:
        if (mode == Mode::kStart) {
          mode = Mode::kStartTurn;
          held.clear();
        } else {
          end_message();
        }
        return;
      case tok::kChannelStart:
        if (mode == Mode::kThought || mode == Mode::kThoughtLead) return;  // ignored inside
        if (mode == Mode::kCall) {
          call_garbage();
          return;
        }
        mode = Mode::kChannelHeader;
        held.clear();
        return;
      case tok::kChannelEnd:
        if (mode == Mode::kThought || mode == Mode::kThoughtLead) {
          close_thought();
        } else if (mode == Mode::kCall) {
          call_garbage();
        }
        return;  // stray: dropped
      case tok::kToolCallStart:
        if (mode == Mode::kThought || mode == Mode::kThoughtLead) close_thought();
        if (mode == Mode::kCall) close_call();
        begin_region();
        return;
      case tok::kToolCallEnd:  // (in a call: see above)
        close_call();
        mode = Mode::kContent;
        return;
      case tok::kStrDelim:
        call_delim();
        return;
      default:
        return;
    }
  }

  void end_message() {
    if (mode == Mode::kChannelHeader) not_a_thought();
    if (mode == Mode::kCall) close_call();
    held.clear();
    thought_ws.clear();
    mode = Mode::kEnded;
    saw_end = true;
  }

  // ---- tool calls ----------------------------------------------------------------------------
  void begin_region() {
    mode = Mode::kCall;
    phase = CallPhase::kPrefix;
    name.clear();
    buf.clear();
    stack.clear();
    pending_comma = false;
  }

  // Ends the region: repairs and closes a call cut short.
  void close_call() {
    if (phase == CallPhase::kArgs) repair();
    phase = CallPhase::kDead;
  }

  void call_garbage() {
    if (phase == CallPhase::kArgs) repair();
    if (phase != CallPhase::kDone) phase = CallPhase::kDead;
  }

  void call_char(char c) {
    switch (phase) {
      case CallPhase::kPrefix: {
        constexpr std::string_view kCall = g::kCallPrefix;
        buf += c;
        if (kCall.substr(0, buf.size()) != buf) {
          phase = CallPhase::kDead;
        } else if (buf.size() == kCall.size()) {
          buf.clear();
          phase = CallPhase::kName;
        }
        return;
      }
      case CallPhase::kName:
        if (c == g::kArgsOpen) {
          if (name.empty()) {
            phase = CallPhase::kDead;
            return;
          }
          ++n_calls;
          emit(EventKind::kToolCallBegin, name, n_calls - 1);
          phase = CallPhase::kArgs;
          open('{');
          return;
        }
        if (g::is_name_breaker(c)) {
          phase = CallPhase::kDead;
          return;
        }
        name += c;
        return;
      case CallPhase::kArgs:
        arg_char(c);
        return;
      case CallPhase::kDone:
      case CallPhase::kDead:
        return;
    }
  }

  void call_delim() {
    switch (phase) {
      case CallPhase::kPrefix:
      case CallPhase::kName:
        phase = CallPhase::kDead;
        return;
      case CallPhase::kArgs:
        arg_delim();
        return;
      default:
        return;
    }
  }

  std::string sep() {
    std::string s = pending_comma ? "," : "";
    pending_comma = false;
    return s;
  }

  void open(char bracket) {
    args(sep() + std::string(1, bracket));
    stack.push_back(bracket);
    arg = bracket == '{' ? Arg::kObjKeyOrEnd : Arg::kArrValueOrEnd;
  }

  void close_container() {
    const char open_bracket = stack.back();
    stack.pop_back();
    pending_comma = false;
    args(open_bracket == '{' ? "}" : "]");
    if (stack.empty()) {
      emit(EventKind::kToolCallEnd, "", n_calls - 1);
      phase = CallPhase::kDone;
    } else {
      arg = Arg::kAfterValue;
    }
  }

  // A bare value ends: a literal or number is copied, anything else becomes a string.
  void resolve_bare() {
    const std::string_view v = trim_ws(buf);
    std::string out = sep();
    if (v == "true" || v == "false" || v == "null") {
      out += v;
    } else if (v == "True" || v == "False") {
      out += v == "True" ? "true" : "false";
    } else if (v == "None") {
      out += "null";
    } else if (is_json_number(v)) {
      out += v;
    } else {
      out += json_string(v);
    }
    args(out);
    buf.clear();
    arg = Arg::kAfterValue;
  }

  void arg_char(char c) {
    const bool in_object = !stack.empty() && stack.back() == '{';
    switch (arg) {
      case Arg::kObjKeyOrEnd:
        if (is_ws(c)) return;
        if (c == '}') {
          close_container();
        } else if (c == ':' || c == ',' || c == '{' || c == '[' || c == ']') {
          call_garbage();
        } else {
          buf.assign(1, c);
          arg = Arg::kBareKey;
        }
        return;
      case Arg::kBareKey:
        if (c == ':') {
          args(sep() + json_string(buf) + ":");
          buf.clear();
          arg = Arg::kValue;
        } else if (c == '}') {
          call_garbage();
        } else {
          buf += c;
        }
        return;
      case Arg::kQuotedKey:
        buf += c;
        return;
      case Arg::kAfterQuotedKey:
        if (is_ws(c)) return;
        if (c == ':') {
          args(sep() + json_string(buf) + ":");
          buf.clear();
          arg = Arg::kValue;
        } else {
          call_garbage();
        }
        return;
      case Arg::kValue:
      case Arg::kArrValueOrEnd:
        if (is_ws(c)) return;
        if (c == '{' || c == '[') {
          open(c);
        } else if (c == ']' && !in_object) {
          close_container();  // `[]`, or a trailing comma dropped
        } else if (c == ',' || c == '}' || c == ']') {
          // A missing value is null; the delimiter is then read after it.
          args(sep() + "null");
          arg = Arg::kAfterValue;
          arg_char(c);
        } else {
          buf.assign(1, c);
          arg = Arg::kBare;
        }
        return;
      case Arg::kString: {
        std::string esc;
        append_json_escaped(esc, std::string_view(&c, 1));
        args(esc);
        return;
      }
      case Arg::kBare:
        if (c == ',' || c == '}' || c == ']') {
          resolve_bare();
          arg_char(c);
        } else {
          buf += c;
        }
        return;
      case Arg::kAfterValue:
        if (is_ws(c)) return;
        if (c == ',') {
          pending_comma = true;
          arg = in_object ? Arg::kObjKeyOrEnd : Arg::kValue;
        } else if ((c == '}' && in_object) || (c == ']' && !in_object)) {
          close_container();
        } else {
          call_garbage();
        }
        return;
    }
  }

  void arg_delim() {
    switch (arg) {
      case Arg::kObjKeyOrEnd:
        buf.clear();
        arg = Arg::kQuotedKey;
        return;
      case Arg::kQuotedKey:
        arg = Arg::kAfterQuotedKey;
        return;
      case Arg::kValue:
      case Arg::kArrValueOrEnd:
        args(sep() + "\"");
        arg = Arg::kString;
        return;
      case Arg::kString:
        args("\"");
        arg = Arg::kAfterValue;
        return;
      default:
        call_garbage();
        return;
    }
  }

  // Closes whatever is open so the emitted arguments form one JSON object, then ends the call.
  void repair() {
    switch (arg) {
      case Arg::kString:
        args("\"");
        break;
      case Arg::kBare:
        resolve_bare();
        break;
      case Arg::kValue:
        if (!stack.empty() && stack.back() == '{') args(sep() + "null");
        break;
      default:
        break;  // a half-read key is dropped with its pending comma
    }
    buf.clear();
    pending_comma = false;
    while (!stack.empty()) close_container();
  }
};

OutputParser::OutputParser(const Tokenizer& tokenizer, ParserOptions options)
    : tokenizer_(&tokenizer), options_(options), state_(std::make_shared<State>()) {}

void OutputParser::push(int32_t token, std::vector<Event>& out) {
  State& s = *state_;
  if (s.mode == State::Mode::kEnded) return;
  s.out = &out;
  s.out_start = out.size();
  switch (token) {
    case tok::kEos:
    case tok::kTurnEnd:
    case tok::kToolRespStart:
    case tok::kTurnStart:
    case tok::kChannelStart:
    case tok::kChannelEnd:
    case tok::kToolCallStart:
    case tok::kToolCallEnd:
    case tok::kStrDelim: {
      if (s.marker_ignored(token, options_.tools)) break;
      const std::string rest = s.flush_utf8();
      if (!rest.empty()) s.text(rest);
      s.special(token);
      break;
    }
    default: {
      if (token < 0 || token >= tokenizer_->n_vocab()) break;
      const TokenType type = tokenizer_->token_type(token);
      if (type == TokenType::kControl || type == TokenType::kUserDefined ||
          type == TokenType::kUnknown || type == TokenType::kUnused) {
        break;  // ignored as if absent
      }
      const std::string t = s.assemble(tokenizer_->token_to_piece(token, false));
      if (!t.empty()) s.text(t);
      break;
    }
  }
  s.out = nullptr;
}

void OutputParser::finish(StopCause /*cause*/, std::vector<Event>& out) {
  State& s = *state_;
  if (s.mode == State::Mode::kEnded) return;
  s.out = &out;
  s.out_start = out.size();
  const std::string rest = s.flush_utf8();
  if (!rest.empty()) s.text(rest);
  const bool saw_end = s.saw_end;
  s.end_message();
  s.saw_end = saw_end;  // finish() is not an end token
  s.out = nullptr;
}

int OutputParser::n_tool_calls() const { return state_->n_calls; }

bool OutputParser::ended() const { return state_->saw_end; }

std::string OutputParser::finish_reason(StopCause cause) const {
  if (cause == StopCause::kLength && !state_->saw_end) return "length";
  return state_->n_calls > 0 ? "tool_calls" : "stop";
}

}  // namespace gem::chat
