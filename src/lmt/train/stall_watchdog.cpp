#include "lmt/train/stall_watchdog.h"

#include <unistd.h>

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

StallWatchdog::StallWatchdog(double timeout_s, OnStall on_stall, HealthCheck health)
    : timeout_(std::chrono::nanoseconds(static_cast<int64_t>(timeout_s * 1e9))),
      on_stall_(std::move(on_stall)),
      health_(std::move(health)),
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
  // Checks a few times per timeout, so a stall is caught within 1.25 timeouts (and the health at
  // least once a second).
  auto poll = std::max<std::chrono::nanoseconds>(timeout_ / 4, std::chrono::milliseconds(10));
  if (health_) poll = std::min<std::chrono::nanoseconds>(poll, std::chrono::seconds(1));
  std::unique_lock<std::mutex> lock(mu_);
  int64_t woke = last_ns_.load();  // not now: this thread may first run long after its creation
  while (!cv_.wait_for(lock, poll, [this] { return stop_; })) {
    // A wake-up a whole poll late means this thread did not run: the process was stopped (Ctrl-Z,
    // SIGSTOP, a suspended job or machine) or starved, not hung. The wait starts over from now.
    const int64_t now = now_ns();
    if (now - woke > 2 * poll.count()) last_ns_.store(now, std::memory_order_release);
    woke = now;
    if (health_) {
      const std::string wrong = health_();
      if (!wrong.empty()) {
        lock.unlock();
        on_stall_(wrong);
        return;
      }
    }
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
  // stdio may be what hangs (a log on a stalled file system holds its lock): one write(2) of a
  // formatted message, and an alarm in case even that blocks (a full pipe): SIGALRM's default
  // action ends the process.
  alarm(30);
  std::ostringstream o;
  o << "\nerror: rank " << rank << "/" << world << ": " << report << ". Ending this rank with status " << kExitStalled
    << " so that the job ends; committed checkpoints are intact\nhint: restart with the same command and --resume; if "
       "steps are legitimately this slow, raise train.stall_timeout_s (0 turns the watchdog off)\n";
  const std::string text = o.str();
  for (size_t done = 0; done < text.size();) {
    const ssize_t n = ::write(STDERR_FILENO, text.data() + done, text.size() - done);
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  std::_Exit(kExitStalled);
}

}  // namespace lmt::train
