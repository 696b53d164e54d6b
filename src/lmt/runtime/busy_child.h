// A busy-loop process beside a benchmark: `lmtrain bench train --contend` (issue #21, goal 3)
// measures a step while another process keeps one core busy, the situation of a shared machine.
//
// BusyChild forks a child that spins forever (no memory traffic, no system calls), pinned to one
// CPU when asked. It starts stopped (SIGSTOP); resume() and pause() (SIGCONT/SIGSTOP) switch it
// on for the contended rounds and off for the idle ones, so both run in one process, alternating.
// No orphan busy loops, on any exit path:
//   - the destructor (and stop()) kills it with SIGKILL and reaps it: normal returns, errors
//     returned as Status, exceptions;
//   - the child asks the kernel for SIGKILL when its parent dies (prctl PR_SET_PDEATHSIG), and
//     checks the parent is still there after asking: a parent killed by any signal, SIGKILL
//     included, takes the child with it.
// Create and destroy it on the main thread (PR_SET_PDEATHSIG follows the thread that forked).
#pragma once

#include <sys/types.h>

#include <memory>

#include "lmt/base/status.h"

namespace lmt::runtime {

class BusyChild {
 public:
  // Forks the child, stopped; `cpu` >= 0 pins it to that CPU (an error when this process may not
  // run there), -1 leaves it unpinned.
  static StatusOr<std::unique_ptr<BusyChild>> start(int cpu);
  ~BusyChild();
  BusyChild(const BusyChild&) = delete;
  BusyChild& operator=(const BusyChild&) = delete;

  Status resume();  // SIGCONT: the child spins
  Status pause();   // SIGSTOP: the child waits, using no CPU
  // SIGKILL and reap; idempotent (the destructor calls it).
  void stop();

  pid_t pid() const { return pid_; }
  int cpu() const { return cpu_; }

 private:
  BusyChild(pid_t pid, int cpu) : pid_(pid), cpu_(cpu) {}
  pid_t pid_ = -1;
  int cpu_ = -1;
};

// The highest-numbered CPU this process may run on (its affinity mask), -1 when unknown: where
// the busy loop goes, away from CPU 0, which the OpenMP master thread tends to use.
int last_allowed_cpu();

}  // namespace lmt::runtime
