// Logging to stderr: one line per call, prefixed with the level. Thread-safe (one write per line).
#pragma once

namespace gem {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

void set_log_level(LogLevel level);
LogLevel log_level();
void log_message(LogLevel level, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

}  // namespace gem

#define GEM_LOG_DEBUG(...) ::gem::log_message(::gem::LogLevel::kDebug, __VA_ARGS__)
#define GEM_LOG_INFO(...) ::gem::log_message(::gem::LogLevel::kInfo, __VA_ARGS__)
#define GEM_LOG_WARN(...) ::gem::log_message(::gem::LogLevel::kWarn, __VA_ARGS__)
#define GEM_LOG_ERROR(...) ::gem::log_message(::gem::LogLevel::kError, __VA_ARGS__)
