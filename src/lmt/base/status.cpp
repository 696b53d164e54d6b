#include "lmt/base/status.h"

namespace lmt {

const char* StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return "ok";
    case StatusCode::kInvalidArgument: return "invalid argument";
    case StatusCode::kNotFound: return "not found";
    case StatusCode::kIoError: return "i/o error";
    case StatusCode::kDataLoss: return "data loss";
    case StatusCode::kFailedPrecondition: return "failed precondition";
    case StatusCode::kOutOfRange: return "out of range";
    case StatusCode::kUnimplemented: return "unimplemented";
    case StatusCode::kCancelled: return "cancelled";
    case StatusCode::kInternal: return "internal";
    case StatusCode::kUsage: return "usage error";
  }
  return "unknown";
}

Status Status::WithContext(const std::string& context) const {
  if (ok()) return *this;
  return Status(code_, context + ": " + message_, hint_);
}

std::string Status::ToString() const {
  if (ok()) return "ok";
  std::string s = "error: " + message_;
  if (!hint_.empty()) s += "\nhint: " + hint_;
  return s;
}

}  // namespace lmt
