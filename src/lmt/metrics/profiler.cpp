#include "lmt/metrics/profiler.h"

#include <algorithm>
#include <cstdio>
#include <map>

#include <nlohmann/json.hpp>

#include "lmt/io/atomic_file.h"

namespace lmt::metrics {

Status write_chrome_trace(const std::string& path, const std::vector<TraceEvent>& events) {
  nlohmann::json list = nlohmann::json::array();
  for (const auto& e : events)
    list.push_back({{"name", e.name}, {"ph", "X"}, {"ts", e.start_us}, {"dur", e.duration_us}, {"pid", 0}, {"tid", e.thread}});
  const std::string text = nlohmann::json{{"traceEvents", list}, {"displayTimeUnit", "ms"}}.dump();
  return io::write_file_atomically(path, text);
}

std::string profile_summary(const std::vector<TraceEvent>& events, const std::string& root) {
  struct Row {
    double total = 0;
    int64_t count = 0;
  };
  std::map<std::string, Row> rows;
  double root_total = 0, first = 1e300, last = 0;
  for (const auto& e : events) {
    Row& r = rows[e.name];
    r.total += e.duration_us;
    ++r.count;
    if (e.name == root) root_total += e.duration_us;
    first = std::min(first, e.start_us);
    last = std::max(last, e.start_us + e.duration_us);
  }
  const double denom = root_total > 0 ? root_total : std::max(last - first, 1e-9);
  std::vector<std::pair<std::string, Row>> sorted(rows.begin(), rows.end());
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.second.total > b.second.total; });
  std::string out = "range                     % time     total ms    count     avg ms\n";
  char line[160];
  for (const auto& [name, r] : sorted) {
    std::snprintf(line, sizeof line, "%-24s %7.1f%% %12.2f %8lld %10.3f\n", name.c_str(), 100.0 * r.total / denom,
                  r.total / 1e3, static_cast<long long>(r.count), r.total / 1e3 / static_cast<double>(r.count));
    out += line;
  }
  return out;
}

OpSplit op_split(const std::vector<TraceEvent>& events, const std::string& root, const std::string& prefix, int64_t steps) {
  // The root ranges, by start: only op ranges inside one of them count (others, e.g. the
  // contended steps of `bench train --contend`, are other work).
  std::vector<std::pair<double, double>> roots;
  double root_total = 0;
  for (const auto& e : events)
    if (e.name == root) {
      roots.emplace_back(e.start_us, e.start_us + e.duration_us);
      root_total += e.duration_us;
    }
  std::sort(roots.begin(), roots.end());
  auto inside_root = [&](const TraceEvent& e) {
    auto it = std::upper_bound(roots.begin(), roots.end(), std::make_pair(e.start_us, 1e300));
    return it != roots.begin() && e.start_us + e.duration_us <= std::prev(it)->second;
  };
  std::map<std::string, double> totals;
  double inside = 0;
  for (const auto& e : events) {
    const std::string name = e.name;
    if (name.compare(0, prefix.size(), prefix) == 0 && inside_root(e)) {
      totals[name.substr(prefix.size())] += e.duration_us;
      inside += e.duration_us;
    }
  }
  const double per = 1e-3 / static_cast<double>(std::max<int64_t>(steps, 1));
  OpSplit out;
  out.step_ms = root_total * per;
  for (const auto& [name, us] : totals) out.rows.emplace_back(name, us * per);
  std::sort(out.rows.begin(), out.rows.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  out.rows.emplace_back("other", std::max(0.0, root_total - inside) * per);
  return out;
}

}  // namespace lmt::metrics
