// The busy-loop process of `lmtrain bench train --contend` (runtime/busy_child.h): it runs only
// when resumed, and it is gone after every exit path of its owner: a normal return, an error
// return, and the owner's death by SIGKILL.
#include "lmt/runtime/busy_child.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "common/child_process.h"

namespace lmt::runtime {
namespace {



// CPU seconds the process has used (utime + stime from /proc/PID/stat).
double cpu_seconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(in, line);
  std::string rest = line.substr(line.rfind(')') + 2);
  std::istringstream fields(rest);
  std::string f;
  long long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && fields >> f; ++i) {
    if (i == 14) utime = std::stoll(f);
    if (i == 15) stime = std::stoll(f);
  }
  return static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

TEST(BusyChild, StartsStoppedSpinsWhenResumedAndIsReapedByItsDestructor) {
  pid_t pid = -1;
  {
    auto child = BusyChild::start(last_allowed_cpu());
    ASSERT_TRUE(child.ok()) << child.status().ToString();
    pid = (*child)->pid();
    EXPECT_EQ(test::process_state(pid), 'T');  // stopped until resumed
    ASSERT_TRUE((*child)->resume().ok());
    const double before = cpu_seconds(pid);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    EXPECT_GT(cpu_seconds(pid), before);  // it burns CPU (no timing threshold: just more than none)
    ASSERT_TRUE((*child)->pause().ok());
    EXPECT_EQ(test::process_state(pid), 'T');
  }
  // Reaped by us: no zombie left, and no longer our child.
  EXPECT_EQ(test::process_state(pid), 0);
  EXPECT_EQ(waitpid(pid, nullptr, WNOHANG), -1);
}

Status fails_while_busy(pid_t* pid) {
  LMT_ASSIGN_OR_RETURN(std::unique_ptr<BusyChild> child, BusyChild::start(-1));
  *pid = child->pid();
  LMT_RETURN_IF_ERROR(child->resume());
  return InvalidArgument("a step failed");  // the error path: the child must go with the scope
}

TEST(BusyChild, AnErrorReturnReapsIt) {
  pid_t pid = -1;
  EXPECT_FALSE(fails_while_busy(&pid).ok());
  ASSERT_GT(pid, 0);
  EXPECT_EQ(test::process_state(pid), 0);
}

TEST(BusyChild, ItDiesWhenItsOwnerIsKilled) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t owner = fork();
  ASSERT_GE(owner, 0);
  if (owner == 0) {  // the owner: start a running busy child, report its pid, wait to be killed
    close(fds[0]);
    auto child = BusyChild::start(-1);
    pid_t p = child.ok() && (*child)->resume().ok() ? (*child)->pid() : -1;
    if (write(fds[1], &p, sizeof p) != sizeof p) _exit(2);
    for (;;) pause();
  }
  close(fds[1]);
  pid_t busy = -1;
  ASSERT_EQ(read(fds[0], &busy, sizeof busy), static_cast<ssize_t>(sizeof busy));
  close(fds[0]);
  ASSERT_GT(busy, 0);
  EXPECT_NE(test::process_state(busy), 0);
  kill(owner, SIGKILL);  // no destructor runs: the kernel's parent-death signal must end it
  waitpid(owner, nullptr, 0);
  EXPECT_TRUE(test::ends_within(busy, 5.0)) << "busy-loop process " << busy << " outlived its owner";
}

TEST(BusyChild, RefusesACpuThisProcessMayNotUse) {
  auto r = BusyChild::start(CPU_SETSIZE - 1 > last_allowed_cpu() ? CPU_SETSIZE - 1 : CPU_SETSIZE);
  EXPECT_FALSE(r.ok());
}

}  // namespace
}  // namespace lmt::runtime
