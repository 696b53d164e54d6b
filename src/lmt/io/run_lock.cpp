#include "lmt/io/run_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>

#include "lmt/io/files.h"

namespace lmt::io {

StatusOr<RunLock> RunLock::acquire(const std::string& run_dir) {
  const std::string path = run_dir + "/lmtrain.lock";
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0)
    return IoError("cannot open " + path + ": " + errno_text(), "check that the run directory is writable");
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char holder[256] = {};
    const ssize_t n = ::pread(fd, holder, sizeof holder - 1, 0);
    ::close(fd);
    std::string who = n > 0 ? std::string(holder, static_cast<size_t>(n)) : "another process";
    while (!who.empty() && (who.back() == '\n' || who.back() == '\r')) who.pop_back();
    if (err != EWOULDBLOCK) return IoError("cannot lock " + path + ": " + errno_text(err));
    return FailedPrecondition("run directory " + run_dir + " is in use by " + who + " (" + path + " is locked)",
                              "wait for that run to end or stop it; two runs must not share a run directory");
  }
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  const std::string who = "pid " + std::to_string(::getpid()) + " on host " + host + "\n";
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, who.data(), who.size(), 0) != static_cast<ssize_t>(who.size())) {
    ::close(fd);
    return IoError("cannot write " + path + ": " + errno_text(), "is the disk full?");
  }
  return RunLock(fd);
}

RunLock::~RunLock() {
  if (fd_ >= 0) ::close(fd_);  // closing the last descriptor releases the flock
}

}  // namespace lmt::io
