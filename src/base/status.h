// Status and Result<T>: how gem reports bad input from outside (files, flags, HTTP bodies).
// gem code does not throw; a failure travels up as a Status whose message says what, where,
// expected and actual. Result<T> mirrors std::expected's surface so a later switch is mechanical.
//
// A Status carries a code besides its message, so callers branch on what happened, never on the
// message's words: kError for every failure, kCancelled when the caller asked the work to stop
// (a progress callback returned false) and it stopped early. Only the code is the contract; the
// message is for people.
#pragma once

#include <cstdarg>
#include <optional>
#include <string>
#include <utility>

namespace gem {

// printf-style formatting into a std::string.
std::string strprintf(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string vstrprintf(const char* fmt, va_list args);

enum class StatusCode {
  kOk,
  kError,      // a failure: bad input, an unsupported file, a backend fault
  kCancelled,  // stopped early because the caller asked (not a failure of the work itself)
};

class [[nodiscard]] Status {
 public:
  Status() = default;  // ok
  static Status error(std::string message) { return Status(StatusCode::kError, std::move(message)); }
  static Status cancelled(std::string message) {
    return Status(StatusCode::kCancelled, std::move(message));
  }
  bool ok() const { return code_ == StatusCode::kOk; }
  bool is_cancelled() const { return code_ == StatusCode::kCancelled; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // Prefixes context ("loading x.gguf: ") to a non-ok status, keeping its code; ok stays ok.
  Status with_context(const std::string& prefix) const {
    return ok() ? *this : Status(code_, prefix + message_);
  }

 private:
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status ok_status() { return Status(); }
Status errorf(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
// A kCancelled status with a printf-style message ("cancelled after 32 of 64 tokens").
Status cancelledf(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {  // NOLINT: implicit by design
    if (status_.ok()) status_ = Status::error("Result built from an ok Status without a value");
  }
  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }
  const std::string& message() const { return status_.message(); }
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T& operator*() & { return *value_; }
  const T& operator*() const& { return *value_; }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }

 private:
  std::optional<T> value_;
  Status status_;
};

}  // namespace gem

#define GEM_CONCAT_INNER(a, b) a##b
#define GEM_CONCAT(a, b) GEM_CONCAT_INNER(a, b)

// Returns the Status from the enclosing function when it is an error.
#define GEM_RETURN_IF_ERROR(expr)               \
  do {                                          \
    ::gem::Status gem_status_ = (expr);         \
    if (!gem_status_.ok()) return gem_status_;  \
  } while (0)

// lhs = value of a Result, or return its Status from the enclosing function.
#define GEM_ASSIGN_OR_RETURN(lhs, expr) \
  GEM_ASSIGN_OR_RETURN_IMPL(GEM_CONCAT(gem_result_, __LINE__), lhs, expr)
#define GEM_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return tmp.status();             \
  lhs = std::move(tmp).value()
