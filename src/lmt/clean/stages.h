// Internal to lmt_clean: what the stages of `data clean` (pipeline.h) share. Each stage writes
// DIR.tmp/<stage>/ through a StageWriter (records.tsv, removed.jsonl, stats.json, then DONE; see
// stage_io.h); the stages after `filter` run over the previous stage's records with
// run_record_stage(). Workers only compute per-document results (parallel_for); results are
// applied in document order, so no output depends on the worker count.
#pragma once

#include <csignal>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lmt/base/status.h"
#include "lmt/clean/decontaminate.h"
#include "lmt/clean/pipeline.h"
#include "lmt/clean/stage_io.h"
#include "lmt/data/prepare_inputs.h"
#include "lmt/io/atomic_file.h"
#include "lmt/io/files.h"

namespace lmt::clean {

using json = nlohmann::json;

// Fault injection (pipeline.h, LMT_CLEAN_FAULT): SIGKILL after `stage` finished; the document
// count of `stage` at which to SIGKILL (-1: none).
void maybe_kill_after(const std::string& stage);
int64_t kill_during(const std::string& stage);

// Runs fn(i) for i in [0, n) over `workers` threads. fn must only touch slot i of its outputs.
void parallel_for(int64_t n, int64_t workers, const std::function<void(int64_t)>& fn);

// The first 1000 bytes of a removed document's text (whole UTF-8 characters), for removed.jsonl.
std::string text_sample(const std::string& text);

// The output record of a document: the input line `raw` as it was when the text is unchanged, else
// the input object (key order kept) with `field` replaced by `text`; {"field": text} for "" raw.
std::string make_record(const std::string& raw, const std::string& field, const std::string& original,
                        const std::string& text);

// The text field of a stage record. Errors: kDataLoss naming `where`.
StatusOr<std::string> record_text(const StageRecord& r, const std::string& field, const std::string& where);

// Replaces *batch and *texts with the next up to o.batch_docs records of `reader` (read from
// `where`) and their text fields. Returns false once the reader is exhausted (the last batch may
// still hold records).
StatusOr<bool> read_record_batch(StageReader& reader, const CleanOptions& o, const std::string& where,
                                 std::vector<StageRecord>* batch, std::vector<std::string>* texts);

// Counts of one stage (stats.json).
struct StageStats {
  std::string name;
  int64_t docs_in = 0, bytes_in = 0, docs_out = 0, bytes_out = 0, modified = 0;
  std::map<std::string, std::pair<int64_t, int64_t>> removed;  // reason -> (docs, bytes)
  json extra = json::object();

  json to_json() const {
    json r = json::object();
    for (const auto& [k, v] : removed) r[k] = {{"documents", v.first}, {"bytes", v.second}};
    return {{"stage", name}, {"documents_in", docs_in}, {"bytes_in", bytes_in}, {"documents_out", docs_out},
            {"bytes_out", bytes_out}, {"modified", modified}, {"removed", r}, {"extra", extra}};
  }
};

// The outputs of one stage while it runs.
class StageWriter {
 public:
  static StatusOr<StageWriter> create(const std::string& dir, const std::string& name) {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);  // an unfinished earlier attempt
    if (!std::filesystem::create_directories(dir, ec) && ec) return IoError("cannot create " + dir + ": " + ec.message());
    LMT_ASSIGN_OR_RETURN(LineWriter rec, LineWriter::create(dir + "/records.tsv"));
    LMT_ASSIGN_OR_RETURN(LineWriter rem, LineWriter::create(dir + "/removed.jsonl"));
    return StageWriter(dir, name, std::move(rec), std::move(rem));
  }

  Status keep(const StageRecord& r, int64_t bytes_in, int64_t bytes_out, bool modified) {
    ++stats.docs_in;
    stats.bytes_in += bytes_in;
    ++stats.docs_out;
    stats.bytes_out += bytes_out;
    if (modified) ++stats.modified;
    LMT_RETURN_IF_ERROR(records_.write(encode_stage_record(r)));
    return tick();
  }

  Status remove(int64_t doc, const std::string& source, const std::string& reason, int64_t bytes, const std::string& text,
                const json& detail = nullptr) {
    ++stats.docs_in;
    stats.bytes_in += bytes;
    auto& c = stats.removed[reason];
    ++c.first;
    c.second += bytes;
    json j = {{"doc", doc}, {"source", source}, {"stage", stats.name}, {"reason", reason}, {"bytes", bytes}};
    if (!detail.is_null()) j["detail"] = detail;
    j["text"] = text_sample(text);
    LMT_RETURN_IF_ERROR(removed_.write(j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n"));
    return tick();
  }

  Status finish() {
    LMT_RETURN_IF_ERROR(records_.close());
    LMT_RETURN_IF_ERROR(removed_.close());
    LMT_RETURN_IF_ERROR(io::write_file_atomically(dir_ + "/stats.json", stats.to_json().dump(1) + "\n"));
    LMT_RETURN_IF_ERROR(io::fsync_directory(dir_));
    return write_done_marker(dir_);
  }

  StageStats stats;

  // Reports each document decided to `fn` (CleanRequest::progress), of `docs_total` (0: unknown).
  void report_to(std::function<void(const CleanProgress&)> fn, int64_t docs_total) {
    progress_ = std::move(fn);
    progress_state_ = {stats.name, 0, docs_total};
  }

 private:
  StageWriter(std::string dir, const std::string& name, LineWriter rec, LineWriter rem)
      : dir_(std::move(dir)), records_(std::move(rec)), removed_(std::move(rem)), kill_at_(kill_during(name)) {
    stats.name = name;
  }
  Status tick() {
    if (progress_) {
      progress_state_.docs_done = stats.docs_in;
      progress_(progress_state_);
    }
    if (kill_at_ >= 0 && stats.docs_in >= kill_at_) {
      LMT_RETURN_IF_ERROR(records_.close());  // what was written is on disk, the stage unfinished
      LMT_RETURN_IF_ERROR(removed_.close());
      std::raise(SIGKILL);
    }
    return Status::Ok();
  }
  std::function<void(const CleanProgress&)> progress_;
  CleanProgress progress_state_;
  std::string dir_;
  LineWriter records_, removed_;
  int64_t kill_at_ = -1;
};

struct RecordOutcome {
  bool keep = true;
  std::string reason;
  std::optional<std::string> new_text;  // set when the stage changed the text
  json detail;
};

// Runs a stage over the kept records of the previous stage, in batches: `decide` fills one outcome
// per record of the batch (texts are the records' text fields).
using Decide = std::function<Status(const std::vector<StageRecord>&, const std::vector<std::string>&, std::vector<RecordOutcome>*)>;

Status run_record_stage(const CleanRequest& req, const std::string& in_dir, const std::string& dir, const std::string& name,
                        const Decide& decide, const std::function<json()>& extra = {});

// The stages (pipeline.h). `in_dir` is the previous stage's directory, `dir` this stage's.
Status run_filter_stage(const CleanRequest& req, const std::vector<data::InputFile>& files, const std::string& dir);
Status run_exact_dedup_stage(const CleanRequest& req, const std::string& in_dir, const std::string& dir);
Status run_minhash_stage(const CleanRequest& req, const std::string& in_dir, const std::string& dir);
Status run_decontaminate_stage(const CleanRequest& req, const ContaminationIndex& index, const std::string& in_dir,
                               const std::string& dir);

}  // namespace lmt::clean
