// json_limits.h: a non-recursive nesting scanner.
#include "server/json_limits.h"

#include <atomic>

#include "base/status.h"

namespace gem::server {

namespace {
std::atomic<int> g_max_depth{kDefaultMaxJsonDepth};
}  // namespace

bool json_depth_within(std::string_view text, int limit, size_t* offset) {
  int depth = 0;
  bool in_string = false;
  bool escaped = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    switch (c) {
      case '"':
        in_string = true;
        break;
      case '[':
      case '{':
        if (++depth > limit) {
          if (offset != nullptr) *offset = i;
          return false;
        }
        break;
      case ']':
      case '}':
        if (depth > 0) --depth;  // unbalanced input is the parser's to report
        break;
      default:
        break;
    }
  }
  return true;
}

int max_json_depth() { return g_max_depth.load(std::memory_order_relaxed); }

void set_max_json_depth(int limit) { g_max_depth.store(limit, std::memory_order_relaxed); }

std::string json_depth_message(std::string_view what, int limit, size_t offset) {
  return strprintf("%.*s: JSON nested deeper than the limit of %d levels (at byte %zu); "
                   "the limit is set with --max-json-depth",
                   static_cast<int>(what.size()), what.data(), limit, offset);
}

nlohmann::json parse_json_bounded(std::string_view text, std::string_view what,
                                  std::string* error) {
  const int limit = max_json_depth();
  size_t offset = 0;
  if (!json_depth_within(text, limit, &offset)) {
    if (error != nullptr) *error = json_depth_message(what, limit, offset);
    return nlohmann::json(nlohmann::json::value_t::discarded);
  }
  return nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
}

}  // namespace gem::server
