// The OpenMP wait policy of the process: how threads that wait at the end of a parallel region
// (for a peer, or for the next region) behave, and how lmtrain chooses it (issue #21, goal 3).
//
// Why a re-exec: libgomp (the OpenMP runtime that lmtrain and oneDNN share) reads OMP_WAIT_POLICY
// and GOMP_SPINCOUNT once, in a constructor that runs when the library is loaded, before main().
// A setenv() in main() is too late and there is no API to change the spin count later. So
// apply_wait_policy() re-executes the same binary (/proc/self/exe, same argv, same pid, same open
// files) with the chosen variables in its environment, once, before the command does anything.
//
// The policies (docs/PERFORMANCE.md, "OpenMP under contention"):
//   auto     GOMP_SPINCOUNT=kAutoSpinCount: a waiting thread spins about 0.1-0.2 ms, then sleeps
//            in the kernel. The gaps between the parallel regions of a step are microseconds, so on
//            an idle machine threads never sleep (no speed lost); when another process takes a
//            core, a thread waiting for a descheduled peer gives its core up after ~0.1 ms instead
//            of the runtime's default ~3 ms or more, and the scheduler can run the peer there.
//   spin     the OpenMP runtime's own default (libgomp: 300,000 spins, a few ms, then sleep):
//            lmtrain's behaviour before this policy existed.
//   passive  OMP_WAIT_POLICY=passive: a waiting thread sleeps at once (a futex wake per region).
// Precedence: the user's own OMP_WAIT_POLICY or GOMP_SPINCOUNT (either one) always win, and
// lmtrain then changes neither; else an explicit choice of the command (`--wait-policy`, the recipe
// key runtime.wait_policy); else LMT_WAIT_POLICY; else auto.
//
// Bookkeeping: the restarted process carries LMT_OMP_ENV = "<policy>:<names lmtrain set>" (e.g.
// "auto:GOMP_SPINCOUNT"), so a later choice (a recipe read after start-up) can tell lmtrain's own
// variables from the user's and replace them, and LMT_OMP_REEXEC = the number of restarts, which
// stops a loop (more than kMaxReexec restarts are refused with a warning; the process continues).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "lmt/base/status.h"

namespace lmt::runtime {

enum class WaitPolicy { kAuto, kSpin, kPassive };

inline constexpr const char* kAutoSpinCount = "10000";
inline constexpr const char* kMarkerVar = "LMT_OMP_ENV";
inline constexpr const char* kReexecCountVar = "LMT_OMP_REEXEC";
inline constexpr int kMaxReexec = 3;

// "auto", "spin", "passive" (the names the flag, the recipe and LMT_WAIT_POLICY take).
const char* wait_policy_name(WaitPolicy p);
// Parses a policy name; `what` names the flag, key or variable in the error (InvalidArgument).
StatusOr<WaitPolicy> parse_wait_policy(const std::string& text, const std::string& what);

// Environment variables by name (only the present ones).
using EnvMap = std::map<std::string, std::string>;
EnvMap current_environment();

// What the OpenMP environment of a process must be for `policy`, given its environment `env`.
struct OmpEnvPlan {
  WaitPolicy policy = WaitPolicy::kAuto;
  bool user_set = false;            // the user's OMP_WAIT_POLICY / GOMP_SPINCOUNT rule: policy not applied
  EnvMap set;                       // variables to set (name -> value)
  std::vector<std::string> unset;   // variables to remove (lmtrain's own, from an earlier policy)
  std::string marker;               // the new value of LMT_OMP_ENV ("" = remove it)
  bool reexec = false;              // the OpenMP variables in `env` differ from the planned ones
};
// Pure: the plan for `policy` from `env` (tests pin it). No restart is planned when `env` already
// has the planned OpenMP variables, so applying a plan's result plans nothing more (no loop).
OmpEnvPlan plan_omp_env(WaitPolicy policy, const EnvMap& env);

// The policy of LMT_WAIT_POLICY, or auto when it is unset or empty; an unknown name is a usage
// error naming the variable.
StatusOr<WaitPolicy> wait_policy_from_env();

// main() records its arguments once, before anything else, for apply_wait_policy().
void set_program_args(int argc, char** argv);

// Puts the process under `policy`: when plan_omp_env() asks for a restart, re-executes this program
// with the planned environment and does not return. Returns when no restart is needed, when the
// restart limit is reached, or when exec fails (both logged as warnings: the process continues
// under the environment it has). Call it before the command writes or reads anything (output
// buffered so far would be lost) and before starting threads or MPI.
void apply_wait_policy(WaitPolicy policy);

// main()'s call with the start-up policy (LMT_WAIT_POLICY, else auto): the same, except in a
// process that lmtrain restarted itself (LMT_OMP_ENV present), where the policy chosen before the
// restart (e.g. by --wait-policy) stays: otherwise the start-up default and the command's choice
// would undo each other on every restart.
void apply_startup_wait_policy(WaitPolicy policy);

// The wait policy in effect, for benchmark records: {"policy": "auto"|"spin"|"passive"|"user",
// "OMP_WAIT_POLICY": value or "", "GOMP_SPINCOUNT": value or ""} as "key=value" pairs.
struct OmpEnvInfo {
  std::string policy, omp_wait_policy, gomp_spincount;
};
OmpEnvInfo omp_env_info();

}  // namespace lmt::runtime
