// Profiler output: a Chrome trace (opens in Perfetto / chrome://tracing) and a summary table of
// named ranges (% of the traced time, total, count, average), from base/trace.h events.
#pragma once

#include <string>
#include <vector>

#include "lmt/base/status.h"
#include "lmt/base/trace.h"

namespace lmt::metrics {

// Writes {"traceEvents": [...]} with complete ("X") events; atomically (temp + rename).
Status write_chrome_trace(const std::string& path, const std::vector<TraceEvent>& events);

// One row per range name, sorted by total time; "% time" is relative to the sum of the outermost
// ranges named `root` (e.g. "train_step"), or to the trace's span when there are none.
std::string profile_summary(const std::vector<TraceEvent>& events, const std::string& root);

}  // namespace lmt::metrics
