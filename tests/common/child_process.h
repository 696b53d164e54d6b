// Child processes for fault tests: start a shell command in its own process group (so a test can
// signal or kill everything it started), and wait for it with a deadline.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <string>
#include <thread>

namespace lmt::test {

// Runs `sh -c "exec CMD"` in a new process group; returns its pid (the group's id).
inline pid_t spawn_shell(const std::string& cmd) {
  const pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    execl("/bin/sh", "sh", "-c", ("exec " + cmd).c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  return pid;
}

// Waits for `pid` to exit; returns its exit code (128 + signal when killed), or -1 after `seconds`
// (then kills its process group).
inline int wait_exit(pid_t pid, double seconds) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (std::chrono::steady_clock::now() < end) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  kill(-pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  return -1;
}

// True while child `pid` runs. It stays waitable (WNOWAIT): wait_exit() still gets its status.
inline bool running(pid_t pid) {
  siginfo_t info{};
  if (waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) != 0) return false;
  return info.si_pid == 0;
}

// The state letter of /proc/PID/stat ('R', 'S', 'T' stopped, 'Z' zombie), or 0 when it is gone.
inline char process_state(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return 0;
  const size_t close = line.rfind(')');  // the command name may hold spaces and parentheses
  return close == std::string::npos || close + 2 >= line.size() ? 0 : line[close + 2];
}

// True once `pid` no longer runs (gone, or a zombie for its parent to reap) within `seconds`.
inline bool ends_within(pid_t pid, double seconds) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  do {
    const char s = process_state(pid);
    if (s == 0 || s == 'Z' || s == 'X') return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  } while (std::chrono::steady_clock::now() < end);
  return false;
}

}  // namespace lmt::test
