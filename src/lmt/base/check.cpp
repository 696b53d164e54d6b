#include "lmt/base/check.h"

#include <cstdio>
#include <cstdlib>

namespace lmt::internal {

CheckFailure::CheckFailure(const char* file, int line, const char* expr) {
  stream_ << file << ":" << line << ": check failed: " << expr << " ";
}

CheckFailure::~CheckFailure() {
  std::string msg = stream_.str();
  std::fprintf(stderr, "%s\n", msg.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace lmt::internal
