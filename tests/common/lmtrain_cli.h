// Running the lmtrain binary from a test, as a user runs it. The test target must define
// LMTRAIN_BIN (the binary's path) and depend on the lmtrain target; see tests/e2e/CMakeLists.txt.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace lmt::test {

struct CliResult {
  int code = -1;    // the exit code
  std::string out;  // stdout, plus stderr when asked for
};

// Runs `LMTRAIN_BIN args` through the shell; stderr is merged into `out` or discarded.
inline CliResult run_lmtrain(const std::string& args, bool with_stderr) {
  const std::string cmd = std::string(LMTRAIN_BIN) + " " + args + (with_stderr ? " 2>&1" : " 2>/dev/null");
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return {};
  CliResult r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

}  // namespace lmt::test
