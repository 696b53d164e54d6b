#include "lmt/clean/pipeline.h"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include <sys/resource.h>

#include "lmt/clean/stages.h"
#include "lmt/io/atomic_dir.h"

namespace lmt::clean {
namespace fs = std::filesystem;
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// The process's peak resident set size so far (getrusage; Linux reports ru_maxrss in KiB).
int64_t peak_rss_bytes() {
  struct rusage ru {};
  if (::getrusage(RUSAGE_SELF, &ru) != 0) return 0;
  return static_cast<int64_t>(ru.ru_maxrss) * 1024;
}

// One entry of the report's "timing" (pipeline.h): wall seconds of a stage run in this process,
// the bytes it read and their rate. A stage skipped on resume has "resumed": true and no rate.
json stage_timing(const std::string& name, std::optional<double> seconds, int64_t bytes_in) {
  json t = {{"stage", name}, {"bytes_in", bytes_in}};
  if (!seconds) {
    t["resumed"] = true;
    return t;
  }
  t["seconds"] = *seconds;
  t["mb_per_s"] = *seconds > 0 ? static_cast<double>(bytes_in) / 1e6 / *seconds : 0.0;
  return t;
}

// ---- the final directory ----

Status write_final(const CleanRequest& req, const std::string& last_dir, const std::vector<std::string>& stage_dirs,
                   const std::map<std::string, double>& stage_seconds, Clock::time_point run_start,
                   const std::string& final_dir, CleanResult* result) {
  const CleanOptions& o = req.options;
  const Clock::time_point write_start = Clock::now();
  // Shards.
  LMT_ASSIGN_OR_RETURN(StageReader reader, StageReader::open(last_dir + "/records.tsv"));
  std::optional<LineWriter> shard;
  int64_t docs = 0;
  for (StageRecord r;;) {
    LMT_ASSIGN_OR_RETURN(bool more, reader.next(&r));
    if (!more) break;
    if (!shard || shard->bytes() >= o.shard_bytes) {
      if (shard) LMT_RETURN_IF_ERROR(shard->close());
      char name[32];
      std::snprintf(name, sizeof name, "shard_%05zu.jsonl", result->shards.size());
      result->shards.push_back(name);
      shard.reset();
      LMT_ASSIGN_OR_RETURN(LineWriter w, LineWriter::create(final_dir + "/" + name));
      shard.emplace(std::move(w));
    }
    LMT_RETURN_IF_ERROR(shard->write(r.record + "\n"));
    ++docs;
  }
  if (shard) LMT_RETURN_IF_ERROR(shard->close());
  // Report and removed samples, stage by stage.
  json stages = json::array();
  LMT_ASSIGN_OR_RETURN(LineWriter samples, LineWriter::create(final_dir + "/removed_sample.jsonl"));
  std::map<std::string, int64_t> per_reason;
  json removed_total = json::object();
  for (const std::string& d : stage_dirs) {
    std::ifstream in(d + "/stats.json");
    json s = json::parse(in, nullptr, false);
    if (s.is_discarded()) return DataLoss(d + "/stats.json does not parse", "remove the .tmp directory of the run and start it again");
    for (auto& [reason, c] : s["removed"].items()) removed_total[reason] = c;
    stages.push_back(s);
    std::ifstream rem(d + "/removed.jsonl");
    for (std::string line; std::getline(rem, line);) {
      json j = json::parse(line, nullptr, false);
      if (j.is_discarded()) continue;
      if (per_reason[j.value("reason", "")]++ < o.removed_samples_per_reason) LMT_RETURN_IF_ERROR(samples.write(line + "\n"));
    }
  }
  LMT_RETURN_IF_ERROR(samples.close());
  json timing = {{"stages", json::array()}};
  for (const json& st : stages) {
    const std::string name = st.value("stage", "");
    auto it = stage_seconds.find(name);
    timing["stages"].push_back(stage_timing(name, it == stage_seconds.end() ? std::nullopt : std::optional<double>(it->second),
                                            st.value("bytes_in", int64_t{0})));
  }
  // `write`: the shards and removed samples (the report itself is left out).
  timing["stages"].push_back(stage_timing("write", seconds_since(write_start), stages.empty() ? 0 : stages.back().value("bytes_out", int64_t{0})));
  timing["total_seconds"] = seconds_since(run_start);
  timing["peak_rss_bytes"] = peak_rss_bytes();
  timing["workers"] = req.workers;
  const json& first = stages.empty() ? json::object() : stages.front();
  json report = {{"inputs", req.inputs},
                 {"documents_in", first.value("documents_in", 0)},
                 {"bytes_in", first.value("bytes_in", 0)},
                 {"documents_out", docs},
                 {"bytes_out", stages.empty() ? 0 : stages.back().value("bytes_out", 0)},
                 {"shards", result->shards},
                 {"removed", removed_total},
                 {"stages", stages},
                 {"settings", options_fingerprint(o)},
                 {"timing", timing}};
  result->report = report;
  LMT_RETURN_IF_ERROR(io::write_file_atomically(final_dir + "/clean_report.json", report.dump(1) + "\n"));
  return io::fsync_directory(final_dir);
}

std::string run_fingerprint(const CleanRequest& req, const std::vector<data::InputFile>& files) {
  std::string s = "lmtrain data clean v1\n" + options_fingerprint(req.options);
  for (const auto& f : files) s += "input " + f.path + " " + std::to_string(f.bytes) + "\n";
  for (const auto& d : req.decontaminate) s += "decontaminate " + d + "\n";
  return s;
}

std::string strip_slash(std::string p) {
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  return p;
}

}  // namespace

StatusOr<CleanResult> run_clean_in(const CleanRequest& req_in, bool* tmp_created);

StatusOr<CleanResult> run_clean(const CleanRequest& req) {
  // A run that fails with an error (not a kill) leaves DIR.tmp only when a stage finished there,
  // so that running it again resumes; otherwise nothing is left behind.
  bool tmp_created = false;
  StatusOr<CleanResult> r = run_clean_in(req, &tmp_created);
  if (!r.ok() && tmp_created) {
    const std::string tmp = strip_slash(req.out) + ".tmp";
    bool any_done = false;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(tmp, ec)) any_done = any_done || stage_done(e.path().string());
    if (!any_done) fs::remove_all(tmp, ec);
  }
  return r;
}

StatusOr<CleanResult> run_clean_in(const CleanRequest& req_in, bool* tmp_created) {
  const Clock::time_point run_start = Clock::now();
  CleanRequest req = req_in;
  req.out = strip_slash(req.out);
  if (req.out.empty()) return InvalidArgument("--out is empty", "name the output directory to create");
  if (fs::exists(req.out))
    return FailedPrecondition("the output " + req.out + " already exists", "choose a new --out directory (data clean never overwrites)");
  LMT_ASSIGN_OR_RETURN(std::vector<data::InputFile> files, data::list_input_files(req.inputs));
  std::optional<ContaminationIndex> index;
  if (!req.decontaminate.empty()) {
    LMT_ASSIGN_OR_RETURN(ContaminationIndex built, ContaminationIndex::build(req.decontaminate, req.options.decontaminate_ngram));
    index.emplace(std::move(built));
  }

  const std::string tmp = req.out + ".tmp";
  const std::string fingerprint = run_fingerprint(req, files);
  CleanResult result;
  std::error_code ec;
  if (fs::exists(tmp + "/run.txt")) {
    std::ifstream in(tmp + "/run.txt", std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    if (ss.str() != fingerprint)
      return FailedPrecondition(tmp + " holds an unfinished run with other inputs or settings",
                                "run it again with the same inputs and settings to resume it, or remove " + tmp + " to start over");
  } else {
    fs::remove_all(tmp, ec);
    if (!fs::create_directories(tmp, ec) && ec) return IoError("cannot create " + tmp + ": " + ec.message());
    *tmp_created = true;
    LMT_RETURN_IF_ERROR(io::write_file_atomically(tmp + "/run.txt", fingerprint));
    LMT_RETURN_IF_ERROR(io::fsync_directory(tmp));
  }

  std::vector<std::string> stage_dirs;
  std::map<std::string, double> stage_seconds;  // the stages run (not resumed) in this process
  std::string last;
  auto stage = [&](const std::string& name, const std::function<Status(const std::string& in, const std::string& dir)>& run) -> Status {
    const std::string dir = tmp + "/" + name;
    if (stage_done(dir)) result.resumed_stages.push_back(name);
    else {
      const Clock::time_point t0 = Clock::now();
      LMT_RETURN_IF_ERROR(run(last, dir));
      stage_seconds[name] = seconds_since(t0);
      maybe_kill_after(name);
    }
    stage_dirs.push_back(dir);
    last = dir;
    return Status::Ok();
  };
  LMT_RETURN_IF_ERROR(stage("filter", [&](const std::string&, const std::string& dir) { return run_filter_stage(req, files, dir); }));
  if (req.options.exact_dedup || req.options.exact_dedup_lines)
    LMT_RETURN_IF_ERROR(stage("exact_dedup", [&](const std::string& in, const std::string& dir) { return run_exact_dedup_stage(req, in, dir); }));
  if (req.options.minhash.enabled)
    LMT_RETURN_IF_ERROR(stage("minhash", [&](const std::string& in, const std::string& dir) { return run_minhash_stage(req, in, dir); }));
  if (index)
    LMT_RETURN_IF_ERROR(stage("decontaminate", [&](const std::string& in, const std::string& dir) { return run_decontaminate_stage(req, *index, in, dir); }));

  // The final directory: staged as a hidden sibling of DIR, renamed to DIR in one step
  // (io::AtomicDirectory; it never replaces a non-empty DIR).
  LMT_ASSIGN_OR_RETURN(io::AtomicDirectory final_dir, io::AtomicDirectory::create(req.out, io::AtomicDirectory::Staging::kHidden));
  LMT_RETURN_IF_ERROR(write_final(req, last, stage_dirs, stage_seconds, run_start, final_dir.tmp_path(), &result));
  maybe_kill_after("write");
  if (fs::exists(req.out))
    return FailedPrecondition("the output " + req.out + " appeared while the run was writing", "choose a new --out directory");
  LMT_RETURN_IF_ERROR(final_dir.commit());
  fs::remove_all(tmp, ec);  // the stages' work; a leftover is harmless
  return result;
}

}  // namespace lmt::clean
