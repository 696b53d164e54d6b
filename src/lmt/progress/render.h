// Rendering of a progress view: pure functions from values to text, unit-tested exactly
// (tests/progress/render_test.cpp). Progress (progress.h) decides when and where to write them.
//
// A bar (for a terminal, redrawn in place; at most `width` - 1 columns so it never wraps):
//   step [#########---------------------] 120/300  40% | loss 3.412 | 1.2k tok/s | ETA 2m10s
// A plain line (one per interval when stderr is not a terminal): the same without the bar:
//   step 120/300 40% | loss 3.412 | 1.2k tok/s | ETA 2m10s
// With an unknown total (total <= 0): "docs 1,234 | 56.7 items/s | 12s elapsed".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace lmt::progress {

// How done/total are written: counts ("120/300"), or bytes ("12.3/45.6 MB", in decimal MB).
enum class CountStyle { kCount, kBytes };

// One named figure: rendered "name text" ("loss 3.412"), or just "text" when name is empty
// ("1.2k tok/s"). Build them with the helpers below, which fix the formatting.
struct Field {
  std::string name;
  std::string text;
};

struct View {
  std::string label;                  // "step", "prepare", "merging", "eval hellaswag"
  int64_t done = 0;
  int64_t total = 0;                  // <= 0: unknown (no bar, no percentage, no ETA)
  CountStyle style = CountStyle::kCount;
  std::vector<Field> fields;          // in display order
  double eta_seconds = -1;            // < 0 or not finite: unknown, not shown (unless done == total)
  double elapsed_seconds = 0;         // shown instead of ETA when the total is unknown or reached
};

// "3.412" with `decimals` digits; "nan"/"inf" for non-finite values. Field{name, that}.
Field number(const std::string& name, double value, int decimals);
// "1.2k tok/s": a rate with k/M/G suffixes at 3 significant digits ("950", "9.50k", "12.3M");
// "- tok/s" when not finite (no data yet).
Field rate(double per_second, const std::string& unit);
// "MFU 48.1%" from a fraction 0.481; "MFU -" when not finite.
Field percent(const std::string& name, double fraction);

// "950", "56.7", "9.50k", "12.3M", "1.00G": 3 significant digits with a k/M/G/T/P suffix; whole
// numbers below 1000 without decimals ("0", "950"); negative: "-" prefixed.
std::string si_text(double value);
// "1,234,567": an integer with thousands separators.
std::string count_text(int64_t value);

// The plain line (no bar, no control characters, no trailing newline).
std::string render_line(const View& v);
// The bar line fitted to `width` columns (a terminal's width; below 20 is taken as 20): the bar
// takes what the text leaves, between 10 and 30 cells; when even a 10-cell bar does not fit, the
// fields are dropped from the last, and as a last resort the line is cut. Never longer than
// width - 1 characters; no control characters.
std::string render_bar(const View& v, int width);

}  // namespace lmt::progress
