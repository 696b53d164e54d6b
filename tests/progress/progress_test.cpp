// progress.h / window.h: window averages, mode selection, when lines and redraws are written, and
// the ETA's recent window. A stepped clock makes the timing exact; output goes to a temporary file.
#include "lmt/progress/progress.h"

#include <cmath>
#include <cstdio>
#include <string>

#include <gtest/gtest.h>

namespace lmt::progress {
namespace {

std::string contents(FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string s;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) s.append(buf, n);
  return s;
}

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + what.size())) ++n;
  return n;
}

struct Temp {
  FILE* f = std::tmpfile();
  ~Temp() { std::fclose(f); }
};

TEST(Window, MeanOverTheLastValues) {
  WindowMean m(3);
  EXPECT_TRUE(std::isnan(m.mean()));
  m.add(1);
  EXPECT_EQ(m.mean(), 1);
  m.add(2);
  m.add(3);
  m.add(4);  // 1 leaves
  EXPECT_EQ(m.mean(), 3);
  EXPECT_EQ(m.size(), 3u);
  m.add(std::nan(""));
  EXPECT_TRUE(std::isnan(m.mean()));  // a NaN loss shows until it leaves the window
  m.add(6);
  m.add(8);
  m.add(10);
  EXPECT_EQ(m.mean(), 8);
}

TEST(Window, RateIsAmountOverTimeNotTheMeanOfRates) {
  WindowRate r(2);
  EXPECT_TRUE(std::isnan(r.rate()));
  r.add(100, 1);
  r.add(300, 1);
  EXPECT_EQ(r.rate(), 200);
  r.add(1000, 8);  // the 100 leaves: (300 + 1000) / (1 + 8); the mean of the rates would be 212.5
  EXPECT_DOUBLE_EQ(r.rate(), 1300.0 / 9.0);
  WindowRate z(2);
  z.add(5, 0);
  EXPECT_TRUE(std::isnan(z.rate()));
}

TEST(Mode, Selection) {
  EXPECT_EQ(resolve_mode(Mode::kAuto, true, LogLevel::INFO), Mode::kBar);
  EXPECT_EQ(resolve_mode(Mode::kAuto, false, LogLevel::INFO), Mode::kLines);
  EXPECT_EQ(resolve_mode(Mode::kAuto, true, LogLevel::DEBUG), Mode::kBar);
  EXPECT_EQ(resolve_mode(Mode::kBar, false, LogLevel::INFO), Mode::kBar);  // --progress
  EXPECT_EQ(resolve_mode(Mode::kLines, true, LogLevel::INFO), Mode::kLines);
  EXPECT_EQ(resolve_mode(Mode::kOff, true, LogLevel::INFO), Mode::kOff);
  EXPECT_EQ(resolve_mode(Mode::kAuto, true, LogLevel::WARNING), Mode::kOff);  // --quiet
  EXPECT_EQ(resolve_mode(Mode::kBar, false, LogLevel::ERROR), Mode::kOff);
}

TEST(Mode, Parse) {
  EXPECT_EQ(*parse_mode("bar", "--progress"), Mode::kBar);
  EXPECT_EQ(*parse_mode("lines", "--progress"), Mode::kLines);
  EXPECT_EQ(*parse_mode("auto", "--progress"), Mode::kAuto);
  EXPECT_EQ(*parse_mode("off", "--progress"), Mode::kOff);
  const auto bad = parse_mode("fancy", "--progress");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--progress = 'fancy'"), std::string::npos);
}

TEST(Mode, ATemporaryFileIsNotATerminal) {
  Temp t;
  Progress p({.label = "x", .out = t.f});
  EXPECT_EQ(p.mode(), Mode::kLines);
  EXPECT_EQ(terminal_width(fileno(t.f)), 80);
}

TEST(Mode, QuietLogLevelSilencesEvenAForcedBar) {
  const LogLevel before = log_level();
  set_log_level(LogLevel::WARNING);
  Temp t;
  {
    Progress p({.label = "x", .total = 3, .mode = Mode::kBar, .out = t.f});
    EXPECT_EQ(p.mode(), Mode::kOff);
    p.update(1);
    p.update(3);
  }
  set_log_level(before);
  EXPECT_EQ(contents(t.f), "");
}

// The training regression of issue #19: log_every = 50 with max_steps = 30 printed nothing at all.
TEST(Lines, FirstUpdateAndFinalStateAlwaysPrinted) {
  Temp t;
  double now = 0;
  {
    Progress p({.label = "step", .total = 30, .line_every_units = 50, .out = t.f, .clock = [&] { return now; }});
    for (int step = 1; step <= 30; ++step) {
      now += 1;
      p.update(step);
    }
    p.finish();
    EXPECT_EQ(p.lines_written(), 2);
  }
  // Step 1 after 1 s: 1 step/s, 29 to go. The end: 30 s elapsed.
  EXPECT_EQ(contents(t.f), "step 1/30 3% | ETA 29s\nstep 30/30 100% | 30s elapsed\n");
}

TEST(Lines, EveryNUnitsWithFields) {
  Temp t;
  double now = 0;
  Progress p({.label = "step", .total = 25, .line_every_units = 10, .out = t.f, .clock = [&] { return now; }});
  for (int step = 1; step <= 25; ++step) {
    now += 2;
    p.update(step, {number("loss", 10.0 / step, 2)});
  }
  p.finish();
  p.finish();  // once only
  EXPECT_EQ(contents(t.f),
            "step 1/25 4% | loss 10.00 | ETA 48s\n"
            "step 10/25 40% | loss 1.00 | ETA 30s\n"
            "step 20/25 80% | loss 0.50 | ETA 10s\n"
            "step 25/25 100% | loss 0.40 | 50s elapsed\n");
}

TEST(Lines, FinishDoesNotRepeatTheLastLine) {
  Temp t;
  double now = 0;
  {
    Progress p({.label = "step", .total = 20, .line_every_units = 10, .out = t.f, .clock = [&] { return now; }});
    for (int step = 1; step <= 20; ++step) {
      now += 1;
      p.update(step);
    }
  }  // the destructor finishes
  EXPECT_EQ(count(contents(t.f), "\n"), 3u);  // steps 1, 10, 20
}

TEST(Lines, EveryTSeconds) {
  Temp t;
  double now = 0;
  Progress p({.label = "docs", .line_every_seconds = 5, .out = t.f, .clock = [&] { return now; }});
  for (int i = 1; i <= 12; ++i) {
    now += 1;
    p.update(i * 100);
  }
  p.finish();
  // t = 1 (first), 6, 11 (5 s after the last line), and the final state at t = 12.
  EXPECT_EQ(contents(t.f), "docs 100 | 1s elapsed\ndocs 600 | 6s elapsed\ndocs 1,100 | 11s elapsed\ndocs 1,200 | 12s elapsed\n");
}

TEST(Lines, RateFieldFromTheRecentWindow) {
  Temp t;
  double now = 0;
  Progress p({.label = "prepare", .total = 40'000'000, .style = CountStyle::kBytes, .eta_window_seconds = 5,
              .out = t.f, .clock = [&] { return now; }, .rate_unit = "MB/s", .rate_scale = 1e-6});
  now = 2;
  p.update(5'000'000, {{"docs", "7"}});  // 5 MB in 2 s; 35 MB to go at 2.5 MB/s
  EXPECT_EQ(contents(t.f), "prepare 5.0/40.0 MB 12% | 2.50 MB/s | docs 7 | ETA 14s\n");
  now = 12;
  p.update(30'000'000, {{"docs", "9"}});
  now = 13;
  p.update(40'000'000, {{"docs", "10"}});
  EXPECT_NEAR(p.rate(), 35e6 / 11, 1e-3);  // the window: from the sample at t = 2 (the last <= 13 - 5)
  p.finish();  // the whole run instead: 40 MB in 13 s
  EXPECT_NE(contents(t.f).find("prepare 40.0/40.0 MB 100% | 3.08 MB/s | docs 10 | 13s elapsed\n"), std::string::npos)
      << contents(t.f);
}

TEST(Eta, FollowsTheRecentRateNotTheAverageSinceTheStart) {
  Temp t;
  double now = 0;
  Progress p({.label = "step", .total = 100, .line_every_units = 40, .eta_window_seconds = 10, .out = t.f,
              .clock = [&] { return now; }});
  for (int step = 1; step <= 40; ++step) {
    now = step <= 20 ? step : 20 + (step - 20) * 0.1;  // 1 step/s, then 10 steps/s
    p.update(step);
  }
  // At t = 22 the window starts at the sample of t = 12 (step 12): 28 steps in 10 s, 60 to go ->
  // 21.4 s. Since the start (40 steps in 22 s) it would say 33 s.
  const std::string out = contents(t.f);
  EXPECT_NE(out.find("step 40/100 40% | ETA 21s\n"), std::string::npos) << out;
  EXPECT_NEAR(p.rate(), 2.8, 1e-9);  // the same window's rate, for an items/s field
  Progress fresh({.label = "x", .total = 100, .out = t.f, .clock = [&] { return now; }});
  EXPECT_TRUE(std::isnan(fresh.rate()));
  now += 0.01;  // created at its first report: 5 units in 10 ms is no rate yet
  fresh.update(5);
  EXPECT_TRUE(std::isnan(fresh.rate()));
  now += 0.09;
  fresh.update(10);
  EXPECT_NEAR(fresh.rate(), 100.0, 1e-9);
}

TEST(Bar, RedrawsInPlaceAtMostTenTimesASecond) {
  Temp t;
  double now = 0;
  {
    Progress p({.label = "step", .total = 16, .mode = Mode::kBar, .out = t.f, .clock = [&] { return now; }, .width = 60});
    EXPECT_EQ(p.mode(), Mode::kBar);
    for (int k = 1; k <= 16; ++k) {
      now = k * 0.0625;
      p.update(k);
    }
  }
  const std::string out = contents(t.f);
  // Drawn at k = 1, then 0.125 s later (k = 3, 5, ..., 15), at completion (k = 16), and by finish().
  EXPECT_EQ(count(out, "\r"), 10u);
  EXPECT_EQ(count(out, "\x1b[K"), 10u);
  EXPECT_EQ(count(out, "\n"), 1u);
  EXPECT_EQ(out.substr(0, 6), "\rstep ");
  EXPECT_NE(out.find("ETA"), std::string::npos);
  EXPECT_EQ(out.back(), '\n');
  // 59 columns: the text takes 31, the bar the other 28.
  EXPECT_NE(out.find("\rstep [" + std::string(28, '#') + "] 16/16 100% | 1s elapsed\x1b[K\n"), std::string::npos) << out;
}

TEST(Bar, ClearErasesAndTheNextUpdateRedraws) {
  Temp t;
  double now = 1;
  Progress p({.label = "x", .total = 10, .mode = Mode::kBar, .out = t.f, .clock = [&] { return now; }, .width = 60});
  p.update(1);
  p.clear();
  p.update(2);  // within 0.1 s of the last draw, but the bar was erased
  const std::string out = contents(t.f);
  EXPECT_EQ(count(out, "\r"), 3u);
  EXPECT_NE(out.find("\r\x1b[K\rx ["), std::string::npos);
}

}  // namespace
}  // namespace lmt::progress
