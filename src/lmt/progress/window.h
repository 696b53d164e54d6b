// Smoothing for progress figures: what a progress line shows is an average over a window of recent
// updates (the logging window), never the last update's value alone. Header-only, no allocation
// after construction beyond the window itself.
//
//   WindowMean loss(50);  loss.add(3.41);  loss.mean()       mean of the last <= 50 values
//   WindowRate tps(50);   tps.add(tokens, seconds);  tps.rate()   sum(tokens) / sum(seconds)
//
// Contracts: capacity >= 1 (a smaller value is taken as 1). mean()/rate() are NaN while empty (and
// rate() while the window's seconds sum to <= 0), so a caller can tell "no data" from 0. A NaN or
// infinite value added is kept and makes the mean NaN/inf until it leaves the window: a diverging
// run is shown as such, not hidden.
#pragma once

#include <cstddef>
#include <deque>
#include <limits>
#include <utility>

namespace lmt::progress {

class WindowMean {
 public:
  explicit WindowMean(size_t capacity) : capacity_(capacity < 1 ? 1 : capacity) {}
  void add(double v) {
    values_.push_back(v);
    if (values_.size() > capacity_) values_.pop_front();
  }
  double mean() const {
    if (values_.empty()) return std::numeric_limits<double>::quiet_NaN();
    double s = 0;  // summed afresh: no drift from a running sum, and a NaN leaves with its value
    for (double v : values_) s += v;
    return s / static_cast<double>(values_.size());
  }
  size_t size() const { return values_.size(); }
  size_t capacity() const { return capacity_; }
  void clear() { values_.clear(); }

 private:
  size_t capacity_;
  std::deque<double> values_;
};

// A rate over the last `capacity` (amount, seconds) pairs: tokens in the window / seconds in the
// window, so a slow step weighs by its duration (the mean of per-step rates would not).
class WindowRate {
 public:
  explicit WindowRate(size_t capacity) : capacity_(capacity < 1 ? 1 : capacity) {}
  void add(double amount, double seconds) {
    samples_.emplace_back(amount, seconds);
    if (samples_.size() > capacity_) samples_.pop_front();
  }
  double rate() const {
    double a = 0, s = 0;
    for (const auto& [amount, seconds] : samples_) {
      a += amount;
      s += seconds;
    }
    if (samples_.empty() || !(s > 0)) return std::numeric_limits<double>::quiet_NaN();
    return a / s;
  }
  size_t size() const { return samples_.size(); }
  void clear() { samples_.clear(); }

 private:
  size_t capacity_;
  std::deque<std::pair<double, double>> samples_;
};

}  // namespace lmt::progress
