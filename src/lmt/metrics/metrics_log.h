// MetricsLog: RUN/metrics.jsonl, one JSON object per line, flushed after every line so a crashed
// run keeps everything it logged. Only one process (rank 0) writes it.
//
// Every record has a string "type" (docs/FORMATS.md, "metrics.jsonl"): "header" (one per start or
// resume of a run: version, commit, config, machine, peaks, world layout), "step" (a training
// step), "val" (validation loss), "eval" (task accuracies), "event" (stopped, rollback,
// checkpoints_quarantined, ...; the kind under "event"). write() stamps every record with "time":
// wall-clock Unix seconds (UTC, fractional, e.g. 1764022510.125) unless the record already has one.
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
  // Appends `record` (a JSON object with a string "type"; anything else is InvalidArgument and
  // nothing is written) with "time" added when absent.
  Status write(const nlohmann::json& record);
  const std::string& path() const { return path_; }

 private:
  MetricsLog(FILE* f, std::string path) : f_(f), path_(std::move(path)) {}
  FILE* f_ = nullptr;
  std::string path_;
};

// Wall-clock time now in Unix seconds (UTC), with sub-second precision: the "time" of a record.
double unix_seconds_now();

// Resident set size of this process in bytes (from /proc/self/statm), 0 if unknown.
int64_t rss_bytes();

}  // namespace lmt::metrics
