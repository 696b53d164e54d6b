// Status and StatusOr<T>: the error type for everything a user can cause (files, configs, data).
//
// A user-facing error names the file, key or value that is wrong (message) and, when the fix is
// known, says it on a separate `hint:` line. Broken invariants use LMT_CHECK (check.h) instead.
// No exception crosses a module boundary; functions that can fail on user input return Status or
// StatusOr<T>, and callers propagate with LMT_RETURN_IF_ERROR / LMT_ASSIGN_OR_RETURN.
#pragma once

#include <optional>
#include <string>
#include <utility>

#include "lmt/base/check.h"

namespace lmt {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,     // bad flag, config key or value
  kNotFound,            // a file or name that does not exist
  kIoError,             // read/write/fsync failed
  kDataLoss,            // corrupt or truncated file (bad magic, checksum, size)
  kFailedPrecondition,  // the request is valid but the state does not allow it
  kOutOfRange,          // a sequence ended (e.g. a data loader's single pass): expected, not a fault
  kUnimplemented,       // a feature that lmtrain does not support (yet): named in the message
  kCancelled,           // stopped on request (SIGTERM/SIGINT) after saving what was needed to resume
  kInternal,
  kUsage,               // a command line that cannot run: a missing or conflicting option (exit code 2)
};

const char* StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message, std::string hint = "")
      : code_(code), message_(std::move(message)), hint_(std::move(hint)) {}

  static Status Ok() { return Status(); }
  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  const std::string& hint() const { return hint_; }

  // Prepends context ("while reading config.toml: ") to the message; hint unchanged.
  Status WithContext(const std::string& context) const;
  // "error: <message>\nhint: <hint>" (the hint line only when there is one).
  std::string ToString() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
  std::string hint_;
};

inline Status InvalidArgument(std::string m, std::string h = "") { return {StatusCode::kInvalidArgument, std::move(m), std::move(h)}; }
inline Status NotFound(std::string m, std::string h = "") { return {StatusCode::kNotFound, std::move(m), std::move(h)}; }
inline Status IoError(std::string m, std::string h = "") { return {StatusCode::kIoError, std::move(m), std::move(h)}; }
inline Status DataLoss(std::string m, std::string h = "") { return {StatusCode::kDataLoss, std::move(m), std::move(h)}; }
inline Status FailedPrecondition(std::string m, std::string h = "") { return {StatusCode::kFailedPrecondition, std::move(m), std::move(h)}; }
inline Status OutOfRange(std::string m, std::string h = "") { return {StatusCode::kOutOfRange, std::move(m), std::move(h)}; }
inline Status Unimplemented(std::string m, std::string h = "") { return {StatusCode::kUnimplemented, std::move(m), std::move(h)}; }
inline Status Cancelled(std::string m, std::string h = "") { return {StatusCode::kCancelled, std::move(m), std::move(h)}; }
inline Status Internal(std::string m, std::string h = "") { return {StatusCode::kInternal, std::move(m), std::move(h)}; }
// A usage error found after parsing (a missing or conflicting option): lmtrain exits 2 and prints usage.
inline Status UsageError(std::string m, std::string h = "") { return {StatusCode::kUsage, std::move(m), std::move(h)}; }

// Holds either a value or a non-OK Status.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(const Status& status) : status_(status) {  // NOLINT: implicit by design
    LMT_CHECK(!status_.ok()) << "StatusOr constructed from an OK Status without a value";
  }
  StatusOr(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() & { CheckOk(); return *value_; }
  const T& value() const& { CheckOk(); return *value_; }
  T&& value() && { CheckOk(); return std::move(*value_); }
  T* operator->() { CheckOk(); return &*value_; }
  const T* operator->() const { CheckOk(); return &*value_; }
  T& operator*() & { CheckOk(); return *value_; }
  const T& operator*() const& { CheckOk(); return *value_; }
  T operator*() && { CheckOk(); return std::move(*value_); }

 private:
  void CheckOk() const { LMT_CHECK(status_.ok()) << "value() of a failed StatusOr: " << status_.ToString(); }
  Status status_;
  std::optional<T> value_;
};

}  // namespace lmt

#define LMT_STATUS_CONCAT_INNER(a, b) a##b
#define LMT_STATUS_CONCAT(a, b) LMT_STATUS_CONCAT_INNER(a, b)

// Returns the Status from the enclosing function if `expr` is not OK.
#define LMT_RETURN_IF_ERROR(expr)                   \
  do {                                              \
    ::lmt::Status lmt_status_ = (expr);             \
    if (!lmt_status_.ok()) return lmt_status_;      \
  } while (0)

// `LMT_ASSIGN_OR_RETURN(auto x, MakeX());` declares x from a StatusOr or returns its error.
#define LMT_ASSIGN_OR_RETURN(lhs, expr) \
  LMT_ASSIGN_OR_RETURN_IMPL(LMT_STATUS_CONCAT(lmt_statusor_, __LINE__), lhs, expr)
#define LMT_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return tmp.status();             \
  lhs = std::move(tmp).value()
