// Native Gemma 4 chat formatting: a hand-written renderer that reproduces, byte for byte, what
// the official template (fixtures/chat/google-gemma-4-31B-it.jinja) renders through Python
// jinja2 with trim_blocks/lstrip_blocks, as Hugging Face's apply_chat_template does.
//
// How the Jinja semantics are reproduced (each named where it is used):
//   * `{{ x }}` of a non-string value is Python's str(): None, True/False, ints, floats as
//     repr() (3.5, 1e-05, 1e+16), lists as repr(); see py_str.
//   * truthiness is Python's ("" [] {} 0 None and missing keys are false); see truthy.
//   * `| trim` is str.strip() (Unicode whitespace); see py_strip.
//   * `| dictsort` sorts by key, case-insensitively (str.lower()), stable; see dictsort.
//     nlohmann::json keeps object keys sorted by bytes, so keys that differ only in case keep
//     byte order among themselves (Python would keep request order; the differential test loads
//     its JSON the same way). Case folding covers ASCII, Latin-1, Latin Extended-A, Greek,
//     Cyrillic and fullwidth Latin.
//   * the template's quirks are kept: properties named description/type/properties/required/
//     nullable vanish; an OBJECT property without `properties` lists its own non-standard
//     schema keys as if they were properties; `parameters` without `type` leaves a brace open;
//     tool-response names come from the template's id matching (the last matching call wins).
// Input the template would turn into garbage or crash on is an error instead: the messages and
// tools go through validate.h's validator first, and the walkers below stop at kMaxJsonDepth.
//
// The output is segmented (class Out): the control tokens the template writes are marked, and
// everything else -- content, names, arguments, the template's own words -- is text, which
// tokenize_prompt() never reads as special tokens.
#include "chat/chat.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <string_view>
#include <utility>
#include <vector>

#include "chat/grammar.h"
#include "chat/json_util.h"
#include "chat/validate.h"

namespace gem::chat {
namespace {

using json = nlohmann::json;
namespace g = grammar;
using detail::at_index;
using detail::at_key;
using detail::depth_error;
using detail::get;
using detail::type_error;

// The renderer's output: the prompt text, and which byte ranges of it are control tokens the
// format inserted (token()). Everything appended with += is text: message content, names,
// arguments and the template's own words, which tokenize_prompt() never reads as special tokens.
class Out {
 public:
  Out& operator+=(std::string_view text) {
    text_ += text;
    return *this;
  }
  Out& operator+=(char c) {
    text_ += c;
    return *this;
  }
  void token(std::string_view control) {
    controls_.emplace_back(text_.size(), control.size());
    text_ += control;
  }
  const std::string& text() const { return text_; }
  bool ends_with(std::string_view s) const { return text_.ends_with(s); }
  Prompt take(size_t history_bytes) {
    return Prompt{std::move(text_), std::move(controls_), history_bytes};
  }

 private:
  std::string text_;
  std::vector<std::pair<size_t, size_t>> controls_;
};

// ---------------------------------------------------------------------------------------------
// UTF-8 and Python string helpers

// Decodes one code point at s[i] (input is valid UTF-8: nlohmann validates on parse).
uint32_t decode_at(std::string_view s, size_t i, size_t* len) {
  const auto b0 = static_cast<uint8_t>(s[i]);
  size_t need = b0 < 0x80 ? 1 : b0 < 0xE0 ? 2 : b0 < 0xF0 ? 3 : 4;
  if (i + need > s.size()) need = 1;  // cannot happen for valid UTF-8
  *len = need;
  if (need == 1) return b0;
  uint32_t cp = b0 & (0x7F >> need);
  for (size_t k = 1; k < need; ++k) cp = (cp << 6) | (static_cast<uint8_t>(s[i + k]) & 0x3F);
  return cp;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// Python's str.isspace() (the characters str.strip() removes).
bool py_isspace(uint32_t cp) {
  if (cp == ' ' || (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x1F)) return true;
  switch (cp) {
    case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F:
    case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

// Python's str.strip() with no argument (Jinja's `trim` filter).
std::string py_strip(std::string_view s) {
  std::vector<std::pair<size_t, uint32_t>> cps;  // (byte offset, code point)
  for (size_t i = 0; i < s.size();) {
    size_t len = 1;
    cps.emplace_back(i, decode_at(s, i, &len));
    i += len;
  }
  size_t first = 0, last = cps.size();
  while (first < last && py_isspace(cps[first].second)) ++first;
  while (last > first && py_isspace(cps[last - 1].second)) --last;
  if (first == last) return "";
  const size_t begin = cps[first].first;
  const size_t end = last < cps.size() ? cps[last].first : s.size();
  return std::string(s.substr(begin, end - begin));
}

// Python's str.lower() for the scripts where property names plausibly have case (sort keys).
uint32_t py_lower(uint32_t c) {
  if (c >= 'A' && c <= 'Z') return c + 32;
  if (c < 0xC0) return c;
  if (c <= 0xDE) return c == 0xD7 ? c : c + 32;
  if (c >= 0x100 && c <= 0x17F) {
    if (c == 0x130 || c == 0x131 || c == 0x138 || c == 0x149 || c == 0x17F) return c;
    if (c == 0x178) return 0xFF;
    const bool odd_upper = (c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E);
    if (odd_upper) return (c & 1) ? c + 1 : c;
    return (c & 1) ? c : c + 1;
  }
  if (c >= 0x391 && c <= 0x3AB && c != 0x3A2) return c + 32;
  if (c == 0x386) return 0x3AC;
  if (c >= 0x388 && c <= 0x38A) return c + 37;
  if (c == 0x38C) return 0x3CC;
  if (c == 0x38E || c == 0x38F) return c + 63;
  if (c >= 0x410 && c <= 0x42F) return c + 32;
  if (c >= 0x400 && c <= 0x40F) return c + 80;
  if (c >= 0xFF21 && c <= 0xFF3A) return c + 32;
  return c;
}

std::string py_lower_str(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    size_t len = 1;
    const uint32_t cp = decode_at(s, i, &len);
    if (cp < 0x80) {
      out += static_cast<char>(py_lower(cp));
    } else {
      append_utf8(out, py_lower(cp));
    }
    i += len;
  }
  return out;
}

// Python's repr() of a float (the shortest round-trip digits; exponent form when the decimal
// point position is <= -4 or > 16, as float_repr_style 'short' formats it).
std::string py_float(double d) {
  if (d != d) return "nan";
  if (d == HUGE_VAL) return "inf";
  if (d == -HUGE_VAL) return "-inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  std::string sign;
  size_t p = 0;
  if (sci[0] == '-') {
    sign = "-";
    p = 1;
  }
  const size_t e = sci.find('e');
  std::string digits;
  for (size_t i = p; i < e; ++i) {
    if (sci[i] != '.') digits += sci[i];
  }
  const int exp10 = std::stoi(sci.substr(e + 1));
  const int decpt = exp10 + 1;  // value = 0.DIGITS x 10^decpt
  const int n = static_cast<int>(digits.size());
  std::string out = sign;
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) {
      out += "0." + std::string(static_cast<size_t>(-decpt), '0') + digits;
    } else if (decpt >= n) {
      out += digits + std::string(static_cast<size_t>(decpt - n), '0') + ".0";
    } else {
      out += digits.substr(0, static_cast<size_t>(decpt)) + "." + digits.substr(static_cast<size_t>(decpt));
    }
  } else {
    out += digits.substr(0, 1);
    if (n > 1) out += "." + digits.substr(1);
    const int x = decpt - 1;
    char eb[16];
    std::snprintf(eb, sizeof(eb), "e%c%02d", x < 0 ? '-' : '+', x < 0 ? -x : x);
    out += eb;
  }
  return out;
}

Result<std::string> py_str(const json& v, const std::string& where);

// Python's repr() of a scalar inside a list (only ASCII strings: repr of other characters
// depends on Unicode printability, which gem does not reproduce).
Result<std::string> py_repr(const json& v, const std::string& where) {
  if (!v.is_string()) {
    if (v.is_structured()) {
      return errorf("%s: nested arrays/objects here would render as a Python repr; not supported",
                    where.c_str());
    }
    return py_str(v, where);
  }
  const std::string& s = v.get_ref<const std::string&>();
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  for (unsigned char c : s) {
    if (c >= 0x80) {
      return errorf("%s: non-ASCII text here would render as a Python repr; not supported",
                    where.c_str());
    }
    if (c == '\\') {
      out += "\\\\";
    } else if (c == static_cast<unsigned char>(quote)) {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7F) {
      char b[8];
      std::snprintf(b, sizeof(b), "\\x%02x", c);
      out += b;
    } else {
      out += static_cast<char>(c);
    }
  }
  out += quote;
  return out;
}

// Python's str() of a JSON value, as `{{ value }}` prints it.
Result<std::string> py_str(const json& v, const std::string& where) {
  switch (v.type()) {
    case json::value_t::string: return v.get<std::string>();
    case json::value_t::null: return std::string("None");
    case json::value_t::boolean: return std::string(v.get<bool>() ? "True" : "False");
    case json::value_t::number_integer: return std::to_string(v.get<int64_t>());
    case json::value_t::number_unsigned: return std::to_string(v.get<uint64_t>());
    case json::value_t::number_float: return py_float(v.get<double>());
    case json::value_t::array: {
      std::string out = "[";
      for (size_t i = 0; i < v.size(); ++i) {
        if (i > 0) out += ", ";
        GEM_ASSIGN_OR_RETURN(std::string r, py_repr(v[i], where));
        out += r;
      }
      return out + "]";
    }
    default:
      return errorf("%s: an object here would render as a Python repr; not supported",
                    where.c_str());
  }
}

// `value | upper` (Python str.upper() of str(value)); type names are ASCII.
Result<std::string> py_upper(const json& v, const std::string& where) {
  GEM_ASSIGN_OR_RETURN(std::string s, py_str(v, where));
  for (char& c : s) {
    if (static_cast<unsigned char>(c) >= 0x80) {
      return errorf("%s: a type name must be ASCII, got \"%s\"", where.c_str(), s.c_str());
    }
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 32);
  }
  return s;
}

// Python truthiness; a missing key (Jinja Undefined) is nullptr and false.
bool truthy(const json* v) {
  if (v == nullptr) return false;
  switch (v->type()) {
    case json::value_t::null: return false;
    case json::value_t::boolean: return v->get<bool>();
    case json::value_t::number_integer: return v->get<int64_t>() != 0;
    case json::value_t::number_unsigned: return v->get<uint64_t>() != 0;
    case json::value_t::number_float: return v->get<double>() != 0.0;
    case json::value_t::string: return !v->get_ref<const std::string&>().empty();
    case json::value_t::array:
    case json::value_t::object: return !v->empty();
    default: return false;
  }
}

// `obj | dictsort`: items by key, case-insensitive, stable over nlohmann's (byte) order.
std::vector<std::pair<const std::string*, const json*>> dictsort(const json& obj) {
  std::vector<std::pair<const std::string*, const json*>> items;
  std::vector<std::string> lowered;
  for (auto it = obj.begin(); it != obj.end(); ++it) items.emplace_back(&it.key(), &it.value());
  std::vector<size_t> order(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    order[i] = i;
    lowered.push_back(py_lower_str(*items[i].first));
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return lowered[a] < lowered[b]; });
  std::vector<std::pair<const std::string*, const json*>> sorted;
  for (size_t i : order) sorted.push_back(items[i]);
  return sorted;
}

// ---------------------------------------------------------------------------------------------
// The template's macros

// format_argument(argument, escape_keys)
Status format_argument(const json& v, bool escape_keys, const std::string& where, Out& out,
                       int depth = 0) {
  if (v.is_structured() && depth >= kMaxJsonDepth) return depth_error(where);
  if (v.is_string()) {
    out.token(g::kStrDelim);
    out += v.get_ref<const std::string&>();
    out.token(g::kStrDelim);
  } else if (v.is_boolean()) {
    out += v.get<bool>() ? "true" : "false";
  } else if (v.is_object()) {
    out += '{';
    bool first = true;
    for (const auto& [key, value] : dictsort(v)) {
      if (!first) out += ',';
      first = false;
      if (escape_keys) {
        out.token(g::kStrDelim);
        out += *key;
        out.token(g::kStrDelim);
      } else {
        out += *key;
      }
      out += ':';
      GEM_RETURN_IF_ERROR(format_argument(*value, escape_keys, at_key(where, *key), out, depth + 1));
    }
    out += '}';
  } else if (v.is_array()) {
    out += '[';
    for (size_t i = 0; i < v.size(); ++i) {
      if (i > 0) out += ',';
      GEM_RETURN_IF_ERROR(format_argument(v[i], escape_keys, at_index(where, i), out, depth + 1));
    }
    out += ']';
  } else {
    GEM_ASSIGN_OR_RETURN(std::string s, py_str(v, where));
    out += s;
  }
  return ok_status();
}

// A `required` list rendered as <|"|>a<|"|>,<|"|>b<|"|>.
Status format_required(const json& req, const std::string& where, Out& out) {
  if (!req.is_array()) return type_error(where, "an array of property names", req);
  for (size_t i = 0; i < req.size(); ++i) {
    if (i > 0) out += ',';
    if (req[i].is_structured()) return type_error(at_index(where, i), "a property name", req[i]);
    GEM_ASSIGN_OR_RETURN(std::string s, py_str(req[i], at_index(where, i)));
    out.token(g::kStrDelim);
    out += s;
    out.token(g::kStrDelim);
  }
  return ok_status();
}

// format_parameters(properties, required). `strict`: `properties` is a real properties map,
// whose values must be schema objects; false for the template's quirk of listing an OBJECT
// schema's own keys, whose values may be anything.
Status format_parameters(const json& properties, bool strict, const std::string& where,
                         Out& out, int depth) {
  if (depth >= kMaxJsonDepth) return depth_error(where);
  static const char* const kStandard[] = {"description", "type", "properties", "required",
                                          "nullable"};
  bool found_first = false;
  for (const auto& [key_ptr, value_ptr] : dictsort(properties)) {
    const std::string& key = *key_ptr;
    const json& value = *value_ptr;
    const std::string here = at_key(where, key);
    if (std::find(std::begin(kStandard), std::end(kStandard), key) != std::end(kStandard)) continue;
    if (strict && !value.is_object()) return type_error(here, "a property schema object", value);
    if (found_first) out += ',';
    found_first = true;
    out += key;
    out += ":{";
    bool add_comma = false;
    auto comma = [&] {
      if (add_comma) {
        out += ',';
      } else {
        add_comma = true;
      }
    };
    const json* desc = get(value, "description");
    if (truthy(desc)) {
      GEM_ASSIGN_OR_RETURN(std::string d, py_str(*desc, at_key(here, "description")));
      out += "description:";
      out.token(g::kStrDelim);
      out += d;
      out.token(g::kStrDelim);
      add_comma = true;
    }
    std::string type_up;
    if (const json* t = get(value, "type")) {
      GEM_ASSIGN_OR_RETURN(type_up, py_upper(*t, at_key(here, "type")));
    }
    if (type_up == "STRING") {
      const json* en = get(value, "enum");
      if (truthy(en)) {
        comma();
        out += "enum:";
        GEM_RETURN_IF_ERROR(format_argument(*en, true, at_key(here, "enum"), out));
      }
    } else if (type_up == "ARRAY") {
      const json* items = get(value, "items");
      if (items != nullptr && items->is_object() && !items->empty()) {
        const std::string iw = at_key(here, "items");
        comma();
        out += "items:{";
        bool items_first = true;
        for (const auto& [ik, iv] : dictsort(*items)) {
          if (iv->is_null()) continue;
          if (!items_first) out += ',';
          items_first = false;
          const std::string ihere = at_key(iw, *ik);
          if (*ik == "properties") {
            out += "properties:{";
            if (iv->is_object()) GEM_RETURN_IF_ERROR(format_parameters(*iv, strict, ihere, out, depth + 1));
            out += '}';
          } else if (*ik == "required") {
            out += "required:[";
            GEM_RETURN_IF_ERROR(format_required(*iv, ihere, out));
            out += ']';
          } else if (*ik == "type") {
            out += "type:";
            if (iv->is_string()) {
              GEM_ASSIGN_OR_RETURN(std::string up, py_upper(*iv, ihere));
              GEM_RETURN_IF_ERROR(format_argument(json(up), true, ihere, out));
            } else if (iv->is_array()) {
              json ups = json::array();
              for (size_t i = 0; i < iv->size(); ++i) {
                GEM_ASSIGN_OR_RETURN(std::string up, py_upper((*iv)[i], at_index(ihere, i)));
                ups.push_back(up);
              }
              GEM_RETURN_IF_ERROR(format_argument(ups, true, ihere, out));
            } else {
              return type_error(ihere, "a type name or an array of type names", *iv);
            }
          } else {
            out += *ik;
            out += ':';
            GEM_RETURN_IF_ERROR(format_argument(*iv, true, ihere, out));
          }
        }
        out += '}';
      }
    }
    if (truthy(get(value, "nullable"))) {
      comma();
      out += "nullable:true";
    }
    if (type_up == "OBJECT") {
      const json* props = get(value, "properties");
      if (props != nullptr && props->is_object()) {
        comma();
        out += "properties:{";
        GEM_RETURN_IF_ERROR(format_parameters(*props, true, at_key(here, "properties"), out, depth + 1));
        out += '}';
      } else if (value.is_object()) {
        // The template's quirk: the schema's own non-standard keys listed as properties.
        comma();
        out += "properties:{";
        GEM_RETURN_IF_ERROR(format_parameters(value, false, here, out, depth + 1));
        out += '}';
      }
      const json* req = get(value, "required");
      if (truthy(req)) {
        comma();
        out += "required:[";
        GEM_RETURN_IF_ERROR(format_required(*req, at_key(here, "required"), out));
        out += ']';
      }
    }
    comma();
    out += "type:";
    out.token(g::kStrDelim);
    out += type_up;
    out.token(g::kStrDelim);
    out += '}';
  }
  return ok_status();
}

// format_function_declaration(tool_data), before the caller's `| trim`.
Status format_function_declaration(const json& tool, const std::string& where, Out& out) {
  const json& fn = tool["function"];
  const std::string fw = at_key(where, "function");
  out += g::kDeclarationPrefix;
  out += fn["name"].get<std::string>();
  out += "{description:";
  out.token(g::kStrDelim);
  if (const json* desc = get(fn, "description")) {
    GEM_ASSIGN_OR_RETURN(std::string d, py_str(*desc, at_key(fw, "description")));
    out += d;
  }
  out.token(g::kStrDelim);
  const json* params = get(fn, "parameters");
  if (truthy(params)) {
    const std::string pw = at_key(fw, "parameters");
    out += ",parameters:{";
    const json* props = get(*params, "properties");
    if (truthy(props)) {
      out += "properties:{";
      GEM_RETURN_IF_ERROR(format_parameters(*props, true, at_key(pw, "properties"), out, 0));
      out += "},";
    }
    const json* req = get(*params, "required");
    if (truthy(req)) {
      out += "required:[";
      GEM_RETURN_IF_ERROR(format_required(*req, at_key(pw, "required"), out));
      out += "],";
    }
    const json* type = get(*params, "type");
    if (truthy(type)) {
      GEM_ASSIGN_OR_RETURN(std::string up, py_upper(*type, at_key(pw, "type")));
      out += "type:";
      out.token(g::kStrDelim);
      out += up;
      out.token(g::kStrDelim);
      out += '}';
    }
  }
  if (const json* resp = get(fn, "response")) {
    const std::string rw = at_key(fw, "response");
    out += ",response:{";
    const json* desc = get(*resp, "description");
    if (truthy(desc)) {
      GEM_ASSIGN_OR_RETURN(std::string d, py_str(*desc, at_key(rw, "description")));
      out += "description:";
      out.token(g::kStrDelim);
      out += d;
      out.token(g::kStrDelim);
      out += ',';
    }
    if (const json* type = get(*resp, "type")) {
      GEM_ASSIGN_OR_RETURN(std::string up, py_upper(*type, at_key(rw, "type")));
      if (up == "OBJECT") {
        out += "type:";
        out.token(g::kStrDelim);
        out += "OBJECT";
        out.token(g::kStrDelim);
        out += '}';
      }
    }
  }
  out += '}';
  return ok_status();
}

// strip_thinking(text): drops every `<|channel>…<channel|>` span (and a trailing unclosed
// `<|channel>…`), then trims.
std::string strip_thinking(std::string_view text) {
  constexpr std::string_view kOpen = "<|channel>";
  constexpr std::string_view kClose = "<channel|>";
  std::string result;
  size_t pos = 0;
  while (true) {
    const size_t end = text.find(kClose, pos);
    const std::string_view part =
        text.substr(pos, end == std::string_view::npos ? std::string_view::npos : end - pos);
    const size_t open = part.find(kOpen);
    result += part.substr(0, open);
    if (end == std::string_view::npos) break;
    pos = end + kClose.size();
  }
  return py_strip(result);
}

// format_tool_response_block(tool_name, response)
Status format_tool_response(const std::string& name, const json& response, const std::string& where,
                            Out& out) {
  out.token(g::kToolRespOpen);
  if (response.is_object()) {
    out += g::kResponsePrefix;
    out += name;
    out += '{';
    bool first = true;
    for (const auto& [key, value] : dictsort(response)) {
      if (!first) out += ',';
      first = false;
      out += *key;
      out += ':';
      GEM_RETURN_IF_ERROR(format_argument(*value, false, at_key(where, *key), out));
    }
    out += '}';
  } else {
    out += g::kResponsePrefix;
    out += name;
    out += "{value:";
    GEM_RETURN_IF_ERROR(format_argument(response, false, where, out));
    out += '}';
  }
  out.token(g::kToolRespClose);
  return ok_status();
}

// Python's `a == b` for the id match (None == None is true; missing reads as None).
bool ids_equal(const json* a, const json* b) {
  const bool a_none = a == nullptr || a->is_null();
  const bool b_none = b == nullptr || b->is_null();
  if (a_none || b_none) return a_none && b_none;
  return *a == *b;
}

// What thinking off appends to the generation prompt: an empty thought channel.
constexpr std::string_view kEmptyThought = "<|channel>thought\n<channel|>";

// The generation prompt: "<|turn>model\n", and with thinking off the empty thought channel.
void generation_prompt(bool thinking, Out& out) {
  out.token(g::kTurnOpen);
  out += g::kModelRole;
  out += '\n';
  if (!thinking) {
    out.token(g::kChannelOpen);
    out += g::kThoughtWord;
    out += '\n';
    out.token(g::kChannelClose);
  }
}

struct Rendered {
  Prompt prompt;
  size_t prefix_bytes = 0;  // how much of the text the generation prompt appended
};

Result<Rendered> render_impl(const json& messages_in, const json& tools_in, const RenderOptions& opt) {
  GEM_ASSIGN_OR_RETURN(const json tools, validate_tools(tools_in));
  GEM_ASSIGN_OR_RETURN(const json messages, validate_messages(messages_in));

  Out out;
  if (opt.emit_bos_text) out.token(g::kBos);
  std::string prev_type;  // ns.prev_message_type ("" = None)
  const bool have_tools = truthy(&tools);
  // validate_messages() renamed developer to system.
  const bool leading_system = messages[0]["role"] == "system";
  size_t start = 0;  // loop_messages = messages[start:]
  if (opt.enable_thinking || have_tools || leading_system) {
    out.token(g::kTurnOpen);
    out += "system\n";
    if (opt.enable_thinking) {
      out.token(g::kThink);
      out += '\n';
      prev_type = "think";
    }
    if (leading_system) {
      // `content | trim`; the content is a string or null (validate_messages()), and null
      // prints as Python's str(None).
      const json& content = messages[0]["content"];
      out += py_strip(content.is_string() ? content.get_ref<const std::string&>() : "None");
      start = 1;
    }
    if (have_tools) {
      for (size_t i = 0; i < tools.size(); ++i) {
        // `format_function_declaration(tool) | trim`: the declaration starts with
        // "declaration:" and ends with '}', so the trim changes nothing.
        out.token(g::kToolDeclOpen);
        GEM_RETURN_IF_ERROR(format_function_declaration(tools[i], at_index("tools", i), out));
        out.token(g::kToolDeclClose);
      }
      prev_type = "tool";
    }
    out.token(g::kTurnClose);
    out += '\n';
  }

  const size_t n = messages.size();
  auto role_of = [&](size_t i) -> const std::string& {
    return messages[i]["role"].get_ref<const std::string&>();
  };
  // Pre-scan: the last user message (index into loop_messages, -1 if none).
  long last_user = -1;
  for (size_t i = start; i < n; ++i) {
    if (role_of(i) == "user") last_user = static_cast<long>(i - start);
  }

  // Every tool message must be rendered by the assistant message whose scan reaches it.
  std::vector<bool> tool_consumed(n, false);

  for (size_t i = start; i < n; ++i) {
    const json& msg = messages[i];
    const std::string& mrole = role_of(i);
    if (mrole == "tool") continue;
    const std::string mw = at_index("messages", i);
    const long idx = static_cast<long>(i - start);
    prev_type.clear();
    const std::string role = mrole == "assistant" ? std::string(g::kModelRole) : mrole;
    std::string prev_nt;
    for (size_t j = i; j > start; --j) {
      if (role_of(j - 1) != "tool") {
        prev_nt = role_of(j - 1);
        break;
      }
    }
    if (!(role == g::kModelRole && prev_nt == "assistant")) {
      out.token(g::kTurnOpen);
      out += role;
      out += '\n';
    }

    const json* calls = get(msg, "tool_calls");
    const bool has_calls = truthy(calls);
    const json* reasoning = get(msg, "reasoning");
    const json* thinking = truthy(reasoning) ? reasoning : get(msg, "reasoning_content");
    if (truthy(thinking) && idx > last_user && has_calls) {
      out.token(g::kChannelOpen);
      out += g::kThoughtWord;
      out += '\n';
      out += thinking->get_ref<const std::string&>();
      out += '\n';
      out.token(g::kChannelClose);
    }
    if (has_calls) {
      for (size_t c = 0; c < calls->size(); ++c) {
        const json& fn = (*calls)[c]["function"];
        out.token(g::kToolCallOpen);
        out += g::call_header(fn["name"].get_ref<const std::string&>());
        const json* args = get(fn, "arguments");
        if (args != nullptr && args->is_object()) {
          const std::string aw = at_key(at_key(at_index(at_key(mw, "tool_calls"), c), "function"),
                                        "arguments");
          bool first = true;
          for (const auto& [key, value] : dictsort(*args)) {
            if (!first) out += ',';
            first = false;
            out += *key;
            out += ':';
            GEM_RETURN_IF_ERROR(format_argument(*value, false, at_key(aw, *key), out, 1));
          }
        }
        out += g::kArgsClose;
        out.token(g::kToolCallClose);
      }
      prev_type = "tool_call";
    }

    bool responses_out = false;
    const json* responses = get(msg, "tool_responses");
    if (truthy(responses)) {
      for (size_t k = 0; k < responses->size(); ++k) {
        const json& tr = (*responses)[k];
        const json* name = get(tr, "name");
        const json* resp = get(tr, "response");
        GEM_RETURN_IF_ERROR(format_tool_response(name ? name->get<std::string>() : "unknown",
                                                 resp ? *resp : json(),
                                                 at_key(at_index(at_key(mw, "tool_responses"), k),
                                                        "response"),
                                                 out));
        responses_out = true;
        prev_type = "tool_response";
      }
    } else if (has_calls) {
      for (size_t k = i + 1; k < n && role_of(k) == "tool"; ++k) {
        const json& follow = messages[k];
        const std::string fw = at_index("messages", k);
        const json* follow_id = get(follow, "tool_call_id");
        const json* follow_name = get(follow, "name");
        const bool named = follow_name != nullptr && follow_name->is_string();
        std::string name = named ? follow_name->get<std::string>() : "unknown";
        bool matched = false;
        for (const json& tc : *calls) {
          if (ids_equal(get(tc, "id"), follow_id)) {
            name = tc["function"]["name"].get<std::string>();
            matched = true;
          }
        }
        if (!matched && follow_id != nullptr && !follow_id->is_null()) {
          return errorf("%s.tool_call_id: expected the id of one of the calls in "
                        "messages[%zu].tool_calls, got \"%s\"", fw.c_str(), i,
                        follow_id->get<std::string>().c_str());
        }
        if (!matched && !named) {
          return errorf("%s: a tool result needs a tool_call_id matching a call of messages[%zu] "
                        "(or a \"name\"), got neither", fw.c_str(), i);
        }
        // The content is a string or null (validate_messages() joined any parts).
        GEM_RETURN_IF_ERROR(format_tool_response(name, follow["content"], at_key(fw, "content"), out));
        tool_consumed[k] = true;
        responses_out = true;
        prev_type = "tool_response";
      }
    }

    const json* content = get(msg, "content");
    if (content != nullptr && content->is_string()) {
      const std::string& s = content->get_ref<const std::string&>();
      out += role == g::kModelRole ? strip_thinking(s) : py_strip(s);
    }

    if (prev_type == "tool_call" && !responses_out) {
      out.token(g::kToolRespOpen);
    } else if (!(responses_out && !truthy(content))) {
      out.token(g::kTurnClose);
      out += '\n';
    }
  }

  for (size_t k = start; k < n; ++k) {
    if (role_of(k) == "tool" && !tool_consumed[k]) {
      return errorf("messages[%zu]: a tool result must follow an assistant message with "
                    "tool_calls (or other tool results of that message); the template would "
                    "drop it", k);
    }
  }

  const size_t before_prefix = out.text().size();
  if (opt.add_generation_prompt) {
    if (prev_type != "tool_response" && prev_type != "tool_call") {
      generation_prompt(opt.enable_thinking, out);
    } else if (opt.reopen_model_turn && out.ends_with("<turn|>\n")) {
      // llama.cpp's fix (common_chat_params_init_gemma4): the template closed the model turn
      // (text after tool results) but opened no new one.
      generation_prompt(opt.enable_thinking, out);
    }
  }
  const size_t prefix_bytes = out.text().size() - before_prefix;
  const size_t history = history_size(out.text(), opt);
  return Rendered{out.take(history), prefix_bytes};
}

}  // namespace

namespace detail {
std::string python_strip(std::string_view s) { return py_strip(s); }
}  // namespace detail

Result<std::string> render(const nlohmann::json& messages, const nlohmann::json& tools,
                           const RenderOptions& options) {
  GEM_ASSIGN_OR_RETURN(Rendered r, render_impl(messages, tools, options));
  return std::move(r.prompt.text);
}

Result<Prompt> render_prompt(const nlohmann::json& messages, const nlohmann::json& tools,
                             const RenderOptions& options) {
  GEM_ASSIGN_OR_RETURN(Rendered r, render_impl(messages, tools, options));
  return std::move(r.prompt);
}

std::string generation_prefix(const nlohmann::json& messages, const RenderOptions& options) {
  RenderOptions opt = options;
  opt.add_generation_prompt = true;
  auto r = render_impl(messages, nlohmann::json(), opt);
  if (!r.ok()) return std::string();
  const std::string& text = r->prompt.text;
  return text.substr(text.size() - r->prefix_bytes);
}

size_t history_size(std::string_view rendered, const RenderOptions& options) {
  if (!options.add_generation_prompt || options.enable_thinking) return rendered.size();
  return rendered.ends_with(kEmptyThought) ? rendered.size() - kEmptyThought.size()
                                           : rendered.size();
}

PromptTokens tokenize_prompt(const Prompt& prompt, const Tokenizer& tokenizer, bool add_bos) {
  PromptTokens out;
  if (add_bos) out.ids.push_back(tokenizer.bos_id());
  const std::string_view text(prompt.text);
  const size_t history = std::min(prompt.history_bytes, text.size());
  size_t pos = 0;
  bool history_done = false;
  Tokenizer::TextMemo memo;  // the messages share their words
  // Text [pos, end) as plain text, cut at the history boundary (where n_history is taken).
  auto text_until = [&](size_t end) {
    if (!history_done && end >= history) {
      if (history > pos) tokenizer.encode_text(text.substr(pos, history - pos), out.ids, &memo);
      pos = std::max(pos, history);
      out.n_history = static_cast<int>(out.ids.size());
      history_done = true;
    }
    if (end > pos) tokenizer.encode_text(text.substr(pos, end - pos), out.ids, &memo);
    pos = std::max(pos, end);
  };
  for (const auto& [offset, length] : prompt.controls) {
    text_until(offset);
    const std::string_view control = text.substr(offset, length);
    const int32_t id = tokenizer.find_token(control);
    if (id < 0) {
      // A vocabulary without the token (never Gemma 4's): its text as any prompt reads it.
      const std::vector<int32_t> ids = tokenizer.encode(control, false, /*parse_special=*/true);
      out.ids.insert(out.ids.end(), ids.begin(), ids.end());
    } else if (!(add_bos && id == tokenizer.bos_id() && out.ids.size() == 1)) {
      out.ids.push_back(id);  // (exactly one <bos> leads)
    }
    pos = offset + length;
  }
  text_until(text.size());
  return out;
}

}  // namespace gem::chat
