// Pipeline parallelism (parallel.pp = 2; model/pipeline_split.h, train/pipeline_plan.h) under
// `mpirun -np 2` (PP2) and `mpirun -np 4` (TP2 × PP2, with and without sequence parallelism, and
// DP2 × PP2), registered with ctest. Each
// layout against one process with the same global batch (micro-batch × grad_accum × dp), fp32:
//   - 3 layers over 2 stages (2 + 1), 4 micro-batches in 1F1B order: per-step losses and gradient
//     norms within 1e-5 relative for 6 steps, the validation loss through the stages, and the final
//     parameters (gathered into the whole layout) within 1e-6 + 1e-5·|p| (1e-4·|p| with dp > 1 or
//     tp > 1, see below);
//   - gpt2-style tied embeddings (the first stage's embedding gradient and the last stage's LM-head
//     gradient are one tensor's), recomputation, active clipping and ZeRO-1, the same;
//   - one micro-batch per step (the schedule all bubble) still exact;
//   - checkpoints stay layout-independent: saved by PP2, resumed by one process and by DP2; saved
//     by one process, resumed by PP2;
//   - each rank holds its stage only, and what pipeline parallelism does not run with is refused
//     before anything is written;
//   - MoE layers in the stages (the aux loss, z-loss and capacity drops; moe.every = 2 across a
//     stage cut): the same losses, parameters and per-layer loads in the step records as one
//     process, and the bias update's whole-model bias in a checkpoint saved by the stages.
// Alone (world 1) the tests skip.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "common/mpi_trainer_runs.h"
#include "lmt/dist/communicator.h"
#include "lmt/model/params.h"
#include "lmt/train/trainer.h"

namespace lmt {
namespace {
namespace fs = std::filesystem;

dist::Communicator* g_comm = nullptr;
constexpr int64_t kVocab = 64;
constexpr int64_t kB = 2;      // micro-batch per data-parallel rank
constexpr int64_t kAccum = 4;  // micro-batches per step

struct Layout {
  int tp = 1, pp = 2;
};

class PpTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { root_ = test::make_shared_run_root(*g_comm, "lmt_pp", kVocab); }
  static void TearDownTestSuite() { test::remove_shared_run_root(*g_comm, root_); }

  void SetUp() override {
    if (g_comm->world() != 2 && g_comm->world() != 4)
      GTEST_SKIP() << "pipeline parallelism runs here under mpirun -np 2 or 4; world is " << g_comm->world();
  }
  static int dp(const Layout& l) { return g_comm->world() / (l.tp * l.pp); }

  // test::small_parallel_recipe with this layout; `extra` after it.
  static config::Config recipe_config(int64_t steps, int64_t micro_batch, int64_t accum, const Layout& l,
                                      const std::vector<std::string>& extra = {}) {
    std::vector<std::string> o = {"train.max_steps=" + std::to_string(steps), "train.micro_batch=" + std::to_string(micro_batch),
                                  "train.grad_accum=" + std::to_string(accum), "parallel.tp=" + std::to_string(l.tp),
                                  "parallel.pp=" + std::to_string(l.pp)};
    o.insert(o.end(), extra.begin(), extra.end());
    return test::small_parallel_recipe(root_, o);
  }

  static std::vector<float> params_of(train::Trainer& t) { return test::full_params_of(t); }
  static fs::path ref_dir(const std::string& name) { return root_ / (name + "_rank" + std::to_string(g_comm->rank())); }

  // One process with the global batch: micro-batch kB · dp, the same accumulation.
  static std::unique_ptr<train::Trainer> reference(const std::string& name, int64_t steps, int64_t accum, int dp_size,
                                                   const std::vector<std::string>& extra = {}) {
    dist::SoloCommunicator solo;
    std::vector<std::string> one;  // parallel.ep does not apply to one process
    for (const std::string& kv : extra)
      if (kv.rfind("parallel.ep=", 0) != 0) one.push_back(kv);
    auto t = test::make_trainer(recipe_config(steps, kB * dp_size, accum, {1, 1}, one), ref_dir(name), &solo);
    EXPECT_TRUE(t);
    if (t) {
      Status s = t->run();
      EXPECT_TRUE(s.ok()) << s.ToString();
    }
    return t;
  }

  static void matches_one_process(const std::string& name, const Layout& l, const std::vector<std::string>& extra,
                                  int64_t accum = kAccum) {
    const int64_t steps = 6;
    auto ref = reference("ref_" + name, steps, accum, dp(l), extra);
    ASSERT_TRUE(ref);
    const fs::path run = root_ / ("pp_" + name);
    auto t = test::make_trainer(recipe_config(steps, kB, accum, l, extra), run, g_comm);
    ASSERT_TRUE(t);
    Status s = t->run();
    ASSERT_TRUE(s.ok()) << s.ToString();
    ASSERT_TRUE(g_comm->barrier().ok());
    const fs::path r = ref_dir("ref_" + name);
    ASSERT_EQ(test::losses_of(run).size(), static_cast<size_t>(steps));
    test::expect_close_by_step(test::losses_of(r), test::losses_of(run), 1e-5, "loss");
    test::expect_close_by_step(test::records_of(r, "step", "grad_norm"), test::records_of(run, "step", "grad_norm"), 1e-4,
                               "grad_norm");
    if (dp(l) == 1)  // validation batches have train.micro_batch rows: the same data only when dp = 1
      test::expect_close_by_step(test::records_of(r, "val", "val_loss"), test::records_of(run, "val", "val_loss"), 1e-5,
                                 "val_loss");
    std::vector<float> mine = params_of(*t), theirs = params_of(*ref);
    // The key bias (gpt2) has an exactly-zero gradient whose Adam updates are rounding noise
    // (tp_test.cpp explains). With dp > 1 the data-parallel sum's own rounding sets 1e-4 (dist_test);
    // so does TP2 × PP2, where one element of 31,968 (a layer-0 v_proj weight) lands at 7.7e-5 after
    // 6 Adam steps while the losses agree to 1e-5.
    for (std::vector<float>* p : {&mine, &theirs})
      for (const model::BlockViews& b : ref->model().layout().views(p->data(), DType::kF32).blocks)
        if (b.k_b.present()) std::fill_n(b.k_b.as<float>(), b.k_b.numel(), 0.0f);
    test::expect_params_close(theirs, mine, dp(l) > 1 || l.tp > 1 ? 1e-4 : 1e-5,
                              l.tp > 1 ? test::kAdamRoundingAbs : 1e-6);
  }

  static fs::path root_;
};
fs::path PpTest::root_;

const std::vector<std::string> kGpt2 = {"model.preset=gpt2-124m", "model.n_layers=3",   "model.d_model=32",
                                        "model.n_heads=4",        "model.n_kv_heads=4", "model.head_dim=8",
                                        "model.ffn_hidden=128",   "model.max_seq_len=64"};

Layout pipeline_layout() { return g_comm->world() == 4 ? Layout{2, 2} : Layout{1, 2}; }  // TP2 × PP2 on 4

TEST_F(PpTest, MatchesOneProcess) { matches_one_process("llama", pipeline_layout(), {}); }

TEST_F(PpTest, TiedGpt2StyleMatchesOneProcess) { matches_one_process("gpt2", pipeline_layout(), kGpt2); }

TEST_F(PpTest, RecomputeClippingAndZero1MatchOneProcess) {
  matches_one_process("clip", pipeline_layout(), {"train.recompute=true", "train.grad_clip=0.05", "train.zero=1"});
}

// Stage sizes given (parallel.pp_layers = [1, 2]: the head's stage holds two blocks), still exact.
TEST_F(PpTest, GivenStageSizesMatchOneProcess) {
  matches_one_process("given", pipeline_layout(), {"parallel.pp_layers=[1, 2]"});
  auto t = test::make_trainer(recipe_config(1, kB, kAccum, pipeline_layout(), {"parallel.pp_layers=[1, 2]"}),
                              root_ / "pp_given_stage", g_comm);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->model().config().n_layers, t->model().pipeline_role().first ? 1 : 2);
  ASSERT_TRUE(g_comm->barrier().ok());
}

// One micro-batch per step: the schedule is all bubble, still exact.
TEST_F(PpTest, OneMicroBatchMatchesOneProcess) { matches_one_process("m1", pipeline_layout(), {}, 1); }

// TP2 × PP2 with sequence parallelism on 4 ranks: each stage sends its rows of the residual stream
// to the same tp rank of the next stage.
TEST_F(PpTest, TensorSequenceAndPipelineMatchOneProcess) {
  if (g_comm->world() != 4) GTEST_SKIP() << "needs 4 ranks";
  matches_one_process("tp2sp_pp2", {2, 2}, {"parallel.sp=true"});
}

// DP2 × PP2 on 4 ranks (ZeRO-1 over the dp group of each stage).
TEST_F(PpTest, DataTimesPipelineMatchesOneProcess) {
  if (g_comm->world() != 4) GTEST_SKIP() << "needs 4 ranks";
  matches_one_process("dp2pp2", {1, 2}, {"train.zero=1"});
}

TEST_F(PpTest, EachRankHoldsItsStage) {
  const Layout l = pipeline_layout();
  auto t = test::make_trainer(recipe_config(1, kB, kAccum, l), root_ / "pp_stage", g_comm);
  ASSERT_TRUE(t);
  const int stage = g_comm->rank() / (l.tp * dp(l));  // world rank = (pp · dp + dp) · tp + tp
  EXPECT_EQ(t->model().config().n_layers, stage == 0 ? 2 : 1);  // 3 layers: 2 + 1
  EXPECT_EQ(t->model().pipeline_role().first, stage == 0);
  EXPECT_EQ(t->model().pipeline_role().last, stage == 1);
  EXPECT_LT(t->model().layout().total_numel(), t->model_split().whole_layout().total_numel());
  ASSERT_TRUE(g_comm->barrier().ok());
}

// Saved by the pipeline at step 3 (whole tensors), resumed by one process: the losses onward are the
// uninterrupted single process's.
TEST_F(PpTest, CheckpointSavedByStagesResumesInOneProcess) {
  const int64_t steps = 6;
  const Layout l = pipeline_layout();
  auto ref = reference("ref_resume", steps, kAccum, dp(l));
  ASSERT_TRUE(ref);
  const fs::path run = root_ / "pp_saved_by_stages";
  test::saved_by_ranks_resumed_in_one_process(
      recipe_config(steps, kB, kAccum, l), recipe_config(steps, kB * dp(l), kAccum, {1, 1}), run, g_comm, 3,
      [&](train::Trainer& t) {
        test::expect_close_by_step(test::losses_of(ref_dir("ref_resume")), test::losses_of(run), 1e-5, "loss");
        test::expect_params_close(params_of(*ref), params_of(t), l.tp > 1 ? 1e-4 : 1e-5,
                                  l.tp > 1 ? test::kAdamRoundingAbs : 1e-6);
      });
}

// PP2 → DP2 (2 ranks): the pipeline's checkpoint resumed by two data-parallel ranks with the same
// global batch (micro-batch 1 × 2 ranks × 4 micro-batches).
TEST_F(PpTest, CheckpointSavedByStagesResumesOnDataParallelRanks) {
  if (g_comm->world() != 2) GTEST_SKIP() << "PP2 -> DP2 on 2 ranks";
  const int64_t steps = 6;
  auto ref = reference("ref_to_dp", steps, kAccum, 1);
  ASSERT_TRUE(ref);
  const fs::path run = root_ / "pp_to_dp";
  {
    auto t = test::make_trainer(recipe_config(steps, kB, kAccum, {1, 2}), run, g_comm);
    ASSERT_TRUE(t);
    ASSERT_TRUE(t->run(/*stop_after=*/3).ok());
  }
  ASSERT_TRUE(g_comm->barrier().ok());
  auto t = test::make_trainer(recipe_config(steps, kB / 2, kAccum, {1, 1}), run, g_comm, /*resume=*/true);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->step(), 3);
  Status s = t->run();
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_TRUE(g_comm->barrier().ok());
  test::expect_close_by_step(test::losses_of(ref_dir("ref_to_dp")), test::losses_of(run), 1e-5, "loss");
  const std::vector<float> mine = params_of(*t);
  test::expect_params_close(params_of(*ref), mine, 1e-4);  // dp 2: the data-parallel sum's rounding
}

// The reverse: one process saves, the stages take their layers (and Adam state) and continue.
TEST_F(PpTest, OneProcessCheckpointResumesOnStages) {
  const int64_t steps = 6;
  const Layout l = pipeline_layout();
  auto ref = reference("ref_reverse", steps, kAccum, dp(l));
  ASSERT_TRUE(ref);
  const fs::path run = root_ / "pp_saved_by_one";
  if (g_comm->rank() == 0) {
    dist::SoloCommunicator solo;
    auto t = test::make_trainer(recipe_config(steps, kB * dp(l), kAccum, {1, 1}), run, &solo);
    ASSERT_TRUE(t);
    ASSERT_TRUE(t->run(/*stop_after=*/3).ok());
  }
  ASSERT_TRUE(g_comm->barrier().ok());
  auto t = test::make_trainer(recipe_config(steps, kB, kAccum, l), run, g_comm, /*resume=*/true);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->step(), 3);
  Status s = t->run();
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_TRUE(g_comm->barrier().ok());
  test::expect_close_by_step(test::losses_of(ref_dir("ref_reverse")), test::losses_of(run), 1e-5, "loss");
  const std::vector<float> mine = params_of(*t);
  test::expect_params_close(params_of(*ref), mine, l.tp > 1 ? 1e-4 : 1e-5, l.tp > 1 ? test::kAdamRoundingAbs : 1e-6);
}

// What pipeline parallelism does not run with: an error naming the key, and no run directory.
// Mixture-of-experts layers (model/moe_block.h) in the stages: top-2 of 4 experts with a shared
// expert, the aux loss, the z-loss and capacity drops (dp = 1 in both layouts, so one process with
// the same micro-batches routes the same). A stage's blocks keep the whole model's MoE pattern
// (moe.first_layer): with moe.every = 2 and stages of 1 + 2 blocks, stage 1's block 0 is the
// whole model's MoE layer 1.
const std::vector<std::string> kMoe = {"model.moe.num_experts=4",     "model.moe.top_k=2",
                                       "model.moe.expert_ffn=24",     "model.moe.shared_experts=1",
                                       "model.moe.router_z_loss=0.001", "model.moe.capacity_factor=1.0"};

std::vector<std::string> moe_with(std::vector<std::string> more) {
  std::vector<std::string> o = kMoe;
  o.insert(o.end(), more.begin(), more.end());
  return o;
}

// The MoE part of every step record (whole-model layers, loads per expert) of a run.
std::vector<nlohmann::json> moe_records(const fs::path& run) {
  std::vector<nlohmann::json> out;
  std::ifstream in(run / "metrics.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    if (j.value("type", "") == "step" && j.contains("moe")) out.push_back(j["moe"]);
  }
  return out;
}

TEST_F(PpTest, MoeMatchesOneProcess) {
  matches_one_process("moe", pipeline_layout(), kMoe);
  // The step records list every MoE layer of the whole model, with the loads of one process.
  const std::vector<nlohmann::json> mine = moe_records(root_ / "pp_moe"), theirs = moe_records(ref_dir("ref_moe"));
  ASSERT_EQ(mine.size(), 6u);
  ASSERT_EQ(theirs.size(), 6u);
  for (size_t i = 0; i < mine.size(); ++i) {
    ASSERT_EQ(mine[i]["layers"].size(), 3u) << "step " << i + 1;
    for (size_t l = 0; l < 3; ++l) {
      EXPECT_EQ(mine[i]["layers"][l]["layer"], theirs[i]["layers"][l]["layer"]);
      EXPECT_EQ(mine[i]["layers"][l]["load"], theirs[i]["layers"][l]["load"]) << "step " << i + 1 << ", layer " << l;
      EXPECT_EQ(mine[i]["layers"][l]["dropped"], theirs[i]["layers"][l]["dropped"]);
    }
    EXPECT_NEAR(mine[i]["aux_loss"].get<double>(), theirs[i]["aux_loss"].get<double>(), 1e-6);
  }
}

TEST_F(PpTest, MoeEverySecondLayerAcrossAStageCutMatchesOneProcess) {
  matches_one_process("moe_every2", pipeline_layout(), moe_with({"model.moe.every=2", "parallel.pp_layers=[1, 2]"}));
  const std::vector<nlohmann::json> mine = moe_records(root_ / "pp_moe_every2");
  ASSERT_FALSE(mine.empty());
  ASSERT_EQ(mine[0]["layers"].size(), 1u);
  EXPECT_EQ(mine[0]["layers"][0]["layer"], 1);
}

// The bias update (DeepSeek-V3): each stage updates its layers' bias from their loads; a checkpoint
// saved by the stages holds the whole [n_layers, E] bias and one process resumes from it with the
// uninterrupted run's losses (a stage's rows lost or misplaced would change the routing).
TEST_F(PpTest, MoeBiasUpdateCheckpointSavedByStagesResumesInOneProcess) {
  const std::vector<std::string> extra = moe_with({"model.moe.balance=bias_update", "model.moe.bias_update_rate=0.05"});
  const int64_t steps = 6;
  const Layout l = pipeline_layout();
  auto ref = reference("ref_moe_resume", steps, kAccum, dp(l), extra);
  ASSERT_TRUE(ref);
  const fs::path run = root_ / "pp_moe_saved_by_stages";
  test::saved_by_ranks_resumed_in_one_process(
      recipe_config(steps, kB, kAccum, l, extra), recipe_config(steps, kB * dp(l), kAccum, {1, 1}, extra), run, g_comm, 3,
      [&](train::Trainer& t) {
        test::expect_close_by_step(test::losses_of(ref_dir("ref_moe_resume")), test::losses_of(run), 1e-5, "loss");
        // The bias every layer ends with is the uninterrupted run's (non-zero: 6 updates of ±rate).
        float sum_abs = 0;
        for (int64_t layer = 0; layer < 3; ++layer)
          for (int64_t e = 0; e < 4; ++e) {
            const float b = t.model().router_bias(layer).as<float>()[e];
            sum_abs += std::fabs(b);
            EXPECT_EQ(b, ref->model().router_bias(layer).as<float>()[e]) << "layer " << layer << ", expert " << e;
          }
        EXPECT_GT(sum_abs, 0.0f);
      });
}

// Expert parallelism inside each stage (4 ranks: DP2 × PP2 with ep = 2): each rank holds half of
// its stage's experts; every micro-batch's forward and backward, on the stage's model or a replica,
// exchange rows with the same stage of the other dp rank. Dropless with the bias update (dp = 2: see tp_test.cpp's moe_model).
TEST_F(PpTest, MoeExpertParallelTimesPipelineMatchesOneProcess) {
  if (g_comm->world() != 4) GTEST_SKIP() << "needs 4 ranks";
  const std::vector<std::string> moe = {"model.moe.num_experts=4",     "model.moe.top_k=2",
                                        "model.moe.expert_ffn=24",     "model.moe.shared_experts=1",
                                        "model.moe.router_z_loss=0.001", "model.moe.balance=bias_update",
                                        "parallel.ep=2"};
  matches_one_process("moe_ep_pp2", {1, 2}, moe);
  auto t = test::make_trainer(recipe_config(1, kB, kAccum, {1, 2}, moe), root_ / "pp_moe_ep_held", g_comm);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->model().config().moe.held_experts(), 2);  // this stage's blocks, half their experts
  EXPECT_LT(t->model().layout().total_numel(), t->model_split().whole_layout().total_numel());
  ASSERT_TRUE(g_comm->barrier().ok());
}

TEST_F(PpTest, UnsupportedCombinationsAreRefusedBeforeAnythingIsWritten) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"train.zero=3"}, "train.zero = 3"},
      {{"metrics.layer_grad_norm_every=1"}, "layer_grad_norm_every"},
  };
  int i = 0;
  for (const auto& [extra, key] : cases)
    test::expect_refused_before_writing(recipe_config(2, kB, kAccum, pipeline_layout(), extra),
                                        root_ / ("pp_refused_" + std::to_string(i++)), g_comm, key);
  // A model whose layers differ by index is refused when the recipe is read.
  config::Config c = recipe_config(2, kB, kAccum, pipeline_layout(), {"model.nope_every=2"});
  auto recipe = train::recipe_from_config(c, "test.toml");
  ASSERT_FALSE(recipe.ok());
  EXPECT_EQ(recipe.status().code(), StatusCode::kUnimplemented) << recipe.status().ToString();
  EXPECT_NE(recipe.status().ToString().find("nope_every"), std::string::npos) << recipe.status().ToString();
}

}  // namespace
}  // namespace lmt

int main(int argc, char** argv) { return lmt::test::mpi_test_main(argc, argv, &lmt::g_comm); }
