// RunLock: one process at a time per run directory (RUN/lmtrain.lock, flock(2)).
//
// acquire() takes an exclusive, non-blocking lock on RUN/lmtrain.lock and writes "pid P on host H"
// into it; the lock is released when the RunLock is destroyed or the process dies (the kernel drops
// flock locks of a dead process, so a kill -9 never leaves a stale lock). A second `lmtrain train`
// on the same directory fails at once with an error naming the holder. The file itself stays.
#pragma once

#include <string>

#include "lmt/base/status.h"

namespace lmt::io {

class RunLock {
 public:
  // Errors: kFailedPrecondition (held by another process: the message names its pid and host),
  // kIoError (the directory is missing or not writable).
  static StatusOr<RunLock> acquire(const std::string& run_dir);
  RunLock(RunLock&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  RunLock& operator=(RunLock&&) = delete;
  RunLock(const RunLock&) = delete;
  ~RunLock();

 private:
  explicit RunLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

}  // namespace lmt::io
