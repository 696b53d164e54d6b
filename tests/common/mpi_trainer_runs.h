// What the MPI trainer suites (tests/dist: dist_test, zero3_test, ep_test) share: one scratch
// directory per run of the suite with a synthetic dataset, named the same on every rank; a Trainer
// built from a config through the real recipe loader; and the per-step losses a run wrote.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/synthetic_dataset.h"
#include "lmt/config/config.h"
#include "lmt/dist/communicator.h"
#include "lmt/kernels/cpu/cpu_backend.h"
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

// Checkpoints across layouts: every rank of `comm` trains `ranks` into `run` and stops after step
// `stop` (a checkpoint); then rank 0 alone resumes `run` with `one` (a one-process recipe) to its
// end and hands that trainer to `check`. Collective (barriers before and after rank 0's part).
inline void saved_by_ranks_resumed_in_one_process(const config::Config& ranks, const config::Config& one,
                                                  const std::filesystem::path& run, dist::Communicator* comm,
                                                  int64_t stop, const std::function<void(train::Trainer&)>& check) {
  {
    auto t = make_trainer(ranks, run, comm);
    ASSERT_TRUE(t);
    Status s = t->run(/*stop_after=*/stop);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  ASSERT_TRUE(comm->barrier().ok());
  if (comm->rank() == 0) {
    dist::SoloCommunicator solo;
    auto t = make_trainer(one, run, &solo, /*resume=*/true);
    ASSERT_TRUE(t);
    EXPECT_EQ(t->step(), stop);
    Status s = t->run();
    ASSERT_TRUE(s.ok()) << s.ToString();
    check(*t);
  }
  ASSERT_TRUE(comm->barrier().ok());
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

// The model-parallel suites' recipe (tp_test, pp_test): a 3-layer llama-style model (GQA, SwiGLU,
// RoPE, untied) small enough for 6-step exactness runs, fp32, data in `root`/data, then `overrides`
// (key=value, in order). A single process drops what needs several ranks — parallel.sp=... when
// parallel.tp = 1 after them, parallel.pp_layers=... when parallel.pp = 1 — so one list serves both
// sides of a comparison.
inline config::Config small_parallel_recipe(const std::filesystem::path& root, const std::vector<std::string>& overrides) {
  config::Config c = config::Config::defaults();
  for (const char* kv : {"model.n_layers=3", "model.d_model=32", "model.n_heads=4", "model.n_kv_heads=2",
                         "model.head_dim=8", "model.ffn_hidden=64", "model.max_seq_len=64", "model.tied_embeddings=false",
                         "train.seq_len=32", "optim.lr=3e-3", "schedule.warmup_steps=2", "eval.batches=2",
                         "checkpoint.async=false", "dist.shared_memory=false", "train.dtype=fp32"})
    EXPECT_TRUE(c.apply_override(kv).ok()) << kv;
  EXPECT_TRUE(c.apply_override("data.path=" + (root / "data").string()).ok());
  std::vector<std::string> sp, stages;
  for (const std::string& kv : overrides) {
    if (kv.rfind("parallel.sp=", 0) == 0) sp.push_back(kv);
    else if (kv.rfind("parallel.pp_layers=", 0) == 0) stages.push_back(kv);
    else EXPECT_TRUE(c.apply_override(kv).ok()) << kv;
  }
  if (c.get_int("parallel.tp") > 1) {
    for (const std::string& kv : sp) EXPECT_TRUE(c.apply_override(kv).ok()) << kv;
  }
  if (c.get_int("parallel.pp") > 1) {
    for (const std::string& kv : stages) EXPECT_TRUE(c.apply_override(kv).ok()) << kv;
  }
  return c;
}

// The main() of an MPI gtest suite (each test collective over *comm): the world communicator
// (MPI under mpirun, else solo) into *comm for the tests' run; only rank 0 prints results (failures
// still set every rank's exit code).
inline int mpi_test_main(int argc, char** argv, dist::Communicator** comm) {
  auto made = dist::make_communicator();
  if (!made.ok()) {
    std::fprintf(stderr, "%s\n", made.status().ToString().c_str());
    return 2;
  }
  std::unique_ptr<dist::Communicator> world = std::move(*made);
  *comm = world.get();
  ::testing::InitGoogleTest(&argc, argv);
  if (world->rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  return RUN_ALL_TESTS();
}

// A Trainer of `c` in `run` must be refused before anything is written: kUnimplemented naming `key`
// with a hint, and no run directory (collective).
inline void expect_refused_before_writing(const config::Config& c, const std::filesystem::path& run,
                                          dist::Communicator* comm, const std::string& key) {
  auto recipe = train::recipe_from_config(c, "test.toml");
  ASSERT_TRUE(recipe.ok()) << recipe.status().ToString();
  auto t = train::Trainer::create(*recipe, c.to_toml(), run.string(), false, comm);
  ASSERT_FALSE(t.ok()) << key;
  EXPECT_EQ(t.status().code(), StatusCode::kUnimplemented) << t.status().ToString();
  EXPECT_NE(t.status().ToString().find(key), std::string::npos) << t.status().ToString();
  EXPECT_NE(t.status().ToString().find("hint"), std::string::npos) << t.status().ToString();
  ASSERT_TRUE(comm->barrier().ok());
  EXPECT_FALSE(std::filesystem::exists(run)) << run;
}

// The whole model's f32 parameters of a trainer (collective: gathered from every part).
inline std::vector<float> full_params_of(train::Trainer& t) {
  auto p = t.full_params();
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return p.ok() ? *p : std::vector<float>();
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

// The absolute part of a parameter tolerance for layouts that reorder the GEMMs' sums (tensor
// parallelism): an element whose gradient is below Adam's eps (1e-8; it happens, e.g. a rare
// token's embedding element with a ~2e-9 gradient that nearly cancels) moves by lr·g/eps, so the
// gradient's relative rounding shows up in its update directly — up to 2.4e-5 after 6 steps at
// lr 3e-3 has been seen (tp_test, ASan build), against ~1.8e-3 for one ordinary Adam step. A missing
// or doubled sum moves whole tensors by far more (the mutations tried moved weights by ~1%).
constexpr double kAdamRoundingAbs = 5e-5;

// Whether a GEMM's rows depend on how many rows it has here: on AVX2-only CPUs oneDNN's sgemm picks
// kernels and splits its sums by the row count (kernels::cpu_gemm_rows_independent()), so data
// parallelism, which gives each rank fewer rows, reorders the GEMMs' sums too, as tensor
// parallelism does everywhere.
inline bool row_count_reorders_gemm_sums() { return !kernels::cpu_gemm_rows_independent(); }

// The absolute parameter tolerance of a data-parallel layout against one process: `strict` where
// GEMMs compute each row alone, kAdamRoundingAbs where the row count reorders their sums.
inline double data_parallel_param_abs(double strict) {
  return row_count_reorders_gemm_sums() ? kAdamRoundingAbs : strict;
}

// Every parameter of `b` within abs + rel·|a| of `a`'s (the worst one is named). With an abs of
// kAdamRoundingAbs (layouts that reorder the GEMMs' sums) and where the row count reorders them as
// well (above), one element in 10,000 (at least one) may reach 10·abs: the near-cancelling
// gradients of kAdamRoundingAbs meet GEMMs that round differently per layout (one embedding element
// of 32,064 at 1.8e-4 after 6 steps, tp_test on Zen 3). A missing or doubled sum still moves whole
// tensors, far beyond either bound.
inline void expect_params_close(const std::vector<float>& a, const std::vector<float>& b, double rel, double abs = 1e-6) {
  ASSERT_EQ(a.size(), b.size());
  const size_t spared = row_count_reorders_gemm_sums() && abs >= kAdamRoundingAbs ? a.size() / 10000 + 1 : 0;
  double worst = 0, worst_kept = 0;
  size_t at = 0, over = 0;
  std::vector<double> excess;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = std::abs(double(a[i]) - b[i]) - rel * std::abs(double(a[i]));
    if (d > worst) worst = d, at = i;
    if (d > abs) excess.push_back(d);
    over += d > abs;
  }
  std::sort(excess.begin(), excess.end());
  if (excess.size() > spared) worst_kept = excess[excess.size() - spared - 1];
  const std::string where = "parameter " + std::to_string(at) + ": " + std::to_string(a[at]) + " vs " +
                            std::to_string(b[at]) + " (" + std::to_string(over) + " of " + std::to_string(a.size()) +
                            " parameters outside the tolerance, " + std::to_string(spared) + " spared)";
  EXPECT_LE(worst_kept, abs) << where;
  EXPECT_LE(worst, spared > 0 ? 10 * abs : abs) << where;
}

}  // namespace lmt::test
