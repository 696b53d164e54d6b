// Logging to stderr: `LMT_LOG(INFO) << "loaded " << n << " shards";`
//
// Lines look like "[lmt I 12:03:04.512] message". The level threshold comes from LMT_LOG_LEVEL
// (debug|info|warning|error; lmtrain refuses any other value with exit code 2, docs/CLI.md) or
// set_log_level(). A process-wide prefix (e.g. "rank 1") can be set
// by the launcher so multi-process logs stay readable. Thread-safe: each line is written whole.
#pragma once

#include <sstream>
#include <string>

namespace lmt {

enum class LogLevel { DEBUG = 0, INFO = 1, WARNING = 2, ERROR = 3 };

void set_log_level(LogLevel level);
LogLevel log_level();
void set_log_prefix(const std::string& prefix);
// "debug", "info", "warning" or "error" (exactly, lower case) -> *level; false for anything else.
bool parse_log_level(const std::string& text, LogLevel* level);
// The names parse_log_level() accepts, for messages: "debug, info, warning, error".
const char* log_level_names();

namespace internal {
class LogLine {
 public:
  explicit LogLine(LogLevel level) : level_(level) {}
  ~LogLine();
  std::ostream& stream() { return stream_; }

 private:
  LogLevel level_;
  std::ostringstream stream_;
};
}  // namespace internal
}  // namespace lmt

#define LMT_LOG(level)                                          \
  if (::lmt::LogLevel::level < ::lmt::log_level()) {            \
  } else                                                        \
    ::lmt::internal::LogLine(::lmt::LogLevel::level).stream()
