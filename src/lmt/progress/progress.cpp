#include "lmt/progress/progress.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <cmath>
#include <limits>

#include "lmt/base/timer.h"

namespace lmt::progress {
namespace {
// A rate (and so an ETA) needs a window of at least 50 ms: a display created at its first report
// would otherwise divide by microseconds ("7.14M docs/s").
constexpr double kMinSpan = 0.05;
}  // namespace

Mode resolve_mode(Mode requested, bool is_tty, LogLevel level) {
  if (level > LogLevel::INFO) return Mode::kOff;
  if (requested == Mode::kAuto) return is_tty ? Mode::kBar : Mode::kLines;
  return requested;
}

StatusOr<Mode> parse_mode(const std::string& text, const std::string& what) {
  if (text == "auto") return Mode::kAuto;
  if (text == "bar") return Mode::kBar;
  if (text == "lines") return Mode::kLines;
  if (text == "off") return Mode::kOff;
  return InvalidArgument(what + " = '" + text + "' is not a progress mode", "use auto, bar, lines or off");
}

const char* mode_name(Mode m) {
  switch (m) {
    case Mode::kAuto: return "auto";
    case Mode::kBar: return "bar";
    case Mode::kLines: return "lines";
    case Mode::kOff: return "off";
  }
  return "?";
}

int terminal_width(int fd) {
  winsize ws{};
  if (isatty(fd) == 1 && ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
  return 80;
}

Progress::Progress(Options options) : options_(std::move(options)) {
  if (!options_.clock) options_.clock = now_seconds;
  if (options_.out == nullptr) options_.out = stderr;
  if (options_.line_every_units <= 0 && options_.line_every_seconds <= 0) options_.line_every_seconds = 10;
  mode_ = resolve_mode(options_.mode, isatty(fileno(options_.out)) == 1, log_level());
  start_time_ = options_.clock();
  done_ = options_.start;
  samples_.emplace_back(start_time_, options_.start);
}

Progress::~Progress() { finish(); }

double Progress::rate() const {
  const auto& [t0, d0] = samples_.front();
  const auto& [t1, d1] = samples_.back();
  const double dt = t1 - t0, dd = static_cast<double>(d1 - d0);
  if (!(dt >= kMinSpan) || !(dd > 0)) return std::numeric_limits<double>::quiet_NaN();
  return dd / dt;
}

double Progress::eta(double now) const {
  if (options_.total <= 0) return -1;
  const auto& [t0, d0] = samples_.front();
  const double dt = now - t0, dd = static_cast<double>(done_ - d0);
  if (!(dt >= kMinSpan) || !(dd > 0)) return -1;
  return static_cast<double>(options_.total - done_) * dt / dd;
}

View Progress::view(double now) const {
  View v;
  v.label = options_.label;
  v.done = done_;
  v.total = options_.total;
  v.style = options_.style;
  if (!options_.rate_unit.empty()) {
    // The final state shows the rate of the whole run, its summary; before, the recent window's.
    const double whole = now - start_time_ >= kMinSpan && done_ > options_.start
                             ? static_cast<double>(done_ - options_.start) / (now - start_time_)
                             : std::numeric_limits<double>::quiet_NaN();
    v.fields.push_back(progress::rate((finished_ ? whole : rate()) * options_.rate_scale, options_.rate_unit));
  }
  v.fields.insert(v.fields.end(), fields_.begin(), fields_.end());
  v.eta_seconds = eta(now);
  v.elapsed_seconds = now - start_time_;
  return v;
}

void Progress::update(int64_t done, std::vector<Field> fields) {
  if (mode_ == Mode::kOff || finished_) return;
  const double now = options_.clock();
  done_ = done;
  fields_ = std::move(fields);
  // Samples closer than 50 ms replace the newest one: the window holds at most ~600 samples however
  // often update() is called (once per document, in data clean).
  if (samples_.size() >= 2 && now - samples_[samples_.size() - 2].first < kMinSpan) samples_.back() = {now, done};
  else samples_.emplace_back(now, done);
  // Keep one sample at or before the window's start, so the rate always spans the whole window.
  while (samples_.size() > 2 && samples_[1].first <= now - options_.eta_window_seconds) samples_.pop_front();
  const bool first = !updated_;
  updated_ = true;
  if (mode_ == Mode::kBar) {
    const bool complete = options_.total > 0 && done >= options_.total;
    if (!drawn_ || complete || now - last_draw_ >= options_.redraw_seconds) draw_bar(now);
    return;
  }
  bool due = first;
  const int64_t every = options_.line_every_units;
  if (every > 0 && last_line_done_ >= 0 && done / every > last_line_done_ / every) due = true;
  if (options_.line_every_seconds > 0 && now - last_line_time_ >= options_.line_every_seconds) due = true;
  if (due) write_line(now);
}

void Progress::draw_bar(double now) {
  const int width = options_.width > 0 ? options_.width : terminal_width(fileno(options_.out));
  const std::string s = render_bar(view(now), width);
  std::fprintf(options_.out, "\r%s\x1b[K", s.c_str());
  std::fflush(options_.out);
  drawn_ = true;
  last_draw_ = now;
}

void Progress::write_line(double now) {
  const std::string s = render_line(view(now));
  std::fprintf(options_.out, "%s\n", s.c_str());
  std::fflush(options_.out);
  ++lines_;
  last_line_time_ = now;
  last_line_done_ = done_;
}

void Progress::clear() {
  if (mode_ != Mode::kBar || !drawn_) return;
  std::fputs("\r\x1b[K", options_.out);
  std::fflush(options_.out);
  drawn_ = false;
}

void Progress::finish() {
  if (finished_) return;
  finished_ = true;
  if (mode_ == Mode::kOff || !updated_) return;
  const double now = options_.clock();
  if (mode_ == Mode::kBar) {
    draw_bar(now);
    std::fputc('\n', options_.out);
    std::fflush(options_.out);
  } else if (last_line_done_ != done_) {
    write_line(now);
  }
}

}  // namespace lmt::progress
