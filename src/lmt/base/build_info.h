// What this binary is: the project version and the git commit it was configured from. Both are
// fixed when CMake configures the build (src/lmt/base/CMakeLists.txt); the commit is "" when the
// source tree is not a git checkout or git is absent. metrics.jsonl's header record carries them.
#pragma once

#include <string>

namespace lmt {

const std::string& build_version();  // "0.1.0" (CMake's PROJECT_VERSION)
const std::string& build_git_commit();  // 40 hex digits (HEAD when configured), or ""

}  // namespace lmt
