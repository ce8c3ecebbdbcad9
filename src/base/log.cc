// log_message: formats a whole line first so concurrent threads never interleave within a line.
#include "base/log.h"

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <string>

#include "base/status.h"

namespace gem {
namespace {
std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};
constexpr const char* kNames[] = {"debug", "info", "warn", "error"};
}  // namespace

void set_log_level(LogLevel level) { g_level.store(static_cast<int>(level)); }
LogLevel log_level() { return static_cast<LogLevel>(g_level.load()); }

void log_message(LogLevel level, const char* fmt, ...) {
  if (static_cast<int>(level) < g_level.load()) return;
  va_list args;
  va_start(args, fmt);
  std::string line = "gem ";
  line += kNames[static_cast<int>(level)];
  line += ": ";
  line += vstrprintf(fmt, args);
  va_end(args);
  line += '\n';
  std::fwrite(line.data(), 1, line.size(), stderr);
}

}  // namespace gem
