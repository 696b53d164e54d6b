#include "lmt/train/stall_watchdog.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <utility>

namespace lmt::train {
namespace {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

StallWatchdog::StallWatchdog(double timeout_s, OnStall on_stall)
    : timeout_(std::chrono::nanoseconds(static_cast<int64_t>(timeout_s * 1e9))),
      on_stall_(std::move(on_stall)),
      last_ns_(now_ns()) {
  thread_ = std::thread([this] { watch(); });
}

StallWatchdog::~StallWatchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void StallWatchdog::beat(const char* phase, int64_t step, int64_t index) {
  phase_.store(phase, std::memory_order_relaxed);
  step_.store(step, std::memory_order_relaxed);
  index_.store(index, std::memory_order_relaxed);
  last_ns_.store(now_ns(), std::memory_order_release);
}

void StallWatchdog::watch() {
  // Checks a few times per timeout, so a stall is caught within 1.25 timeouts.
  const auto poll = std::max<std::chrono::nanoseconds>(timeout_ / 4, std::chrono::milliseconds(10));
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, poll, [this] { return stop_; })) {
    const int64_t idle = now_ns() - last_ns_.load(std::memory_order_acquire);
    if (idle < timeout_.count()) continue;
    lock.unlock();
    on_stall_(report(static_cast<double>(idle) * 1e-9));
    return;  // once
  }
}

std::string StallWatchdog::report(double idle_s) const {
  std::ostringstream o;
  o.precision(3);
  const std::string phase = phase_.load(std::memory_order_relaxed);
  const int64_t step = step_.load(std::memory_order_relaxed), index = index_.load(std::memory_order_relaxed);
  o << "no progress for " << idle_s << " s (train.stall_timeout_s = " << static_cast<double>(timeout_.count()) * 1e-9
    << ") since ";
  if (phase == "step") {
    o << "step " << step << " began";
  } else {
    o << phase;
    if (index >= 0) o << " " << index;
    o << " began (step " << step << ")";
  }
  o << ": this rank or a peer is hung (a collective waiting for a stuck peer, a GPU fault, a stalled file system)";
  return o.str();
}

void end_stalled_process(int rank, int world, const std::string& report) {
  std::fflush(stdout);
  std::fprintf(stderr,
               "\nerror: rank %d/%d: %s. Ending this rank with status %d so that the job ends; committed checkpoints "
               "are intact\nhint: restart with the same command and --resume; if steps are legitimately this slow, "
               "raise train.stall_timeout_s (0 turns the watchdog off)\n",
               rank, world, report.c_str(), kExitStalled);
  std::fflush(stderr);
  std::_Exit(kExitStalled);
}

}  // namespace lmt::train
