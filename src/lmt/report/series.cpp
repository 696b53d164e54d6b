#include "lmt/report/series.h"

#include <algorithm>
#include <cmath>

namespace lmt::report {

Series extract(const std::vector<nlohmann::json>& records, const std::string& x_key, const std::string& y_key,
               double y_scale) {
  Series s;
  for (const auto& r : records) {
    if (!r.is_object()) continue;
    const auto xi = r.find(x_key), yi = r.find(y_key);
    if (xi == r.end() || yi == r.end() || !xi->is_number() || !yi->is_number()) continue;
    const double x = xi->get<double>(), y = yi->get<double>() * y_scale;
    if (!std::isfinite(x) || !std::isfinite(y)) continue;
    s.x.push_back(x);
    s.y.push_back(y);
  }
  return s;
}

std::vector<double> trailing_mean(const std::vector<double>& y, size_t window) {
  window = std::max<size_t>(window, 1);
  std::vector<double> out(y.size());
  double sum = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    sum += y[i];
    if (i >= window) sum -= y[i - window];
    out[i] = sum / static_cast<double>(std::min(i + 1, window));
  }
  return out;
}

size_t smoothing_window(size_t n) { return std::clamp<size_t>(n / 10, 1, 50); }

}  // namespace lmt::report
