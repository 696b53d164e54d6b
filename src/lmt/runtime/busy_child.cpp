// A busy-loop child process (busy_child.h).
#include "lmt/runtime/busy_child.h"

#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace lmt::runtime {

int last_allowed_cpu() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) != 0) return -1;
  for (int c = CPU_SETSIZE - 1; c >= 0; --c)
    if (CPU_ISSET(c, &set)) return c;
  return -1;
}

StatusOr<std::unique_ptr<BusyChild>> BusyChild::start(int cpu) {
  if (cpu >= CPU_SETSIZE) return InvalidArgument("CPU " + std::to_string(cpu) + " does not exist");
  if (cpu >= 0) {
    cpu_set_t allowed;
    CPU_ZERO(&allowed);
    if (::sched_getaffinity(0, sizeof allowed, &allowed) != 0 || !CPU_ISSET(cpu, &allowed))
      return InvalidArgument("CPU " + std::to_string(cpu) + " is not one this process may run on",
                             "choose one of the CPUs of its affinity mask (taskset -p " + std::to_string(::getpid()) + ")");
  }
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) return IoError(std::string("fork of the busy-loop process failed: ") + std::strerror(errno), "the process limit may be reached");
  if (pid == 0) {
    // Child: only async-signal-safe calls from here (the parent may have threads).
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(0);  // the parent died before the request: never run orphaned
    ::signal(SIGINT, SIG_DFL);
    ::signal(SIGTERM, SIG_DFL);
    if (cpu >= 0) {
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(cpu, &one);
      ::sched_setaffinity(0, sizeof one, &one);
    }
    ::raise(SIGSTOP);  // stopped until the first resume()
    for (;;) __asm__ __volatile__("" ::: "memory");  // spins: no memory traffic, no system call
  }
  // Wait until the child has stopped itself, so resume() can never come before its SIGSTOP.
  int status = 0;
  while (::waitpid(pid, &status, WUNTRACED) < 0 && errno == EINTR) {
  }
  if (!WIFSTOPPED(status)) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    return Internal("the busy-loop process ended before it started (status " + std::to_string(status) + ")");
  }
  return std::unique_ptr<BusyChild>(new BusyChild(pid, cpu));
}

BusyChild::~BusyChild() { stop(); }

Status BusyChild::resume() {
  if (pid_ <= 0 || ::kill(pid_, SIGCONT) != 0) return Internal("the busy-loop process is gone");
  return Status::Ok();
}

Status BusyChild::pause() {
  if (pid_ <= 0 || ::kill(pid_, SIGSTOP) != 0) return Internal("the busy-loop process is gone");
  // Stopped for sure before the caller's idle round starts.
  int status = 0;
  while (::waitpid(pid_, &status, WUNTRACED) < 0 && errno == EINTR) {
  }
  return Status::Ok();
}

void BusyChild::stop() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  while (::waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
}

}  // namespace lmt::runtime
