#include "lmt/metrics/metrics_log.h"

#include <unistd.h>

#include <chrono>
#include <string_view>

#include "lmt/io/atomic_file.h"

namespace lmt::metrics {

namespace {

// Reads `path` ("" if missing). Fails only on a read error.
StatusOr<std::string> read_all(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return std::string();
  std::string text;
  char buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
  const bool bad = std::ferror(f) != 0;
  std::fclose(f);
  if (bad) return IoError("cannot read " + path);
  return text;
}

// `path` becomes `text` atomically: on any failure it is left as it was.
Status replace_file(const std::string& path, const std::string& text) { return io::write_file_atomically(path, text); }

// The lines of `text` to keep (see open()), and a description of what was dropped.
std::string repair(const std::string& text, int64_t keep_through_step, std::string* what) {
  std::string kept;
  int64_t later = 0;
  bool torn = false;
  for (size_t at = 0; at < text.size();) {
    const size_t end = text.find('\n', at);
    const std::string_view line(text.data() + at, (end == std::string::npos ? text.size() : end) - at);
    at = end == std::string::npos ? text.size() : end + 1;
    const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (end == std::string::npos || (j.is_discarded() && at == text.size())) {
      torn = !line.empty();
      continue;
    }
    if (keep_through_step >= 0 && j.is_object() && j.contains("step") && j["step"].is_number_integer() &&
        j["step"].get<int64_t>() > keep_through_step) {
      ++later;
      continue;
    }
    kept.append(line).push_back('\n');
  }
  what->clear();
  if (torn) *what = "dropped a torn last line";
  if (later > 0)
    *what += (what->empty() ? "dropped " : "; dropped ") + std::to_string(later) + " records after step " +
             std::to_string(keep_through_step) + " (the resumed run writes them again)";
  return kept;
}

}  // namespace

StatusOr<MetricsLog> MetricsLog::open(const std::string& path, int64_t keep_through_step, std::string* repaired) {
  LMT_ASSIGN_OR_RETURN(std::string text, read_all(path));
  std::string what;
  const std::string kept = repair(text, keep_through_step, &what);
  if (!what.empty()) LMT_RETURN_IF_ERROR(replace_file(path, kept));
  if (repaired) *repaired = what;
  FILE* f = std::fopen(path.c_str(), "ab");
  if (!f) return IoError("cannot open " + path + " for appending", "check that the run directory is writable");
  return MetricsLog(f, path);
}

MetricsLog& MetricsLog::operator=(MetricsLog&& o) noexcept {
  if (this != &o) {
    if (f_) std::fclose(f_);
    f_ = o.f_;
    path_ = std::move(o.path_);
    o.f_ = nullptr;
  }
  return *this;
}

MetricsLog::~MetricsLog() {
  if (f_) std::fclose(f_);
}

Status MetricsLog::write(const nlohmann::json& record) {
  if (!record.is_object() || !record.contains("type") || !record["type"].is_string())
    return InvalidArgument("a metrics record for " + path_ + " has no string \"type\": " + record.dump(),
                           "this is a bug in lmtrain: every record names its type (docs/FORMATS.md)");
  nlohmann::json stamped;
  const nlohmann::json* out = &record;
  if (!record.contains("time")) {
    stamped = record;
    stamped["time"] = unix_seconds_now();
    out = &stamped;
  }
  const std::string line = out->dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  if (std::fwrite(line.data(), 1, line.size(), f_) != line.size() || std::fflush(f_) != 0)
    return IoError("failed writing " + path_, "is the disk full?");
  return Status::Ok();
}

double unix_seconds_now() {
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  return static_cast<double>(std::chrono::duration_cast<std::chrono::microseconds>(now).count()) * 1e-6;
}

int64_t rss_bytes() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return 0;
  long pages = 0, resident = 0;
  const int n = std::fscanf(f, "%ld %ld", &pages, &resident);
  std::fclose(f);
  return n == 2 ? static_cast<int64_t>(resident) * sysconf(_SC_PAGESIZE) : 0;
}

}  // namespace lmt::metrics
