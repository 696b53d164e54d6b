// The reports a stall watchdog (train/stall_watchdog.h) hands its handler, recorded instead of
// ending the process: Trainer::set_stall_handler(reports.handler()) or a StallWatchdog's on_stall.
#pragma once

#include <mutex>
#include <string>
#include <vector>

#include "lmt/train/stall_watchdog.h"

namespace lmt::test {

class StallReports {
 public:
  // Records each report (called on the watchdog's thread).
  train::StallWatchdog::OnStall handler() {
    return [this](const std::string& report) {
      std::lock_guard<std::mutex> lock(mu_);
      got_.push_back(report);
    };
  }
  std::vector<std::string> got() {
    std::lock_guard<std::mutex> lock(mu_);
    return got_;
  }
  size_t count() { return got().size(); }

 private:
  std::mutex mu_;
  std::vector<std::string> got_;
};

}  // namespace lmt::test
