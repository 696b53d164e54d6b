// Tensor parallelism (parallel.tp = 2; model/tensor_parallel.h, train/tensor_parallel_plan.h) under
// `mpirun -np 2` (TP2) and `mpirun -np 4` (DP2 × TP2), both registered with ctest. Every test runs
// tp = 2 and dp = world / 2 against one process with the global batch (micro-batch kB · dp), fp32:
//   - llama-style (GQA, SwiGLU, RoPE, untied; also with per-head QK-norm) and gpt2-style (learned
//     positions, LayerNorm, GELU MLP, biases everywhere, tied) models: per-step losses and gradient norms within 1e-5 relative for 6
//     steps, final parameters (gathered into the full layout) within 5e-5 + 1e-5·|p| (1e-4·|p| with
//     dp > 1: the data-parallel sum's own rounding, as in dist_test; 5e-5 absolute: what Adam makes
//     of rounding in elements whose gradient is below its eps, test::kAdamRoundingAbs);
//   - gradient accumulation, recomputation, active clipping and ZeRO-1 over the dp group, the same
//     (parameters within 1e-4·|p|, see the test);
//   - sequence parallelism (parallel.sp): llama-style with QK-norm, gpt2-style (learned positions),
//     and with accumulation, recomputation and clipping, the same; half the residual rows per rank;
//   - bf16 within bf16 tolerance;
//   - checkpoints stay layout-independent: saved by the TP ranks, resumed by one process, and the
//     reverse, with the uninterrupted single process's losses onward;
//   - each rank holds its part only (half the heads and FFN units), and what tensor parallelism does
//     not run with is refused before anything is written;
//   - MoE layers (half of every expert per rank, the router replicated): alone, with SP and a dense
//     layer, with expert parallelism (4 ranks: ep 2 × tp 2), their parts, and a checkpoint with the
//     router bias resumed by one process.
// Alone (world 1) the tests skip: tensor parallelism needs two ranks.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "common/mpi_trainer_runs.h"
#include "lmt/dist/communicator.h"
#include "lmt/model/tensor_parallel.h"
#include "lmt/train/trainer.h"

namespace lmt {
namespace {
namespace fs = std::filesystem;

dist::Communicator* g_comm = nullptr;
constexpr int64_t kVocab = 64;
constexpr int64_t kB = 2;  // micro-batch per data-parallel rank
constexpr int kTp = 2;

class TpTest : public ::testing::Test {
 public:
  static void SetUpTestSuite() { root_ = test::make_shared_run_root(*g_comm, "lmt_tp", kVocab); }
  static void TearDownTestSuite() { test::remove_shared_run_root(*g_comm, root_); }

  void SetUp() override {
    if (g_comm->world() < kTp || g_comm->world() % kTp != 0)
      GTEST_SKIP() << "tensor parallelism needs an even number of ranks (run under mpirun -np 2 or 4); world is "
                   << g_comm->world();
  }
  static int64_t dp() { return g_comm->world() / kTp; }

  // llama-style by default (test::small_parallel_recipe); `extra` after it (e.g. a preset's shape).
  static config::Config recipe_config(int64_t steps, int64_t micro_batch, int tp,
                                      const std::vector<std::string>& extra = {}) {
    std::vector<std::string> o = {"train.max_steps=" + std::to_string(steps),
                                  "train.micro_batch=" + std::to_string(micro_batch), "parallel.tp=" + std::to_string(tp)};
    o.insert(o.end(), extra.begin(), extra.end());
    return test::small_parallel_recipe(root_, o);
  }

  static std::vector<float> params_of(train::Trainer& t) { return test::full_params_of(t); }

  static fs::path ref_dir(const std::string& name) { return root_ / (name + "_rank" + std::to_string(g_comm->rank())); }

  // One process, tp = 1, with the global batch (micro-batch kB · dp), private to this rank
  // (parallel.ep in `extra` does not apply to it; parallel.sp needs tp > 1: see small_parallel_recipe).
  static std::unique_ptr<train::Trainer> reference(const std::string& name, int64_t steps,
                                                   const std::vector<std::string>& extra = {}) {
    dist::SoloCommunicator solo;
    std::vector<std::string> one;
    for (const std::string& kv : extra)
      if (kv.rfind("parallel.ep=", 0) != 0) one.push_back(kv);
    auto t = test::make_trainer(recipe_config(steps, kB * dp(), 1, one), ref_dir(name), &solo);
    EXPECT_TRUE(t);
    if (t) {
      Status s = t->run();
      EXPECT_TRUE(s.ok()) << s.ToString();
    }
    return t;
  }

  // tp = 2 over every rank against the single process: losses, gradient norms and parameters.
  // rel: losses; gradient norms get 10·rel; parameters param_abs + param_rel·|p| (dp > 1: 1e-4
  // relative, see below; the absolute part: test::kAdamRoundingAbs).
  static void matches_one_process(const std::string& name, const std::vector<std::string>& extra, double rel = 1e-5,
                                  double param_rel = 1e-5, double param_abs = test::kAdamRoundingAbs) {
    const int64_t steps = 6;
    auto ref = reference("ref_" + name, steps, extra);
    ASSERT_TRUE(ref);
    const fs::path run = root_ / ("tp_" + name);
    auto t = test::make_trainer(recipe_config(steps, kB, kTp, extra), run, g_comm);
    ASSERT_TRUE(t);
    Status s = t->run();
    ASSERT_TRUE(s.ok()) << s.ToString();
    ASSERT_TRUE(g_comm->barrier().ok());
    ASSERT_EQ(test::losses_of(run).size(), static_cast<size_t>(steps));
    test::expect_close_by_step(test::losses_of(ref_dir("ref_" + name)), test::losses_of(run), rel, "loss");
    test::expect_close_by_step(test::records_of(ref_dir("ref_" + name), "step", "grad_norm"),
                               test::records_of(run, "step", "grad_norm"), 10 * rel, "grad_norm");
    std::vector<float> mine = params_of(*t), theirs = params_of(*ref);
    // The key bias's gradient is zero in exact arithmetic (softmax ignores a shift shared by every
    // key of a query), so Adam's updates of it are rounding noise magnified by 1/(|g| + eps), which
    // differs between any two summation orders: it is left out of the comparison.
    const model::ParamLayout& layout = ref->model().layout();  // the full model's
    for (std::vector<float>* p : {&mine, &theirs})
      for (const model::BlockViews& b : layout.views(p->data(), DType::kF32).blocks)
        if (b.k_b.present()) std::fill_n(b.k_b.as<float>(), b.k_b.numel(), 0.0f);
    // With dp > 1 the data-parallel sum's order already moves a few rarely-used LM-head rows by up
    // to ~1.3e-4 relative after 6 Adam steps (seen with tp = 1 and dp = 2 alone, at the same
    // parameter): the tolerance dist_test and zero3_test use for DP then applies.
    test::expect_params_close(theirs, mine, dp() > 1 ? 1e-4 : param_rel, param_abs);
  }

  static const fs::path& root() { return root_; }

 protected:
  static fs::path root_;
};
fs::path TpTest::root_;

const std::vector<std::string> kGpt2 = {"model.preset=gpt2-124m", "model.n_layers=2",   "model.d_model=32",
                                        "model.n_heads=4",        "model.n_kv_heads=4", "model.head_dim=8",
                                        "model.ffn_hidden=128",   "model.max_seq_len=64"};

TEST_F(TpTest, LlamaStyleMatchesOneProcess) { matches_one_process("llama", {}); }

TEST_F(TpTest, Gpt2StyleWithBiasesMatchesOneProcess) { matches_one_process("gpt2", kGpt2); }

// Qwen3-style QK-norm: one [head_dim] weight shared by the heads the ranks split, so its gradient
// is summed over the group after backward (ModelSplit::reduce_partial_grads; without that sum the
// QK-norm weights move ~1% away). With QK-norm one element of 32,064 (embedding row 27, column 0)
// gets a gradient of ~2e-9 from step 3 on, below Adam's eps: 2.5e-6 apart after 6 steps in the
// release build, 2.4e-5 under ASan (test::kAdamRoundingAbs), while losses agree to 1e-5.
TEST_F(TpTest, QkNormMatchesOneProcess) { matches_one_process("qknorm", {"model.qk_norm=true"}); }

// Sequence parallelism: the residual stream and the norms on this rank's rows, all-gathers and
// reduce-scatters in place of the sums; the norms' (and learned positions') gradients summed after.
TEST_F(TpTest, SequenceParallelMatchesOneProcess) {
  matches_one_process("sp", {"parallel.sp=true", "model.qk_norm=true"});
}
TEST_F(TpTest, SequenceParallelGpt2StyleMatchesOneProcess) {
  std::vector<std::string> extra = kGpt2;
  extra.push_back("parallel.sp=true");
  matches_one_process("sp_gpt2", extra);
}
TEST_F(TpTest, SequenceParallelWithAccumulationRecomputeAndClippingMatchesOneProcess) {
  matches_one_process("sp_accum", {"parallel.sp=true", "train.grad_accum=2", "train.recompute=true", "train.grad_clip=0.05"},
                      1e-5, 1e-4);
}

// Each rank's residual stream holds half the rows of a micro-batch under sequence parallelism.
TEST_F(TpTest, SequenceParallelRanksHoldHalfTheResidualRows) {
  auto t = test::make_trainer(recipe_config(1, kB, kTp, {"parallel.sp=true"}), root_ / "tp_sp_rows", g_comm);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->model().stage_input().dim(0), kB * 32 / kTp);  // train.seq_len = 32
  ASSERT_TRUE(g_comm->barrier().ok());
}

// Two micro-batches, blocks recomputed in backward (their sums run again), a clip that binds (the
// global norm counts the replicated tensors once), and ZeRO-1 over the dp group where dp > 1.
// Parameters within 1e-4: one element of 31,968 (an embedding row of a rare token) lands at 5e-5
// after 6 steps, Adam magnifying the rounding of its small gradient (the vocabulary-parallel
// softmax sums in another order); the losses and gradient norms agree to 1e-5 / 1e-4.
TEST_F(TpTest, AccumulationRecomputeClippingAndZero1MatchOneProcess) {
  matches_one_process("accum", {"train.grad_accum=2", "train.recompute=true", "train.grad_clip=0.05", "train.zero=1"},
                      1e-5, 1e-4);
}

// bf16 GEMM operands: the partial sums round differently from one process's; within bf16 tolerance.
TEST_F(TpTest, Bf16CloseToOneProcess) {
  const int64_t steps = 5;
  auto ref = reference("ref_bf16", steps, {"train.dtype=bf16"});
  ASSERT_TRUE(ref);
  const fs::path run = root_ / "tp_bf16";
  auto t = test::make_trainer(recipe_config(steps, kB, kTp, {"train.dtype=bf16"}), run, g_comm);
  ASSERT_TRUE(t);
  Status s = t->run();
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_TRUE(g_comm->barrier().ok());
  test::expect_close_by_step(test::losses_of(ref_dir("ref_bf16")), test::losses_of(run), 1e-3, "loss");
}

// Each rank holds half the heads, KV heads, FFN units and vocabulary rows; replicated tensors are whole.
TEST_F(TpTest, EachRankHoldsItsPart) {
  auto t = test::make_trainer(recipe_config(1, kB, kTp), root_ / "tp_part", g_comm);
  ASSERT_TRUE(t);
  ASSERT_NE(t->model_split().tensor(), nullptr);
  const model::ModelConfig& c = t->model().config();
  EXPECT_EQ(c.n_heads, 2);
  EXPECT_EQ(c.n_kv_heads, 1);
  EXPECT_EQ(c.ffn_hidden, 32);
  EXPECT_EQ(c.d_model, 32);
  EXPECT_EQ(c.padded_vocab(), kVocab / 2);  // vocabulary-parallel embedding and LM head
  const model::ParamLayout& full = t->model_split().whole_layout();
  EXPECT_LT(t->model().layout().total_numel(), full.total_numel());
  // The parts put together are the single process's initialisation.
  const std::vector<float> mine = params_of(*t);
  std::vector<float> init(static_cast<size_t>(full.total_numel()));
  auto recipe = train::recipe_from_config(recipe_config(1, kB, kTp), "test.toml");
  ASSERT_TRUE(recipe.ok());
  model::init_params(full, init.data(), recipe->seed);
  EXPECT_EQ(mine, init);
  ASSERT_TRUE(g_comm->barrier().ok());
}

// Saved by the TP ranks at step 3 (full tensors), resumed by one process: the losses onward are the
// uninterrupted single process's.
void saved_by_tp_ranks_resumes_in_one_process(const std::string& name, const std::vector<std::string>& extra) {
  const int64_t steps = 6;
  auto ref = TpTest::reference("ref_resume_" + name, steps, extra);
  ASSERT_TRUE(ref);
  const fs::path run = TpTest::root() / ("tp_saved_by_ranks_" + name);
  test::saved_by_ranks_resumed_in_one_process(
      TpTest::recipe_config(steps, kB, kTp, extra), TpTest::recipe_config(steps, kB * TpTest::dp(), 1, extra), run, g_comm,
      3, [&](train::Trainer& t) {
        test::expect_close_by_step(test::losses_of(TpTest::ref_dir("ref_resume_" + name)), test::losses_of(run), 1e-5,
                                   "loss");
        test::expect_params_close(TpTest::params_of(*ref), TpTest::params_of(t), 1e-5, test::kAdamRoundingAbs);
      });
}

TEST_F(TpTest, CheckpointSavedByTpRanksResumesInOneProcess) { saved_by_tp_ranks_resumes_in_one_process("dense", {}); }

// The reverse: one process saves, the TP ranks take their parts of parameters and Adam state.
TEST_F(TpTest, OneProcessCheckpointResumesOnTpRanks) {
  const int64_t steps = 6;
  auto ref = reference("ref_reverse", steps);
  ASSERT_TRUE(ref);
  const fs::path run = root_ / "tp_saved_by_one";
  if (g_comm->rank() == 0) {
    dist::SoloCommunicator solo;
    auto t = test::make_trainer(recipe_config(steps, kB * dp(), 1), run, &solo);
    ASSERT_TRUE(t);
    ASSERT_TRUE(t->run(/*stop_after=*/3).ok());
  }
  ASSERT_TRUE(g_comm->barrier().ok());
  auto t = test::make_trainer(recipe_config(steps, kB, kTp), run, g_comm, /*resume=*/true);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->step(), 3);
  Status s = t->run();
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_TRUE(g_comm->barrier().ok());
  test::expect_close_by_step(test::losses_of(ref_dir("ref_reverse")), test::losses_of(run), 1e-5, "loss");
  const std::vector<float> mine = params_of(*t);
  test::expect_params_close(params_of(*ref), mine, 1e-5, test::kAdamRoundingAbs);
}

// Mixture-of-experts layers (model/moe_block.h): each of 4 routed experts (top 2) and the shared
// expert split over the group like the dense FFN, the router replicated, the routing computed
// redundantly. With dp = 1 (2 ranks): the aux loss, the z-loss and a capacity that drops slots.
// With dp > 1 (4 ranks) the reference is one process with the global batch, where capacity and the
// aux loss (per forward, over that forward's tokens) differ from data parallelism's: dropless, the
// bias update (its loads summed over the dp ranks) and the z-loss (a mean over tokens) instead.
std::vector<std::string> moe_model(const std::vector<std::string>& more = {}) {
  std::vector<std::string> o = {"model.moe.num_experts=4", "model.moe.top_k=2", "model.moe.expert_ffn=24",
                                "model.moe.shared_experts=1", "model.moe.router_z_loss=0.001"};
  if (TpTest::dp() == 1) {
    o.insert(o.end(), {"model.moe.aux_loss_coef=0.01", "model.moe.capacity_factor=1.0"});
  } else {
    o.push_back("model.moe.balance=bias_update");
  }
  o.insert(o.end(), more.begin(), more.end());
  return o;
}

TEST_F(TpTest, MoeMatchesOneProcess) { matches_one_process("moe", moe_model()); }

// Sequence parallelism, a dense layer between the MoE layers (moe.every = 2), and the bias update.
TEST_F(TpTest, MoeSequenceParallelWithADenseLayerMatchesOneProcess) {
  matches_one_process("moe_sp", moe_model({"parallel.sp=true", "model.moe.every=2", "model.moe.balance=bias_update"}));
}

// Expert parallelism over the data-parallel ranks of each tensor-parallel rank (4 ranks: ep = 2 ×
// tp = 2): every rank holds and computes its hidden units of its experts, for the tokens of its ep
// group.
TEST_F(TpTest, MoeWithExpertParallelismMatchesOneProcess) {
  if (dp() < 2) GTEST_SKIP() << "expert parallelism needs 2 data-parallel ranks (mpirun -np 4)";
  matches_one_process("moe_ep", moe_model({"parallel.ep=2"}));
  auto t = test::make_trainer(recipe_config(1, kB, kTp, moe_model({"parallel.ep=2"})), root_ / "tp_moe_ep_groups", g_comm);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->model().expert_parallel().size, 2);
  EXPECT_EQ(t->model().config().moe.held_experts(), 2);  // half the experts, half of each one's units
  EXPECT_EQ(t->model().config().moe.expert_ffn, 12);
  ASSERT_NE(t->model().tensor_parallel(), nullptr);
  EXPECT_EQ(t->model().tensor_parallel()->size, kTp);
  ASSERT_TRUE(g_comm->barrier().ok());
}

// Each rank holds every expert's part: half of each expert's hidden units, the router whole.
TEST_F(TpTest, MoeRanksHoldHalfOfEveryExpert) {
  auto t = test::make_trainer(recipe_config(1, kB, kTp, moe_model()), root_ / "tp_moe_part", g_comm);
  ASSERT_TRUE(t);
  const model::ModelConfig& c = t->model().config();
  EXPECT_EQ(c.moe.expert_ffn, 12);
  EXPECT_EQ(c.moe.num_experts, 4);
  const model::ModelViews views = t->model().param_views();
  const model::BlockViews& b = views.blocks[0];
  EXPECT_EQ(b.router_w.dim(0), 4);
  EXPECT_EQ(b.experts_up_w.dim(1), 2 * 12);  // gate|up rows of each expert (SwiGLU)
  EXPECT_EQ(b.experts_down_w.dim(2), 12);
  // The parts put together are the single process's initialisation.
  const model::ParamLayout& full = t->model_split().whole_layout();
  std::vector<float> init(static_cast<size_t>(full.total_numel()));
  auto recipe = train::recipe_from_config(recipe_config(1, kB, kTp, moe_model()), "test.toml");
  ASSERT_TRUE(recipe.ok());
  model::init_params(full, init.data(), recipe->seed);
  EXPECT_EQ(params_of(*t), init);
  ASSERT_TRUE(g_comm->barrier().ok());
}

// The router bias (model state beside the optimizer's) and the experts' parts survive a TP2 save and
// a one-process resume.
TEST_F(TpTest, MoeCheckpointSavedByTpRanksResumesInOneProcess) {
  saved_by_tp_ranks_resumes_in_one_process("moe", moe_model({"model.moe.balance=bias_update"}));
}

// What tensor parallelism does not run with: an error naming the key, and no run directory.
TEST_F(TpTest, UnsupportedCombinationsAreRefusedBeforeAnythingIsWritten) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"train.zero=3"}, "train.zero = 3"},
      {{"optim.name=muon"}, "muon"},
  };
  int i = 0;
  for (const auto& [extra, key] : cases)
    test::expect_refused_before_writing(recipe_config(2, kB, kTp, extra), root_ / ("tp_refused_" + std::to_string(i++)),
                                        g_comm, key);
  // Experts whose hidden size the group does not divide: the recipe itself is refused.
  auto bad = train::recipe_from_config(recipe_config(2, kB, kTp, moe_model({"model.moe.expert_ffn=25"})), "test.toml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().ToString().find("model.moe.expert_ffn = 25"), std::string::npos) << bad.status().ToString();
}

}  // namespace
}  // namespace lmt

int main(int argc, char** argv) { return lmt::test::mpi_test_main(argc, argv, &lmt::g_comm); }
