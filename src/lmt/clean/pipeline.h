// `lmtrain data clean`: raw documents -> cleaned JSONL shards, in resumable stages
// (docs/DATA_CLEAN.md):
//   filter          read the inputs (lmt/data/prepare_inputs.h), normalise (normalize.h), apply the
//                   Gopher repetition, Gopher quality, C4 and FineWeb filters (filters.h) — parallel
//   exact_dedup     drop documents whose normalised text was seen earlier (and, if asked, C4-style
//                   lines seen in earlier documents) — sequential, first occurrence kept
//   minhash         MinHash-LSH near-duplicate removal (lmt/dedup/minhash.h): signatures in parallel,
//                   clusters, every member but the first (smallest doc index) dropped
//   decontaminate   drop (or report) documents sharing an n-gram with an eval item — parallel
//   write           DIR/shard_NNNNN.jsonl, DIR/clean_report.json, DIR/removed_sample.jsonl, staged
//                   and committed by io::AtomicDirectory (kHidden)
// Stages work in DIR.tmp/<stage>/ and finish with a DONE marker; a killed run started again with
// the same inputs and settings skips the finished stages and redoes the unfinished one from its start.
// DIR appears only complete (one rename); an existing DIR is never touched.
// Output is the same for any worker count: workers only compute per-document results, which are
// written in document order.
//
// clean_report.json's "timing" (the one part that differs between runs): {"stages": [{"stage",
// "bytes_in", "seconds", "mb_per_s"} per stage run by this process, then "write" (shards and
// removed samples); a stage skipped on resume has "resumed": true instead of seconds],
// "total_seconds" (run_clean's wall time), "peak_rss_bytes" (getrusage ru_maxrss of the process so
// far), "workers"}. MB/s is bytes_in / 1e6 / seconds. The "stages" counts carry no times.
//
// Fault injection for the resume tests: LMT_CLEAN_FAULT="after:<stage>" kills the process (SIGKILL)
// right after <stage> finished; "during:<stage>:<N>" after N documents of <stage> went to disk.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lmt/base/status.h"
#include "lmt/clean/options.h"

namespace lmt::clean {

// Where the running stage is: documents decided so far of the documents it reads (0: not known
// before the end, as for `filter`, which reads the raw inputs).
struct CleanProgress {
  std::string stage;
  int64_t docs_done = 0, docs_total = 0;
};

struct CleanRequest {
  std::vector<std::string> inputs;
  std::string out;
  CleanOptions options;
  int64_t workers = 1;                     // >= 1
  std::vector<std::string> decontaminate;  // eval files (decontaminate.h)
  // Called after every document a stage decided, in document order, on the calling thread (for a
  // progress display; it must not throw). Stages skipped on resume report nothing.
  std::function<void(const CleanProgress&)> progress = {};
};

struct CleanResult {
  nlohmann::json report;                  // what clean_report.json holds
  std::vector<std::string> resumed_stages; // stages found finished in DIR.tmp and skipped
  std::vector<std::string> shards;         // the shard file names in DIR
};

// Errors: kFailedPrecondition (DIR exists, or DIR.tmp holds a run with other inputs or
// settings), kInvalidArgument (a malformed input line, named by file and line), kNotFound, kIoError,
// kDataLoss (a damaged DIR.tmp).
StatusOr<CleanResult> run_clean(const CleanRequest& request);

}  // namespace lmt::clean
