#include "lmt/report/svg_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <limits>

#include "lmt/report/escape.h"

namespace lmt::report {

namespace {

std::string fmt2(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  return buf;
}

// Up to ~5 "nice" tick values (1, 2 or 5 × 10^k apart) inside [lo, hi].
std::vector<double> ticks(double lo, double hi) {
  std::vector<double> out;
  const double span = hi - lo;
  if (!(span > 0) || !std::isfinite(span)) return {lo};
  const double raw = span / 4;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (const double m : {1.0, 2.0, 5.0, 10.0})
    if (m * mag >= raw) {
      step = m * mag;
      break;
    }
  for (double t = std::ceil(lo / step) * step; t <= hi + step * 1e-9 && out.size() < 12; t += step)
    out.push_back(std::abs(t) < step * 1e-9 ? 0.0 : t);
  return out;
}

void widen(double* lo, double* hi) {
  if (*hi > *lo) return;
  const double pad = *lo == 0 ? 0.5 : std::abs(*lo) * 0.05;
  *lo -= pad;
  *hi += pad;
}

}  // namespace

int Plot::points() const {
  int n = 0;
  for (const auto& s : series) n += static_cast<int>(s.x.size());
  return n;
}

std::string short_number(double v) {
  char buf[32];
  if (!(std::abs(v) >= 1e4) || !std::isfinite(v)) {  // small, NaN or inf: as is
    std::snprintf(buf, sizeof buf, "%.4g", v);
    return buf;
  }
  static const char* kUnits[] = {"k", "M", "G", "T", "P"};
  double scaled = v / 1e3;
  size_t u = 0;
  // Next unit when the scaled value would print as 1000 or more ("%.3g" of 999.96 is "1e+03").
  while (u + 1 < std::size(kUnits) && std::abs(scaled) >= 999.5) {
    scaled /= 1e3;
    ++u;
  }
  std::snprintf(buf, sizeof buf, "%.3g%s", scaled, kUnits[u]);
  return buf;
}

Range data_range(const Plot& plot) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  Range r{kInf, -kInf, kInf, -kInf};
  for (const auto& s : plot.series)
    for (size_t i = 0; i < s.x.size(); ++i) {
      r.x0 = std::min(r.x0, s.x[i]);
      r.x1 = std::max(r.x1, s.x[i]);
      r.y0 = std::min(r.y0, s.y[i]);
      r.y1 = std::max(r.y1, s.y[i]);
    }
  if (r.x0 > r.x1) return Range{};  // no points
  widen(&r.x0, &r.x1);
  widen(&r.y0, &r.y1);
  return r;
}

double plot_x(const Range& r, const PlotLayout& l, double x) {
  return l.left + (x - r.x0) / (r.x1 - r.x0) * (l.width - l.left - l.right);
}

double plot_y(const Range& r, const PlotLayout& l, double y) {
  return l.top + (r.y1 - y) / (r.y1 - r.y0) * (l.height - l.top - l.bottom);
}

std::string render_svg(const Plot& plot, const PlotLayout& l) {
  const Range r = data_range(plot);
  const double x_lo = l.left, x_hi = l.width - l.right, y_lo = l.top, y_hi = l.height - l.bottom;
  std::string s = "<svg class=\"plot\" id=\"" + html_escape(plot.id) + "\" data-points=\"" + std::to_string(plot.points()) +
                  "\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" + std::to_string(l.width) + "\" height=\"" +
                  std::to_string(l.height) + "\" viewBox=\"0 0 " + std::to_string(l.width) + " " + std::to_string(l.height) +
                  "\" role=\"img\">\n";
  s += "<title>" + html_escape(plot.title) + "</title>\n";
  s += "<text class=\"ptitle\" x=\"" + fmt2(x_lo) + "\" y=\"18\">" + html_escape(plot.title) + "</text>\n";
  s += "<rect class=\"frame\" x=\"" + fmt2(x_lo) + "\" y=\"" + fmt2(y_lo) + "\" width=\"" + fmt2(x_hi - x_lo) +
       "\" height=\"" + fmt2(y_hi - y_lo) + "\" fill=\"none\" stroke=\"#999\"/>\n";
  for (const double t : ticks(r.x0, r.x1)) {
    const std::string px = fmt2(plot_x(r, l, t));
    s += "<line class=\"grid\" x1=\"" + px + "\" y1=\"" + fmt2(y_lo) + "\" x2=\"" + px + "\" y2=\"" + fmt2(y_hi) +
         "\" stroke=\"#eee\"/><text class=\"tick\" x=\"" + px + "\" y=\"" + fmt2(y_hi + 14) +
         "\" text-anchor=\"middle\">" + html_escape(short_number(t)) + "</text>\n";
  }
  for (const double t : ticks(r.y0, r.y1)) {
    const std::string py = fmt2(plot_y(r, l, t));
    s += "<line class=\"grid\" x1=\"" + fmt2(x_lo) + "\" y1=\"" + py + "\" x2=\"" + fmt2(x_hi) + "\" y2=\"" + py +
         "\" stroke=\"#eee\"/><text class=\"tick\" x=\"" + fmt2(x_lo - 4) + "\" y=\"" + fmt2(plot_y(r, l, t) + 4) +
         "\" text-anchor=\"end\">" + html_escape(short_number(t)) + "</text>\n";
  }
  s += "<text class=\"xlabel\" x=\"" + fmt2((x_lo + x_hi) / 2) + "\" y=\"" + fmt2(l.height - 8.0) +
       "\" text-anchor=\"middle\">" + html_escape(plot.x_label) + "</text>\n";
  s += "<text class=\"ylabel\" transform=\"translate(14," + fmt2((y_lo + y_hi) / 2) + ") rotate(-90)\" text-anchor=\"middle\">" +
       html_escape(plot.y_label) + "</text>\n";
  for (const Series& ser : plot.series) {
    if (ser.x.empty()) continue;
    const std::string color = html_escape(ser.color);
    const std::string name = html_escape(ser.name);
    if (ser.style != Style::kDots) {
      std::string d;
      for (size_t i = 0; i < ser.x.size(); ++i)
        d += (i == 0 ? "M" : " L") + fmt2(plot_x(r, l, ser.x[i])) + "," + fmt2(plot_y(r, l, ser.y[i]));
      std::string attrs = "stroke-width=\"1.8\"";
      if (ser.style == Style::kFaintLine) attrs = "stroke-width=\"1\" stroke-opacity=\"0.35\"";
      if (ser.style == Style::kDashed) attrs = "stroke-width=\"1.5\" stroke-dasharray=\"5 3\"";
      s += "<path class=\"series\" data-series=\"" + name + "\" d=\"" + d + "\" fill=\"none\" stroke=\"" + color + "\" " +
           attrs + "/>\n";
    }
    if (ser.style == Style::kDashed || ser.style == Style::kDots || ser.x.size() == 1) {
      // A one-point line is invisible: it gets dots too (counted once: dots of a line are not points).
      const bool counted = ser.style == Style::kDots;
      for (size_t i = 0; i < ser.x.size(); ++i)
        s += std::string("<circle class=\"") + (counted ? "pt" : "mark") + "\" data-series=\"" + name + "\" cx=\"" +
             fmt2(plot_x(r, l, ser.x[i])) + "\" cy=\"" + fmt2(plot_y(r, l, ser.y[i])) + "\" r=\"" +
             (counted ? "3.5" : "2.5") + "\" fill=\"" + color + "\"/>\n";
    }
  }
  // Legend: top right inside the frame, one row per series.
  double ly = y_lo + 12;
  for (const Series& ser : plot.series) {
    if (ser.x.empty()) continue;
    const double lx = x_hi - 190;
    s += "<g class=\"legend\"><rect x=\"" + fmt2(lx) + "\" y=\"" + fmt2(ly - 8) + "\" width=\"12\" height=\"4\" fill=\"" +
         html_escape(ser.color) + "\"" + (ser.style == Style::kFaintLine ? " fill-opacity=\"0.35\"" : "") +
         "/><text x=\"" + fmt2(lx + 16) + "\" y=\"" + fmt2(ly - 3) + "\">" + html_escape(ser.name) + "</text></g>\n";
    ly += 13;
  }
  s += "</svg>\n";
  return s;
}

}  // namespace lmt::report
