#include "lmt/base/build_info.h"

#ifndef LMT_BUILD_VERSION
#define LMT_BUILD_VERSION "0.0.0"
#endif
#ifndef LMT_BUILD_GIT_COMMIT
#define LMT_BUILD_GIT_COMMIT ""
#endif

namespace lmt {

const std::string& build_version() {
  static const std::string v = LMT_BUILD_VERSION;
  return v;
}

const std::string& build_git_commit() {
  static const std::string c = LMT_BUILD_GIT_COMMIT;
  return c;
}

}  // namespace lmt
