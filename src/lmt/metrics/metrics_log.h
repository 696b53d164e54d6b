// MetricsLog: RUN/metrics.jsonl, one JSON object per line, flushed after every line so a crashed
// run keeps everything it logged. Only one process (rank 0) writes it.
#pragma once

#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "lmt/base/status.h"

namespace lmt::metrics {

class MetricsLog {
 public:
  // Opens for appending (a resumed run continues the same file). An existing file is repaired
  // first: a torn last line (a crash or a full disk mid-write) is dropped, and with
  // keep_through_step >= 0 so is every record whose "step" is larger (the steps a resumed run
  // replays from its checkpoint then appear exactly once). Records without a step are kept. The
  // repaired file replaces the old one atomically; *repaired (if given) says what was dropped, or "".
  static StatusOr<MetricsLog> open(const std::string& path, int64_t keep_through_step = -1,
                                   std::string* repaired = nullptr);
  MetricsLog(MetricsLog&& o) noexcept : f_(o.f_), path_(std::move(o.path_)) { o.f_ = nullptr; }
  MetricsLog& operator=(MetricsLog&& o) noexcept;
  ~MetricsLog();
  Status write(const nlohmann::json& record);
  const std::string& path() const { return path_; }

 private:
  MetricsLog(FILE* f, std::string path) : f_(f), path_(std::move(path)) {}
  FILE* f_ = nullptr;
  std::string path_;
};

// Resident set size of this process in bytes (from /proc/self/statm), 0 if unknown.
int64_t rss_bytes();

}  // namespace lmt::metrics
