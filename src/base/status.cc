// strprintf, errorf and cancelledf: the formatting behind every error message.
#include "base/status.h"

#include <cstdio>
#include <vector>

namespace gem {

std::string vstrprintf(const char* fmt, va_list args) {
  va_list copy;
  va_copy(copy, args);
  const int n = std::vsnprintf(nullptr, 0, fmt, copy);
  va_end(copy);
  if (n <= 0) return std::string();
  std::string out(static_cast<size_t>(n), '\0');
  std::vsnprintf(out.data(), out.size() + 1, fmt, args);
  return out;
}

std::string strprintf(const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  std::string out = vstrprintf(fmt, args);
  va_end(args);
  return out;
}

Status errorf(const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  std::string out = vstrprintf(fmt, args);
  va_end(args);
  return Status::error(std::move(out));
}

Status cancelledf(const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  std::string out = vstrprintf(fmt, args);
  va_end(args);
  return Status::cancelled(std::move(out));
}

}  // namespace gem
