// RunData: one run directory as `lmtrain report` sees it — RUN/metrics.jsonl split by record type
// (docs/FORMATS.md, "Run metrics") and the committed checkpoints under RUN/checkpoints/.
//
// Malformed input: a missing or unreadable metrics.jsonl is NotFound naming the file; a line that
// is not a JSON object is DataLoss naming the file and line number. One exception: the last line of
// the file, when it has no newline (the torn write of a run that crashed and was not resumed), is
// skipped with a warning in RunData::warnings. Records of unknown type are ignored (newer files).
// Files from before record types (no "type") are read by shape: "loss" = step, "val_loss" = val,
// "eval_*" = eval, "event" = event.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lmt/base/status.h"

namespace lmt::report {

struct RunData {
  std::string dir;    // as given
  std::string label;  // legend name: the directory's last component (made unique by read_runs)
  nlohmann::json header;   // the first header record (null when none)
  std::vector<nlohmann::json> headers;  // every header, in order (one per start/resume)
  std::vector<nlohmann::json> steps, vals, evals, events;  // records of each type, in file order
  std::vector<std::string> checkpoints;  // RUN/checkpoints/step_* directories with a manifest.json, sorted
  std::vector<std::string> warnings;    // what was skipped, for the user
};

// Reads one run directory.
StatusOr<RunData> read_run(const std::string& dir);
// Reads several; labels that would repeat get the full directory instead.
StatusOr<std::vector<RunData>> read_runs(const std::vector<std::string>& dirs);

// Parses metrics.jsonl `text` (from file `path`, for messages) into `run`.
Status parse_metrics(const std::string& text, const std::string& path, RunData* run);

}  // namespace lmt::report
