// ScopedEnv: sets (or, with a null value, unsets) an environment variable for the lifetime of the
// object, and restores what was there before. For one test and the processes it starts.
// Not thread-safe (setenv): use it on the test's main thread, before starting anything.
#pragma once

#include <stdlib.h>

#include <string>

namespace lmt::test {

class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    if (value != nullptr) ::setenv(name, value, 1);
    else ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (had_) ::setenv(name_.c_str(), old_.c_str(), 1);
    else ::unsetenv(name_.c_str());
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_, old_;
  bool had_ = false;
};

}  // namespace lmt::test
