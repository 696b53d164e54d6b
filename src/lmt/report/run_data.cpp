#include "lmt/report/run_data.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string_view>

namespace lmt::report {
namespace fs = std::filesystem;

namespace {

// The record's type: its "type", or for files written before types existed, its shape.
std::string type_of(const nlohmann::json& j) {
  if (j.contains("type") && j["type"].is_string()) return j["type"].get<std::string>();
  if (j.contains("event")) return "event";
  if (j.contains("loss")) return "step";
  if (j.contains("val_loss")) return "val";
  for (const auto& [k, v] : j.items())
    if (k.rfind("eval_", 0) == 0) return "eval";
  return "";
}

}  // namespace

Status parse_metrics(const std::string& text, const std::string& path, RunData* run) {
  int64_t line_no = 0;
  for (size_t at = 0; at < text.size();) {
    const size_t end = text.find('\n', at);
    const bool last_unterminated = end == std::string::npos;
    const std::string_view line(text.data() + at, (last_unterminated ? text.size() : end) - at);
    at = last_unterminated ? text.size() : end + 1;
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) {
      if (last_unterminated) {
        run->warnings.push_back(path + ":" + std::to_string(line_no) +
                                ": skipped a torn last line (the run stopped mid-write; --resume repairs it)");
        continue;
      }
      return DataLoss(path + ":" + std::to_string(line_no) + ": not a JSON object",
                      "metrics.jsonl holds one JSON object per line (docs/FORMATS.md); fix or remove that line");
    }
    const std::string type = type_of(j);
    if (type == "header") {
      if (run->header.is_null()) run->header = j;
      run->headers.push_back(std::move(j));
    } else if (type == "step") {
      run->steps.push_back(std::move(j));
    } else if (type == "val") {
      run->vals.push_back(std::move(j));
    } else if (type == "eval") {
      run->evals.push_back(std::move(j));
    } else if (type == "event") {
      run->events.push_back(std::move(j));
    }
  }
  return Status::Ok();
}

StatusOr<RunData> read_run(const std::string& dir) {
  RunData run;
  run.dir = dir;
  std::string trimmed = dir;
  while (trimmed.size() > 1 && trimmed.back() == '/') trimmed.pop_back();
  run.label = fs::path(trimmed).filename().string();
  if (run.label.empty() || run.label == "." || run.label == "..")
    run.label = fs::weakly_canonical(fs::path(trimmed)).filename().string();
  const std::string path = (fs::path(dir) / "metrics.jsonl").string();
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return NotFound("run " + dir + ": " + path + " does not exist or cannot be read",
                    "pass a run directory written by lmtrain train (it holds metrics.jsonl)");
  std::ostringstream buf;
  buf << in.rdbuf();
  if (in.bad()) return IoError("cannot read " + path);
  LMT_RETURN_IF_ERROR(parse_metrics(buf.str(), path, &run));
  std::error_code ec;
  const fs::path ckpt = fs::path(dir) / "checkpoints";
  if (fs::is_directory(ckpt, ec)) {
    for (const auto& e : fs::directory_iterator(ckpt, ec)) {
      const std::string name = e.path().filename().string();
      if (name.rfind("step_", 0) != 0 || name.find('.') != std::string::npos) continue;  // not *.tmp/*.corrupt
      if (fs::exists(e.path() / "manifest.json", ec)) run.checkpoints.push_back(e.path().string());
    }
    std::sort(run.checkpoints.begin(), run.checkpoints.end());
  }
  return run;
}

StatusOr<std::vector<RunData>> read_runs(const std::vector<std::string>& dirs) {
  std::vector<RunData> runs;
  for (const auto& d : dirs) {
    LMT_ASSIGN_OR_RETURN(RunData r, read_run(d));
    runs.push_back(std::move(r));
  }
  std::map<std::string, int> count;
  for (const auto& r : runs) ++count[r.label];
  for (auto& r : runs)
    if (count[r.label] > 1) r.label = r.dir;
  return runs;
}

}  // namespace lmt::report
