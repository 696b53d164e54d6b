// StallWatchdog: ends a run that has stopped making progress.
//
// A rank that waits in a collective for a peer that is stuck (alive but hung: a GPU fault, a
// deadlock, a stalled file system, a stopped process) waits forever: neither MPI nor NCCL has a
// timeout, and the launcher only acts on processes that exit. The trainer beats the watchdog at
// every micro-batch, validation batch and checkpoint; when no beat has come for `timeout_s`
// seconds, a thread of its own calls `on_stall` with a report naming the last beat. The trainer's
// handler (end_stalled_process) prints it and ends the process with exit status 4, so mpirun or srun
// ends the job and the scheduler can restart it with --resume from the newest committed checkpoint
// (an incomplete one is removed then). Every rank runs its own watchdog, so a job ends even where
// the launcher lets the other ranks run on. A health check (the gradients' communicator's
// background error: NCCL's ncclCommGetAsyncError) is polled too, and a failure is reported at once.
//
// beat() is cheap (relaxed atomic stores) and may be called from any thread; `phase` must be a
// string with static storage (a literal). on_stall runs on the watchdog's thread, at most once.
// A stopped and continued process (Ctrl-Z then fg, a suspended job) is not hung: the watchdog's
// thread, waking a whole poll late, takes it as a pause and starts the wait over.
// The time a phase may take is the timeout: a checkpoint's write on rank 0, and the other ranks'
// wait for it, must each fit in it.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace lmt::train {

// The exit status of a run ended for lack of progress (docs/RELIABILITY.md).
inline constexpr int kExitStalled = 4;

class StallWatchdog {
 public:
  using OnStall = std::function<void(const std::string& report)>;
  // "" while healthy, else what is wrong: a communicator's background error (NCCL's), which makes
  // every later collective wait forever. Polled on the watchdog's thread (at least once a second).
  using HealthCheck = std::function<std::string()>;
  // Watches from now on (the construction is the first beat). timeout_s > 0. A failed health check
  // is reported at once, as a stall is.
  StallWatchdog(double timeout_s, OnStall on_stall, HealthCheck health = {});
  ~StallWatchdog();  // stops watching
  StallWatchdog(const StallWatchdog&) = delete;
  StallWatchdog& operator=(const StallWatchdog&) = delete;

  // Progress: `phase` (e.g. "micro-batch", index 2) of step `step` has begun; reported as "since
  // micro-batch 2 began (step 7)", or for phase "step" as "since step 7 began".
  void beat(const char* phase, int64_t step, int64_t index = -1);

 private:
  void watch();
  std::string report(double idle_s) const;

  const std::chrono::nanoseconds timeout_;
  const OnStall on_stall_;
  const HealthCheck health_;
  std::atomic<int64_t> last_ns_;  // steady_clock, ns since its epoch
  std::atomic<const char*> phase_{"start"};
  std::atomic<int64_t> step_{0}, index_{-1};
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

// The trainer's on_stall: writes "rank R/W: <report>" and a hint to stderr (one write(2), not stdio,
// whose lock a hung thread may hold; an alarm ends the process if even that blocks), then ends the
// process at once (std::_Exit, status kExitStalled: no destructors, which could wait on the hung peer).
[[noreturn]] void end_stalled_process(int rank, int world, const std::string& report);

}  // namespace lmt::train
