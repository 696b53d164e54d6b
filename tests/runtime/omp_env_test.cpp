// The wait-policy plan (runtime/omp_env.h): which OpenMP variables lmtrain sets for each policy,
// that the user's own always win, and that a planned environment plans no further restart (no
// re-exec loop). The restart itself is tested through the binary (tests/e2e/contend_cli_test.cpp).
#include "lmt/runtime/omp_env.h"

#include <gtest/gtest.h>

namespace lmt::runtime {
namespace {

// The environment after applying `p` to `env`, as apply_wait_policy() hands it to the new process.
EnvMap applied(const EnvMap& env, const OmpEnvPlan& p) {
  EnvMap out = env;
  for (const auto& [k, v] : p.set) out[k] = v;
  for (const auto& k : p.unset) out.erase(k);
  if (p.marker.empty()) out.erase(kMarkerVar);
  else out[kMarkerVar] = p.marker;
  return out;
}

TEST(OmpEnv, PolicyNamesRoundTripAndUnknownNamesAreRefusedNamingTheSource) {
  for (WaitPolicy p : {WaitPolicy::kAuto, WaitPolicy::kSpin, WaitPolicy::kPassive})
    EXPECT_EQ(*parse_wait_policy(wait_policy_name(p), "x"), p);
  auto bad = parse_wait_policy("active", "runtime.wait_policy");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("runtime.wait_policy = \"active\""), std::string::npos);
  EXPECT_FALSE(parse_wait_policy("", "x").ok());
  EXPECT_FALSE(parse_wait_policy("Auto", "x").ok());
}

TEST(OmpEnv, AutoSetsABoundedSpinCountOnACleanEnvironment) {
  const OmpEnvPlan p = plan_omp_env(WaitPolicy::kAuto, {{"PATH", "/bin"}});
  EXPECT_TRUE(p.reexec);
  EXPECT_FALSE(p.user_set);
  EXPECT_EQ(p.set, (EnvMap{{"GOMP_SPINCOUNT", kAutoSpinCount}}));
  EXPECT_TRUE(p.unset.empty());
  EXPECT_EQ(p.marker, "auto:GOMP_SPINCOUNT");
}

TEST(OmpEnv, PassiveSetsOmpWaitPolicyAndSpinSetsNothing) {
  const OmpEnvPlan passive = plan_omp_env(WaitPolicy::kPassive, {});
  EXPECT_TRUE(passive.reexec);
  EXPECT_EQ(passive.set, (EnvMap{{"OMP_WAIT_POLICY", "passive"}}));
  EXPECT_EQ(passive.marker, "passive:OMP_WAIT_POLICY");
  const OmpEnvPlan spin = plan_omp_env(WaitPolicy::kSpin, {});
  EXPECT_FALSE(spin.reexec);  // the runtime's default needs no variable, hence no restart
  EXPECT_TRUE(spin.set.empty());
  EXPECT_TRUE(spin.unset.empty());
}

TEST(OmpEnv, TheUsersVariablesAlwaysWinAndNothingIsRestarted) {
  for (WaitPolicy p : {WaitPolicy::kAuto, WaitPolicy::kSpin, WaitPolicy::kPassive}) {
    for (const EnvMap& env : {EnvMap{{"OMP_WAIT_POLICY", "active"}}, EnvMap{{"GOMP_SPINCOUNT", "1234"}},
                              EnvMap{{"OMP_WAIT_POLICY", "passive"}},  // same value as passive's, but the user's
                              EnvMap{{"GOMP_SPINCOUNT", kAutoSpinCount}}}) {
      const OmpEnvPlan plan = plan_omp_env(p, env);
      EXPECT_TRUE(plan.user_set) << wait_policy_name(p);
      EXPECT_FALSE(plan.reexec) << wait_policy_name(p);
      EXPECT_TRUE(plan.set.empty());
      EXPECT_TRUE(plan.unset.empty());
    }
  }
}

TEST(OmpEnv, AnEmptyVariableIsNotAUserChoice) {
  const OmpEnvPlan p = plan_omp_env(WaitPolicy::kAuto, {{"OMP_WAIT_POLICY", ""}, {"GOMP_SPINCOUNT", ""}});
  EXPECT_FALSE(p.user_set);
  EXPECT_EQ(p.set, (EnvMap{{"GOMP_SPINCOUNT", kAutoSpinCount}}));
}

TEST(OmpEnv, APlannedEnvironmentPlansNoFurtherRestart) {
  for (WaitPolicy first : {WaitPolicy::kAuto, WaitPolicy::kSpin, WaitPolicy::kPassive})
    for (WaitPolicy second : {WaitPolicy::kAuto, WaitPolicy::kSpin, WaitPolicy::kPassive}) {
      const EnvMap start = {{"HOME", "/root"}};
      const EnvMap one = applied(start, plan_omp_env(first, start));
      EXPECT_FALSE(plan_omp_env(first, one).reexec) << wait_policy_name(first);
      // A second choice (a recipe read after start-up) replaces lmtrain's own variables ...
      const OmpEnvPlan change = plan_omp_env(second, one);
      const EnvMap two = applied(one, change);
      EXPECT_FALSE(change.user_set);
      EXPECT_FALSE(plan_omp_env(second, two).reexec) << wait_policy_name(first) << " -> " << wait_policy_name(second);
      // ... and ends with exactly the variables `second` needs on a clean start.
      EnvMap expect = applied(start, plan_omp_env(second, start));
      expect.erase(kMarkerVar);
      EnvMap got = two;
      got.erase(kMarkerVar);
      EXPECT_EQ(got, expect) << wait_policy_name(first) << " -> " << wait_policy_name(second);
    }
}

TEST(OmpEnv, AutoAfterPassiveRemovesLmtrainsOwnOmpWaitPolicy) {
  const EnvMap env = {{"OMP_WAIT_POLICY", "passive"}, {kMarkerVar, "passive:OMP_WAIT_POLICY"}};
  const OmpEnvPlan p = plan_omp_env(WaitPolicy::kAuto, env);
  EXPECT_TRUE(p.reexec);
  EXPECT_EQ(p.unset, std::vector<std::string>{"OMP_WAIT_POLICY"});
  EXPECT_EQ(p.set, (EnvMap{{"GOMP_SPINCOUNT", kAutoSpinCount}}));
}

TEST(OmpEnv, AMarkerDoesNotClaimAVariableWhoseValueTheUserChanged) {
  // LMT_OMP_ENV says lmtrain set GOMP_SPINCOUNT, but it holds another value: the user's.
  const EnvMap env = {{"GOMP_SPINCOUNT", "999"}, {kMarkerVar, "auto:GOMP_SPINCOUNT"}};
  const OmpEnvPlan p = plan_omp_env(WaitPolicy::kPassive, env);
  EXPECT_TRUE(p.user_set);
  EXPECT_FALSE(p.reexec);
  // A user's variable beside one of lmtrain's: the user's stays, lmtrain's goes.
  const EnvMap mixed = {{"GOMP_SPINCOUNT", kAutoSpinCount}, {"OMP_WAIT_POLICY", "active"}, {kMarkerVar, "auto:GOMP_SPINCOUNT"}};
  const OmpEnvPlan q = plan_omp_env(WaitPolicy::kAuto, mixed);
  EXPECT_TRUE(q.user_set);
  EXPECT_TRUE(q.reexec);
  EXPECT_EQ(q.unset, std::vector<std::string>{"GOMP_SPINCOUNT"});
  EXPECT_TRUE(q.set.empty());
}

}  // namespace
}  // namespace lmt::runtime
