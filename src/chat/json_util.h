// Small helpers shared by the renderer (chat.cc) and the request validator (validate.cc): field
// access, field paths for error messages ("messages[2].tool_calls[0].function.name") and the
// "WHERE: expected X, got Y" error style.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "base/status.h"

namespace gem::chat {

// How deep arrays and objects may nest in the JSON a chat request carries (messages, tools,
// arguments, schemas). Deeper input is refused with an error naming this limit, before any
// recursive code walks it.
constexpr int kMaxJsonDepth = 64;

namespace detail {

using json = nlohmann::json;

// "a string", "an array", ... for error messages.
inline const char* type_name(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
    case json::value_t::number_float: return "a number";
    case json::value_t::string: return "a string";
    case json::value_t::array: return "an array";
    case json::value_t::object: return "an object";
    default: return "an unsupported value";
  }
}

inline Status type_error(const std::string& where, const char* expected, const json& actual) {
  return errorf("%s: expected %s, got %s", where.c_str(), expected, type_name(actual));
}

inline Status depth_error(const std::string& where, int limit = kMaxJsonDepth) {
  return errorf("%s: expected JSON nested within the limit of %d levels, got deeper nesting", where.c_str(),
                limit);
}

// `obj['key']`: nullptr (Jinja's Undefined) when obj is not an object or lacks the key.
inline const json* get(const json& obj, const char* key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

inline std::string at_key(const std::string& where, std::string_view key) {
  std::string s = where;
  s += '.';
  s += key;
  return s;
}
inline std::string at_index(const std::string& where, size_t i) {
  return where + "[" + std::to_string(i) + "]";
}

// Python's str.strip() (Jinja's `trim`), defined in chat.cc.
std::string python_strip(std::string_view s);

}  // namespace detail
}  // namespace gem::chat
