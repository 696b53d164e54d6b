// Series: the (x, y) points of one curve, taken from metrics records, and their smoothing.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace lmt::report {

enum class Style {
  kLine,       // solid line
  kFaintLine,  // thin translucent line (raw values under a smoothed curve)
  kDashed,     // dashed line with a dot on every point (sparse series: val loss, eval accuracy)
  kDots,       // dots only (events)
};

struct Series {
  std::string name;   // legend text (escaped when rendered)
  std::string color;  // CSS colour, e.g. "#1f77b4"
  Style style = Style::kLine;
  std::vector<double> x, y;  // equal lengths, finite values only
};

// (record[x_key], record[y_key] · y_scale) of every record where both are finite numbers, in record
// order (a NaN loss is written as null and skipped).
Series extract(const std::vector<nlohmann::json>& records, const std::string& x_key, const std::string& y_key,
               double y_scale = 1.0);

// Trailing mean: out[i] = mean(y[max(0, i-window+1) .. i]); window >= 1.
std::vector<double> trailing_mean(const std::vector<double>& y, size_t window);
// The smoothing window for n points: n / 10, at least 1, at most 50.
size_t smoothing_window(size_t n);

}  // namespace lmt::report
