// Plots as inline SVG: axes with ticks, one path per series, a legend. No scripts, no external
// resources. Every plot is an <svg class="plot" data-points="N"> where N is the number of data
// points drawn (path vertices plus dots), which the report's self-check compares with the DOM.
//
// Coordinates: the plot area is [left, width-right] × [top, height-bottom] pixels; a data point
// (x, y) is drawn at px_x(x), px_y(y) (plot_x/plot_y below), linear in x and y over the data range
// of all series (a range of zero width is widened by ±0.5, or ±5% of the value), y growing upwards.
// Vertices are written with two decimals ("M64.00,256.00 L...").
#pragma once

#include <string>
#include <vector>

#include "lmt/report/series.h"

namespace lmt::report {

struct PlotLayout {
  int width = 640, height = 300;
  int left = 72, right = 16, top = 30, bottom = 46;
};

struct Range {
  double x0 = 0, x1 = 1, y0 = 0, y1 = 1;
};

struct Plot {
  std::string id;     // HTML id, [a-z0-9_-]
  std::string title;  // shown above the plot
  std::string x_label, y_label;
  std::vector<Series> series;
  int points() const;  // data points over all series
};

// The range covering every point of every series (see above for a zero-width range).
Range data_range(const Plot& plot);
double plot_x(const Range& r, const PlotLayout& l, double x);
double plot_y(const Range& r, const PlotLayout& l, double y);

// The plot as an <svg> element.
std::string render_svg(const Plot& plot, const PlotLayout& layout = {});

// Numbers for axis ticks and tables: "%.4g" below 1e4; above, 3 digits and k/M/G/T/P ("12.5k",
// "3.95M", "1M" for 999999.9).
std::string short_number(double v);

}  // namespace lmt::report
