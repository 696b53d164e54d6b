// One progress display for every long command (train, data prepare, data clean, tokenizer train,
// eval): a live bar redrawn in place when stderr is a terminal, plain periodic lines when it is not,
// nothing when the log level is above INFO (--quiet, LMT_LOG_LEVEL=warning).
//
//   progress::Progress p({.label = "step", .total = max_steps, .line_every_units = log_every});
//   for (...) p.update(step, {progress::number("loss", mean_loss, 4), progress::rate(tps, "tok/s")});
//   p.finish();
//
// Contracts:
// - Output goes to Options::out (stderr by default), never stdout: a command's stdout stays its
//   summary / --json output. Before writing anything else to the terminal mid-run, call clear().
// - Bar mode: "\r" + render_bar(...) + "\x1b[K" at most once per redraw_seconds (and always for the
//   first update and when done reaches total), fitted to the terminal's width (TIOCGWINSZ, else 80);
//   finish() redraws the final state and ends the line with "\n".
// - Lines mode: one render_line() + "\n" for the first update, then whenever done crosses a multiple
//   of line_every_units or line_every_seconds have passed since the last line (either may be 0 =
//   unused; both 0 = a line every 10 s); finish() writes the final state unless that line was the
//   last one written. No control characters.
// - ETA: the remaining units over the rate of the updates within the last eta_window_seconds (a
//   recent window, not the average since the start), so it follows a run that speeds up or slows;
//   unknown ("ETA ?") while that window spans under 50 ms.
// - The figures in `fields` are the caller's; smooth them with WindowMean/WindowRate (window.h).
// - Not thread-safe: call from one thread (progress callbacks of lmt libraries are).
#pragma once

#include <cstdint>
#include <cstdio>
#include <deque>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "lmt/base/log.h"
#include "lmt/base/status.h"
#include "lmt/progress/render.h"
#include "lmt/progress/window.h"

namespace lmt::progress {

// kAuto: kBar when the output is a terminal, else kLines. kBar forces the bar (a command's
// --progress flag), kLines forces lines, kOff shows nothing.
enum class Mode { kAuto, kBar, kLines, kOff };

// The mode in effect: kOff when `level` is above INFO, whatever was asked; kAuto resolved by `is_tty`.
Mode resolve_mode(Mode requested, bool is_tty, LogLevel level);
// "auto" | "bar" | "lines" | "off"; anything else is kInvalidArgument naming `what` (a flag or key).
StatusOr<Mode> parse_mode(const std::string& text, const std::string& what);
const char* mode_name(Mode m);
// Columns of the terminal on `fd` (TIOCGWINSZ); 80 when it is not a terminal or reports 0.
int terminal_width(int fd);

struct Options {
  std::string label;
  int64_t total = 0;        // <= 0: unknown
  int64_t start = 0;        // done at construction (a resumed run's first step), for the ETA's rate
  CountStyle style = CountStyle::kCount;
  Mode mode = Mode::kAuto;
  int64_t line_every_units = 0;
  double line_every_seconds = 0;
  double redraw_seconds = 0.1;     // bar: at most 10 redraws a second
  double eta_window_seconds = 30;
  FILE* out = stderr;
  std::function<double()> clock = {};  // seconds on a monotonic clock; default lmt::now_seconds
  int width = 0;                   // bar width in columns; 0: the terminal's, read at each draw
  // When set, a rate field (rate() x rate_scale, e.g. 1e-6 with "MB/s" for bytes) is shown before
  // the caller's fields: "1.2k items/s"; finish()'s line shows the whole run's rate instead.
  std::string rate_unit = {};
  double rate_scale = 1;
};

class Progress {
 public:
  explicit Progress(Options options);
  ~Progress();  // finish()es if the caller did not
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // Reports `done` units (monotonic; a smaller value is taken as is) with the figures to show.
  void update(int64_t done, std::vector<Field> fields = {});
  // Erases a drawn bar so other output can be written; the next update draws it again. No-op in
  // lines mode.
  void clear();
  // The final state: bar redrawn and its line ended; lines: the last line if not yet written.
  // Further calls do nothing.
  void finish();
  void set_total(int64_t total) { options_.total = total; }

  // Units per second over the ETA's recent window (for an items/s or MB/s field); NaN while the
  // window spans less than 50 ms or no unit (the ETA is then unknown too).
  double rate() const;
  Mode mode() const { return mode_; }  // resolved: kBar, kLines or kOff
  int64_t lines_written() const { return lines_; }

 private:
  View view(double now) const;
  double eta(double now) const;
  void draw_bar(double now);
  void write_line(double now);

  Options options_;
  Mode mode_;
  double start_time_ = 0;
  std::deque<std::pair<double, int64_t>> samples_;  // (time, done) within the ETA window
  int64_t done_ = 0;
  std::vector<Field> fields_;
  bool updated_ = false, drawn_ = false, finished_ = false;
  double last_draw_ = 0, last_line_time_ = 0;
  int64_t last_line_done_ = -1;
  int64_t lines_ = 0;
};

}  // namespace lmt::progress
