// GEM_CHECK: our own broken invariant aborts with file, line and a formatted message.
// GEM_DCHECK guards hot loops in debug builds only. Bad input from outside is a Status instead.
#pragma once

namespace gem {
[[noreturn]] void check_failed(const char* file, int line, const char* cond, const char* fmt, ...)
    __attribute__((format(printf, 4, 5)));
}  // namespace gem

#define GEM_CHECK(cond, ...)                                                 \
  do {                                                                       \
    if (__builtin_expect(!(cond), 0))                                        \
      ::gem::check_failed(__FILE__, __LINE__, #cond, "" __VA_ARGS__);        \
  } while (0)

#ifdef NDEBUG
#define GEM_DCHECK(cond, ...) \
  do {                        \
  } while (0)
#else
#define GEM_DCHECK(cond, ...) GEM_CHECK(cond, __VA_ARGS__)
#endif
