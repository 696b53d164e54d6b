// render.h: exact text for given values (hand-computed), at several widths.
#include "lmt/progress/render.h"

#include <cmath>
#include <limits>

#include <gtest/gtest.h>

namespace lmt::progress {
namespace {

View training_view() {
  View v;
  v.label = "step";
  v.done = 120;
  v.total = 300;
  v.fields = {number("loss", 3.41234, 3), rate(1234, "tok/s"), percent("MFU", 0.4812)};
  v.eta_seconds = 130;
  return v;
}

TEST(Render, SiText) {
  EXPECT_EQ(si_text(0), "0");
  EXPECT_EQ(si_text(950), "950");
  EXPECT_EQ(si_text(56.7), "56.7");
  EXPECT_EQ(si_text(1.5), "1.50");
  EXPECT_EQ(si_text(999.6), "1.00k");  // rounding carries into the next suffix
  EXPECT_EQ(si_text(9500), "9.50k");
  EXPECT_EQ(si_text(12345), "12.3k");
  EXPECT_EQ(si_text(123456), "123k");
  EXPECT_EQ(si_text(1.5e6), "1.50M");
  EXPECT_EQ(si_text(-2500), "-2.50k");
  EXPECT_EQ(si_text(std::nan("")), "nan");
}

TEST(Render, CountText) {
  EXPECT_EQ(count_text(0), "0");
  EXPECT_EQ(count_text(999), "999");
  EXPECT_EQ(count_text(1000), "1,000");
  EXPECT_EQ(count_text(1234567), "1,234,567");
  EXPECT_EQ(count_text(-1234), "-1,234");
}

TEST(Render, Fields) {
  const Field loss = number("loss", 3.41234, 4);
  EXPECT_EQ(loss.name, "loss");
  EXPECT_EQ(loss.text, "3.4123");
  EXPECT_EQ(number("loss", std::nan(""), 4).text, "nan");
  EXPECT_EQ(number("loss", std::numeric_limits<double>::infinity(), 4).text, "inf");
  EXPECT_EQ(rate(1234, "tok/s").text, "1.23k tok/s");
  EXPECT_EQ(rate(1234, "tok/s").name, "");
  EXPECT_EQ(rate(std::nan(""), "tok/s").text, "- tok/s");
  EXPECT_EQ(percent("MFU", 0.4812).text, "48.1%");
  EXPECT_EQ(percent("MFU", std::nan("")).text, "-");
}

TEST(Render, PlainLine) {
  EXPECT_EQ(render_line(training_view()), "step 120/300 40% | loss 3.412 | 1.23k tok/s | MFU 48.1% | ETA 2m10s");
  View v = training_view();
  v.eta_seconds = -1;  // no rate yet
  v.fields.clear();
  EXPECT_EQ(render_line(v), "step 120/300 40% | ETA ?");
  v.done = 300;  // finished: the elapsed time replaces the ETA
  v.elapsed_seconds = 65;
  EXPECT_EQ(render_line(v), "step 300/300 100% | 1m05s elapsed");
}

TEST(Render, UnknownTotal) {
  View v;
  v.label = "docs";
  v.done = 1234567;
  v.fields = {rate(56.7, "items/s")};
  v.elapsed_seconds = 12;
  EXPECT_EQ(render_line(v), "docs 1,234,567 | 56.7 items/s | 12s elapsed");
  EXPECT_EQ(render_bar(v, 80), "docs 1,234,567 | 56.7 items/s | 12s elapsed");  // no bar without a total
  EXPECT_EQ(render_bar(v, 30), "docs 1,234,567 | 56.7 items/s");  // cut to 29 columns
}

TEST(Render, Bytes) {
  View v;
  v.label = "prepare";
  v.done = 12345678;
  v.total = 45600000;
  v.style = CountStyle::kBytes;
  v.eta_seconds = 65;
  EXPECT_EQ(render_line(v), "prepare 12.3/45.6 MB 27% | ETA 1m05s");
}

TEST(Render, BarWideTerminalGetsThirtyCells) {
  // 40% of 30 cells = 12 filled.
  EXPECT_EQ(render_bar(training_view(), 120),
            "step [############------------------] 120/300 40% | loss 3.412 | 1.23k tok/s | MFU 48.1% | ETA 2m10s");
}

TEST(Render, BarFitsEightyColumnsByDroppingTheLastField) {
  // With all fields the text takes 70 of 79 columns, leaving 9 cells (< 10): MFU goes; the bar gets
  // 79 - 58 = 21 cells, 8 of them filled (floor(0.4 * 21)).
  const std::string s = render_bar(training_view(), 80);
  EXPECT_EQ(s, "step [########-------------] 120/300 40% | loss 3.412 | 1.23k tok/s | ETA 2m10s");
  EXPECT_EQ(s.size(), 79u);
}

TEST(Render, BarOnANarrowTerminalIsCut) {
  // Even without fields a 10-cell bar needs 41 columns: the line is cut at 39.
  EXPECT_EQ(render_bar(training_view(), 40), "step [####------] 120/300 40% | ETA 2m1");
  EXPECT_EQ(render_bar(training_view(), 5).size(), 19u);  // widths below 20 count as 20
}

TEST(Render, BarFullAndEmpty) {
  View v;
  v.label = "x";
  v.total = 10;
  v.elapsed_seconds = 3;
  v.eta_seconds = 9;
  EXPECT_EQ(render_bar(v, 200), "x [------------------------------] 0/10 0% | ETA 9s");
  v.done = 12;  // past the total: clamped
  EXPECT_EQ(render_bar(v, 200), "x [##############################] 12/10 100% | 3s elapsed");
}

}  // namespace
}  // namespace lmt::progress
