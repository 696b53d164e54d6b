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

// The time split of `steps` steps by op family: every range inside a `root` range whose name starts with `prefix` (the
// kernel interface's entry points record "op:gemm", "op:attention", ... — kernels/backend.cpp), in
// ms per step, plus "other" = the root ranges' time not inside any of them (host code, the
// model's bookkeeping, waits). Op ranges never nest, so the rows add up to the step time.
struct OpSplit {
  double step_ms = 0;                                // root time per step
  std::vector<std::pair<std::string, double>> rows;  // name (prefix removed), ms per step; largest first; "other" last
};
OpSplit op_split(const std::vector<TraceEvent>& events, const std::string& root, const std::string& prefix, int64_t steps);

}  // namespace lmt::metrics
