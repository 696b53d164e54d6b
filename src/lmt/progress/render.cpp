#include "lmt/progress/render.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "lmt/base/format.h"

namespace lmt::progress {
namespace {

std::string fixed(double v, int decimals) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", std::clamp(decimals, 0, 12), v);
  return buf;
}

std::string mb_text(int64_t bytes) { return fixed(static_cast<double>(bytes) / 1e6, 1); }

// "120/300 40%", "12.3/45.6 MB 27%", "1,234", "12.3 MB".
std::string count_part(const View& v) {
  const bool bytes = v.style == CountStyle::kBytes;
  if (v.total <= 0) return bytes ? mb_text(v.done) + " MB" : count_text(v.done);
  const double frac = std::clamp(static_cast<double>(v.done) / static_cast<double>(v.total), 0.0, 1.0);
  const std::string pct = std::to_string(static_cast<int>(std::floor(100 * frac))) + "%";
  if (bytes) return mb_text(v.done) + "/" + mb_text(v.total) + " MB " + pct;
  return count_text(v.done) + "/" + count_text(v.total) + " " + pct;
}

std::string tail_part(const View& v) {
  const bool finished = v.total > 0 && v.done >= v.total;
  if (v.total <= 0 || finished) return duration_text(v.elapsed_seconds) + " elapsed";
  if (!std::isfinite(v.eta_seconds) || v.eta_seconds < 0) return "ETA ?";
  return "ETA " + duration_text(v.eta_seconds);
}

std::string fields_part(const std::vector<Field>& fields, size_t n) {
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    s += " | ";
    s += fields[i].name.empty() ? fields[i].text : fields[i].name + " " + fields[i].text;
  }
  return s;
}

}  // namespace

std::string si_text(double value) {
  if (!std::isfinite(value)) return fixed(value, 0);
  if (value < 0) return "-" + si_text(-value);
  static const char* kSuffix[] = {"", "k", "M", "G", "T", "P"};
  int i = 0;
  // Rounding to 3 significant digits may carry into the next suffix (999.96 -> "1.00k").
  while (i < 5 && value >= 999.5) {
    value /= 1000;
    ++i;
  }
  char buf[32];
  if (i == 0 && value == std::floor(value)) std::snprintf(buf, sizeof buf, "%.0f", value);  // "0", "950"
  else if (value < 9.995) std::snprintf(buf, sizeof buf, "%.2f%s", value, kSuffix[i]);
  else if (value < 99.95) std::snprintf(buf, sizeof buf, "%.1f%s", value, kSuffix[i]);
  else std::snprintf(buf, sizeof buf, "%.0f%s", value, kSuffix[i]);
  return buf;
}

std::string count_text(int64_t value) {
  if (value < 0) return "-" + count_text(value == INT64_MIN ? INT64_MAX : -value);
  std::string digits = std::to_string(value), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

Field number(const std::string& name, double value, int decimals) { return {name, fixed(value, decimals)}; }

Field rate(double per_second, const std::string& unit) {
  return {"", (std::isfinite(per_second) ? si_text(per_second) : std::string("-")) + " " + unit};
}

Field percent(const std::string& name, double fraction) {
  return {name, std::isfinite(fraction) ? fixed(100 * fraction, 1) + "%" : std::string("-")};
}

std::string render_line(const View& v) {
  return v.label + " " + count_part(v) + fields_part(v.fields, v.fields.size()) + " | " + tail_part(v);
}

std::string render_bar(const View& v, int width) {
  const size_t limit = static_cast<size_t>(std::max(width, 20) - 1);
  if (v.total <= 0) {
    std::string s = render_line(v);
    if (s.size() > limit) s.resize(limit);
    return s;
  }
  constexpr size_t kMinCells = 10, kMaxCells = 30;
  const std::string prefix = v.label + " [", count = "] " + count_part(v), tail = " | " + tail_part(v);
  size_t n = v.fields.size();
  std::string fields = fields_part(v.fields, n);
  auto used = [&] { return prefix.size() + count.size() + fields.size() + tail.size(); };
  while (n > 0 && used() + kMinCells > limit) fields = fields_part(v.fields, --n);
  const size_t cells = used() + kMinCells > limit ? kMinCells : std::min(kMaxCells, limit - used());
  const double frac = std::clamp(static_cast<double>(v.done) / static_cast<double>(v.total), 0.0, 1.0);
  const size_t filled = std::min(cells, static_cast<size_t>(std::floor(frac * static_cast<double>(cells))));
  std::string s = prefix + std::string(filled, '#') + std::string(cells - filled, '-') + count + fields + tail;
  if (s.size() > limit) s.resize(limit);
  return s;
}

}  // namespace lmt::progress
