// The OpenMP wait policy and the one re-exec that applies it (omp_env.h).
#include "lmt/runtime/omp_env.h"

#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "lmt/base/log.h"

extern char** environ;

namespace lmt::runtime {
namespace {

// The variables libgomp reads at load time that this module manages.
constexpr std::array<const char*, 2> kOmpVars = {"OMP_WAIT_POLICY", "GOMP_SPINCOUNT"};

EnvMap wanted_for(WaitPolicy p) {
  switch (p) {
    case WaitPolicy::kAuto: return {{"GOMP_SPINCOUNT", kAutoSpinCount}};
    case WaitPolicy::kSpin: return {};
    case WaitPolicy::kPassive: return {{"OMP_WAIT_POLICY", "passive"}};
  }
  return {};
}

// A variable that is present and not empty (libgomp ignores an empty value).
const std::string* present(const EnvMap& env, const std::string& name) {
  auto it = env.find(name);
  return it == env.end() || it->second.empty() ? nullptr : &it->second;
}

// The OpenMP variables of `env` that lmtrain set itself: those LMT_OMP_ENV lists, with the value
// its policy sets. Anything else (another value, no marker) is the user's.
std::vector<std::string> owned_vars(const EnvMap& env) {
  std::vector<std::string> owned;
  const std::string* marker = present(env, kMarkerVar);
  if (marker == nullptr) return owned;
  const size_t colon = marker->find(':');
  if (colon == std::string::npos) return owned;
  auto policy = parse_wait_policy(marker->substr(0, colon), kMarkerVar);
  if (!policy.ok()) return owned;
  const EnvMap wanted = wanted_for(*policy);
  const std::string names = "," + marker->substr(colon + 1) + ",";
  for (const char* v : kOmpVars) {
    const std::string* cur = present(env, v);
    auto w = wanted.find(v);
    if (cur != nullptr && w != wanted.end() && *cur == w->second && names.find(std::string(",") + v + ",") != std::string::npos)
      owned.push_back(v);
  }
  return owned;
}

bool contains(const std::vector<std::string>& v, const std::string& s) {
  for (const auto& x : v)
    if (x == s) return true;
  return false;
}

std::vector<std::string> g_args;  // set_program_args()

}  // namespace

const char* wait_policy_name(WaitPolicy p) {
  switch (p) {
    case WaitPolicy::kAuto: return "auto";
    case WaitPolicy::kSpin: return "spin";
    case WaitPolicy::kPassive: return "passive";
  }
  return "?";
}

StatusOr<WaitPolicy> parse_wait_policy(const std::string& text, const std::string& what) {
  if (text == "auto") return WaitPolicy::kAuto;
  if (text == "spin") return WaitPolicy::kSpin;
  if (text == "passive") return WaitPolicy::kPassive;
  return InvalidArgument(what + " = \"" + text + "\" is not a wait policy",
                         "use \"auto\" (a short spin, then sleep: the default), \"spin\" (the OpenMP runtime's default) "
                         "or \"passive\" (sleep at once); docs/PERFORMANCE.md, \"OpenMP under contention\"");
}

EnvMap current_environment() {
  EnvMap env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (eq != nullptr) env.emplace(std::string(*e, static_cast<size_t>(eq - *e)), std::string(eq + 1));
  }
  return env;
}

OmpEnvPlan plan_omp_env(WaitPolicy policy, const EnvMap& env) {
  OmpEnvPlan plan;
  plan.policy = policy;
  const std::vector<std::string> owned = owned_vars(env);
  EnvMap target;
  for (const char* v : kOmpVars)
    if (const std::string* cur = present(env, v); cur != nullptr && !contains(owned, v)) target[v] = *cur;
  if (!target.empty()) {
    plan.user_set = true;  // the user's variables stay as they are; lmtrain's own go
  } else {
    target = wanted_for(policy);
    plan.marker = std::string(wait_policy_name(policy)) + ":";
    bool first = true;
    for (const auto& [name, value] : target) plan.marker += (first ? "" : ",") + name, first = false;
  }
  for (const char* v : kOmpVars) {
    const std::string* cur = present(env, v);
    auto t = target.find(v);
    if (t != target.end() && (cur == nullptr || *cur != t->second)) plan.set[v] = t->second;
    if (t == target.end() && cur != nullptr) plan.unset.push_back(v);
  }
  plan.reexec = !plan.set.empty() || !plan.unset.empty();
  return plan;
}

StatusOr<WaitPolicy> wait_policy_from_env() {
  const char* v = std::getenv("LMT_WAIT_POLICY");
  if (v == nullptr || *v == '\0') return WaitPolicy::kAuto;
  auto p = parse_wait_policy(v, "LMT_WAIT_POLICY");
  if (!p.ok()) return UsageError(p.status().message(), "set LMT_WAIT_POLICY to auto, spin or passive, or unset it (default auto)");
  return p;
}

void set_program_args(int argc, char** argv) { g_args.assign(argv, argv + argc); }

void apply_wait_policy(WaitPolicy policy) {
  const EnvMap env = current_environment();
  const OmpEnvPlan plan = plan_omp_env(policy, env);
  if (!plan.reexec) return;
  const std::string* count_text = present(env, kReexecCountVar);
  const int count = count_text == nullptr ? 0 : std::atoi(count_text->c_str());
  std::string change;
  for (const auto& [name, value] : plan.set) change += " " + name + "=" + value;
  for (const auto& name : plan.unset) change += " -" + name;
  if (count >= kMaxReexec || g_args.empty()) {
    LMT_LOG(WARNING) << "OpenMP wait policy " << wait_policy_name(policy) << " not applied (" << change.substr(1)
                     << "): " << (g_args.empty() ? "no program arguments recorded" : "restarted too often")
                     << "; continuing with the OpenMP runtime's settings";
    return;
  }
  LMT_LOG(DEBUG) << "OpenMP wait policy " << wait_policy_name(policy) << ": restarting once with" << change
                 << " (the OpenMP runtime reads its environment only when it is loaded)";
  for (const auto& [name, value] : plan.set) ::setenv(name.c_str(), value.c_str(), 1);
  for (const auto& name : plan.unset) ::unsetenv(name.c_str());
  if (plan.marker.empty()) ::unsetenv(kMarkerVar);
  else ::setenv(kMarkerVar, plan.marker.c_str(), 1);
  ::setenv(kReexecCountVar, std::to_string(count + 1).c_str(), 1);
  std::fflush(stdout);
  std::fflush(stderr);
  std::vector<char*> argv;
  for (auto& a : g_args) argv.push_back(a.data());
  argv.push_back(nullptr);
  ::execv("/proc/self/exe", argv.data());
  const int err = errno;
  // Still here: put the environment back (children see what this process runs under).
  for (const char* v : kOmpVars) {
    if (const std::string* cur = present(env, v)) ::setenv(v, cur->c_str(), 1);
    else ::unsetenv(v);
  }
  for (const char* v : {kMarkerVar, kReexecCountVar}) {
    if (auto it = env.find(v); it != env.end()) ::setenv(v, it->second.c_str(), 1);
    else ::unsetenv(v);
  }
  LMT_LOG(WARNING) << "OpenMP wait policy " << wait_policy_name(policy) << " not applied: exec /proc/self/exe failed: "
                   << std::strerror(err) << "; continuing with the OpenMP runtime's settings";
}

void apply_startup_wait_policy(WaitPolicy policy) {
  const char* marker = std::getenv(kMarkerVar);
  if (marker != nullptr && *marker != '\0') return;
  apply_wait_policy(policy);
}

OmpEnvInfo omp_env_info() {
  const EnvMap env = current_environment();
  OmpEnvInfo info;
  const std::vector<std::string> owned = owned_vars(env);
  bool user = false;
  for (const char* v : kOmpVars)
    if (present(env, v) != nullptr && !contains(owned, v)) user = true;
  // The marker's policy, when every variable it needs is lmtrain's own and present; no variables at
  // all is the OpenMP runtime's default (spin).
  info.policy = user ? "user" : owned.empty() ? "spin" : "";
  if (info.policy.empty()) {
    const std::string& m = env.at(kMarkerVar);  // owned_vars() found it
    auto p = parse_wait_policy(m.substr(0, m.find(':')), kMarkerVar);
    info.policy = p.ok() && wanted_for(*p).size() == owned.size() ? wait_policy_name(*p) : "user";
  }
  if (const std::string* v = present(env, "OMP_WAIT_POLICY")) info.omp_wait_policy = *v;
  if (const std::string* v = present(env, "GOMP_SPINCOUNT")) info.gomp_spincount = *v;
  return info;
}

}  // namespace lmt::runtime
