#include "lmt/metrics/metrics_log.h"

#include <unistd.h>

namespace lmt::metrics {

StatusOr<MetricsLog> MetricsLog::open(const std::string& path) {
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
  const std::string line = record.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  if (std::fwrite(line.data(), 1, line.size(), f_) != line.size() || std::fflush(f_) != 0)
    return IoError("failed writing " + path_, "is the disk full?");
  return Status::Ok();
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
