// Bounds on JSON nesting, checked before any recursive code sees a document. nlohmann's parser is
// iterative, but copying, comparing and dumping a json value recurse, and so do the chat
// renderer and the schema walkers: a body nested 100,000 deep overflows a thread's stack. Every
// JSON text the server accepts (the body, and JSON carried inside strings such as
// tool_calls[].function.arguments) passes json_depth_check first.
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace gem::server {

inline constexpr int kDefaultMaxJsonDepth = 64;

// The deepest nesting of arrays and objects in `text`, found by one pass over the bytes that
// tracks strings and escapes and nothing else (no recursion, no allocation). Stops early at the
// first byte that goes deeper than `limit`: returns false and sets *offset to that byte.
// Malformed JSON is not diagnosed here; the parser does that afterwards.
bool json_depth_within(std::string_view text, int limit, size_t* offset = nullptr);

// The process-wide limit used where no limit is passed (api.cc's parse calls). The server sets
// it from --max-json-depth at start.
int max_json_depth();
void set_max_json_depth(int limit);

// "JSON nesting deeper than the limit of 64 levels (at byte 1234)": the message clients see.
std::string json_depth_message(std::string_view what, int limit, size_t offset);

// json::parse without exceptions after the depth check (limit: max_json_depth()). Returns a
// discarded value when the text is nested too deeply (then *error names `what` and the limit)
// or does not parse (then *error is left empty: the caller words that message).
nlohmann::json parse_json_bounded(std::string_view text, std::string_view what,
                                  std::string* error);

}  // namespace gem::server
