// What the MPI trainer suites (tests/dist: dist_test, zero3_test, ep_test) share: one scratch
// directory per run of the suite with a synthetic dataset, named the same on every rank; a Trainer
// built from a config through the real recipe loader; and the per-step losses a run wrote.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/synthetic_dataset.h"
#include "lmt/config/config.h"
#include "lmt/dist/communicator.h"
#include "lmt/train/recipe.h"
#include "lmt/train/trainer.h"

namespace lmt::test {

// Collective: TMP/<prefix>_<rank 0's pid>, emptied and given a Markov dataset in data/ by rank 0;
// every rank returns the same path after a barrier. Call from SetUpTestSuite.
inline std::filesystem::path make_shared_run_root(dist::Communicator& comm, const std::string& prefix, int64_t vocab) {
  int64_t pid = ::getpid();  // rank 0's, so every rank names the same directory
  EXPECT_TRUE(comm.broadcast(&pid, sizeof(pid), 0).ok());
  const std::filesystem::path root = std::filesystem::temp_directory_path() / (prefix + "_" + std::to_string(pid));
  if (comm.rank() == 0) {
    std::filesystem::remove_all(root);
    std::filesystem::create_directories(root);
    write_markov_dataset((root / "data").string(), vocab, prefix);
  }
  EXPECT_TRUE(comm.barrier().ok());
  return root;
}

// Collective: removes what make_shared_run_root made. Call from TearDownTestSuite.
inline void remove_shared_run_root(dist::Communicator& comm, const std::filesystem::path& root) {
  (void)comm.barrier();
  if (comm.rank() == 0) std::filesystem::remove_all(root);
}

// A Trainer of `c` (through recipe_from_config, as `lmtrain train` builds one) in `run` over `comm`;
// nullptr, with the failure recorded, on error.
inline std::unique_ptr<train::Trainer> make_trainer(const config::Config& c, const std::filesystem::path& run,
                                                    dist::Communicator* comm, bool resume = false) {
  auto recipe = train::recipe_from_config(c, "test.toml");
  EXPECT_TRUE(recipe.ok()) << recipe.status().ToString();
  if (!recipe.ok()) return nullptr;
  auto t = train::Trainer::create(*recipe, c.to_toml(), run.string(), resume, comm);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? std::move(*t) : nullptr;
}

// step -> loss of every record of RUN/metrics.jsonl that has one.
inline std::map<int64_t, double> losses_of(const std::filesystem::path& run) {
  std::map<int64_t, double> out;
  std::ifstream in(run / "metrics.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    if (j.contains("loss")) out[j["step"].get<int64_t>()] = j["loss"].get<double>();
  }
  return out;
}

// step -> `key` of every record of RUN/metrics.jsonl of type `type` that has it (e.g. "step" /
// "grad_norm", "val" / "val_loss").
inline std::map<int64_t, double> records_of(const std::filesystem::path& run, const std::string& type,
                                            const std::string& key) {
  std::map<int64_t, double> out;
  std::ifstream in(run / "metrics.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    if (j.value("type", "") == type && j.contains(key)) out[j["step"].get<int64_t>()] = j[key].get<double>();
  }
  return out;
}

// The same steps in both, each value of `b` finite and within rel·|a| of `a`'s.
inline void expect_close_by_step(const std::map<int64_t, double>& a, const std::map<int64_t, double>& b, double rel,
                                 const std::string& what) {
  ASSERT_FALSE(a.empty()) << what;
  ASSERT_EQ(a.size(), b.size()) << what;
  for (const auto& [step, v] : a) {
    ASSERT_TRUE(b.count(step)) << what << " step " << step;
    EXPECT_TRUE(std::isfinite(b.at(step))) << what << " step " << step;
    EXPECT_NEAR(v, b.at(step), rel * std::abs(v)) << what << " step " << step;
  }
}

// Every parameter of `b` within abs + rel·|a| of `a`'s (the worst one is named).
inline void expect_params_close(const std::vector<float>& a, const std::vector<float>& b, double rel, double abs = 1e-6) {
  ASSERT_EQ(a.size(), b.size());
  double worst = 0;
  size_t at = 0, over = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = std::abs(double(a[i]) - b[i]) - rel * std::abs(double(a[i]));
    if (d > worst) worst = d, at = i;
    over += d > abs;
  }
  EXPECT_LE(worst, abs) << "parameter " << at << ": " << a[at] << " vs " << b[at] << " (" << over << " of " << a.size()
                         << " parameters outside the tolerance)";
}

}  // namespace lmt::test
