// check_failed: the one place an invariant violation ends the process.
#include "base/check.h"

#include <cstdarg>
#include <cstdio>
#include <cstdlib>

namespace gem {

void check_failed(const char* file, int line, const char* cond, const char* fmt, ...) {
  std::fprintf(stderr, "gem: check failed at %s:%d: %s", file, line, cond);
  if (fmt != nullptr && fmt[0] != '\0') {
    std::fputs(": ", stderr);
    va_list args;
    va_start(args, fmt);
    std::vfprintf(stderr, fmt, args);
    va_end(args);
  }
  std::fputc('\n', stderr);
  std::fflush(stderr);
  std::abort();
}

}  // namespace gem
