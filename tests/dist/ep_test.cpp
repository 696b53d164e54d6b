// Expert parallelism (parallel.ep, model/moe_block.h, train/expert_shard_plan.h) under `mpirun -np 2`
// and `-np 4` (ctest registers both; alone, as world 1, every test skips: EP needs 2 ranks):
//   - the model: on each rank a Transformer with ep = 2 and one without, same weights, same batch
//     (this rank's): the loss is the same, each rank computed only its own experts (the per-expert
//     row counter), the other experts' weight gradients are exactly zero before the data-parallel
//     sum, and the summed gradients equal the summed gradients without EP;
//   - training with the experts sharded (fp32, top-2 of 4, 6 steps): parallel.ep = 2 on 2 (ep = dp)
//     and 4 data-parallel ranks (two holding each expert) gives the same per-step losses (1e-5
//     relative), gradient norms, validation losses and final whole-model parameters (1e-6 +
//     1e-5·|p|) as ep = 1 on the same ranks — with the aux loss, the z-loss and capacity drops,
//     which are per rank either way — and, without the aux loss and dropless, as one process with
//     the global batch; also with ZeRO-1 and 2 micro-batches of gradient accumulation;
//   - each rank holds its experts only; checkpoints move between ep = 2 and one process both ways;
//   - a bad parallel.ep is refused naming the key.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <unistd.h>

#include "common/mpi_trainer_runs.h"
#include "common/synthetic_dataset.h"
#include "lmt/dist/communicator.h"
#include "lmt/kernels/registry.h"
#include "lmt/model/transformer.h"
#include "lmt/train/trainer.h"

namespace lmt {
namespace {
namespace fs = std::filesystem;

dist::Communicator* g_comm = nullptr;
constexpr int64_t kVocab = 64;
constexpr int64_t kB = 2;  // micro-batch per rank; single-process references use kB · world

#define REQUIRE_TWO_RANKS() \
  if (g_comm->world() != 2) GTEST_SKIP() << "needs mpirun -np 2 (ctest runs it so)"
// Training tests run at 2 ranks (ep = dp = 2) and 4 (dp 4, ep 2: two ranks hold each expert).
#define REQUIRE_TWO_OR_FOUR_RANKS() \
  if (g_comm->world() != 2 && g_comm->world() != 4) GTEST_SKIP() << "needs mpirun -np 2 or 4 (ctest runs both)"

model::ExpertParallel ep_of(dist::Communicator& c) {
  model::ExpertParallel ep;
  ep.rank = c.rank();
  ep.size = c.world();
  ep.all_to_all_v = [&c](const void* s, const std::vector<int64_t>& sb, void* r, const std::vector<int64_t>& rb) {
    return c.all_to_all_v(s, sb, r, rb);
  };
  return ep;
}

model::ModelConfig small_moe(int64_t experts) {
  model::ModelConfig c = *model::preset("tiny");
  c.vocab_size = 37;
  c.max_seq_len = 16;
  c.n_layers = 2;
  c.d_model = 16;
  c.n_heads = 2;
  c.n_kv_heads = 1;
  c.head_dim = 8;
  c.ffn_hidden = 24;
  c.init_std = 0.3f;
  c.moe.num_experts = experts;
  c.moe.top_k = 2;
  c.moe.expert_ffn = 12;
  c.moe.shared_experts = 1;
  c.moe.every = 1;
  c.moe.router_z_loss = 1e-3f;
  return c;
}

void model_level(int64_t experts, double capacity_factor) {
  model::ModelConfig c = small_moe(experts);
  c.moe.capacity_factor = static_cast<float>(capacity_factor);
  ASSERT_TRUE(c.validate().ok()) << c.validate().ToString();
  const int64_t B = 2, T = 16, N = B * T, E = experts, El = E / 2;
  auto* be = *kernels::find_backend("cpu");
  model::RunOptions o;
  o.compute = DType::kF32;
  model::Transformer plain(c, *be), ep(c, *be);
  plain.init(7);
  ep.init(7);
  plain.prepare(B, T, o);
  o.ep = 2;
  ep.prepare(B, T, o);
  ep.set_expert_parallel(ep_of(*g_comm));
  std::mt19937 rng(100 + static_cast<unsigned>(g_comm->rank()));  // each rank its own tokens
  std::vector<int32_t> tokens(N), targets(N);
  for (int64_t i = 0; i < N; ++i) tokens[i] = static_cast<int32_t>(rng() % 37), targets[i] = static_cast<int32_t>(rng() % 37);
  for (model::Transformer* m : {&plain, &ep}) {
    m->zero_grads();
    m->reset_moe_stats();
  }
  const double l_plain = plain.forward(tokens.data(), targets.data(), nullptr, true, 0.5f);
  plain.backward();
  const double l_ep = ep.forward(tokens.data(), targets.data(), nullptr, true, 0.5f);
  ep.backward();
  EXPECT_NEAR(l_ep, l_plain, 1e-6 * std::abs(l_plain));

  // Each rank computed only its experts; over both ranks every kept row was computed once.
  const int r = g_comm->rank();
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const model::MoeStepStats& sp = plain.moe_stats()[l];
    const model::MoeStepStats& se = ep.moe_stats()[l];
    ASSERT_EQ(se.computed.size(), static_cast<size_t>(E));
    EXPECT_EQ(se.load, sp.load) << "routing is local and the same";
    EXPECT_EQ(se.dropped, sp.dropped);
    std::vector<double> kept(E), done(E);
    for (int64_t e = 0; e < E; ++e) {
      const bool mine = e / El == r;
      if (!mine) {
        EXPECT_EQ(se.computed[e], 0) << "layer " << l << " expert " << e << " is the other rank's";
      }
      kept[e] = static_cast<double>(sp.computed[e]);  // without EP: the kept rows of this rank
      done[e] = static_cast<double>(se.computed[e]);
    }
    ASSERT_TRUE(g_comm->all_reduce_sum(kept.data(), E).ok());
    ASSERT_TRUE(g_comm->all_reduce_sum(done.data(), E).ok());
    EXPECT_EQ(done, kept) << "layer " << l;
    double rows = 0;
    for (int64_t e = r * El; e < (r + 1) * El; ++e) rows += done[e];
    EXPECT_GT(rows, 0) << "this rank computed rows of its experts";
  }

  // Non-owned experts' gradients are zero here; the data-parallel sums agree.
  const model::ModelViews gv = ep.grad_views();
  for (int64_t l = 0; l < c.n_layers; ++l) {
    for (const TensorView* t : {&gv.blocks[l].experts_up_w, &gv.blocks[l].experts_down_w}) {
      const int64_t per = t->numel() / E;
      const float* g = t->as<float>();
      double other = 0, own = 0;
      for (int64_t e = 0; e < E; ++e)
        for (int64_t i = 0; i < per; ++i) (e / El == r ? own : other) += std::abs(g[e * per + i]);
      EXPECT_EQ(other, 0.0) << "layer " << l;
      EXPECT_GT(own, 0.0) << "layer " << l;
    }
  }
  const int64_t n = plain.layout().total_numel();
  std::vector<float> ga(plain.grads().as<float>(), plain.grads().as<float>() + n);
  std::vector<float> gb(ep.grads().as<float>(), ep.grads().as<float>() + n);
  ASSERT_TRUE(g_comm->all_reduce_sum(ga.data(), n).ok());
  ASSERT_TRUE(g_comm->all_reduce_sum(gb.data(), n).ok());
  double worst = 0;
  int64_t at = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = std::abs(double(ga[i]) - gb[i]) - 1e-5 * std::abs(double(ga[i]));
    if (d > worst) worst = d, at = i;
  }
  EXPECT_LE(worst, 1e-7) << "gradient " << at << ": " << ga[at] << " vs " << gb[at];

  // Inference is local: the logits of both models agree without any exchange.
  Tensor la({N, c.vocab_size}, DType::kF32), lb({N, c.vocab_size}, DType::kF32);
  plain.logits(tokens.data(), nullptr, la.view());
  ep.logits(tokens.data(), nullptr, lb.view());
  for (int64_t i = 0; i < la.numel(); ++i) ASSERT_EQ(la.as<float>()[i], lb.as<float>()[i]) << i;
}

TEST(ExpertParallelModel, TwoRanksComputeOnlyTheirExpertsWithTheSameGradients) {
  REQUIRE_TWO_RANKS();
  model_level(4, 0.0);
}

TEST(ExpertParallelModel, EightExpertsWithCapacityDrops) {
  REQUIRE_TWO_RANKS();
  model_level(8, 1.0);
}

class EpTrainTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { root_ = test::make_shared_run_root(*g_comm, "lmt_ep", kVocab); }
  static void TearDownTestSuite() { test::remove_shared_run_root(*g_comm, root_); }

  static config::Config recipe_config(int64_t steps, int64_t micro_batch, int64_t ep,
                                      const std::vector<std::string>& extra) {
    config::Config c = config::Config::defaults();
    for (const char* kv : {"model.n_layers=2", "model.d_model=32", "model.n_heads=4", "model.n_kv_heads=2",
                           "model.head_dim=8", "model.ffn_hidden=64", "model.max_seq_len=64", "train.seq_len=32",
                           "model.moe.num_experts=4", "model.moe.top_k=2", "model.moe.expert_ffn=24",
                           "optim.lr=3e-3", "schedule.warmup_steps=2", "eval.batches=2", "checkpoint.async=false",
                           "train.dtype=fp32"})
      EXPECT_TRUE(c.apply_override(kv).ok()) << kv;
    EXPECT_TRUE(c.apply_override("data.path=" + (root_ / "data").string()).ok());
    EXPECT_TRUE(c.apply_override("train.max_steps=" + std::to_string(steps)).ok());
    EXPECT_TRUE(c.apply_override("train.micro_batch=" + std::to_string(micro_batch)).ok());
    EXPECT_TRUE(c.apply_override("parallel.ep=" + std::to_string(ep)).ok());
    for (const std::string& kv : extra) EXPECT_TRUE(c.apply_override(kv).ok()) << kv;
    return c;
  }

  static std::unique_ptr<train::Trainer> make(const config::Config& c, const fs::path& run, dist::Communicator* comm,
                                              bool resume = false) {
    return test::make_trainer(c, run, comm, resume);
  }


  static void expect_losses(const fs::path& a, const fs::path& b, int64_t steps) {
    auto la = test::losses_of(a), lb = test::losses_of(b);
    ASSERT_EQ(la.size(), static_cast<size_t>(steps)) << a;
    ASSERT_EQ(lb.size(), static_cast<size_t>(steps)) << b;
    for (int64_t s = 1; s <= steps; ++s) {
      EXPECT_TRUE(std::isfinite(lb[s])) << "step " << s;
      EXPECT_NEAR(la[s], lb[s], 1e-5 * std::abs(la[s])) << "step " << s;
    }
  }

  // The whole models' parameters (collective: an ep run's experts are gathered from its ranks).
  static void expect_params(train::Trainer& a, train::Trainer& b) {
    const std::vector<float> pa = test::full_params_of(a), pb = test::full_params_of(b);
    ASSERT_EQ(pa.size(), pb.size());
    double worst = 0;
    size_t at = 0;
    for (size_t i = 0; i < pa.size(); ++i) {
      const double x = pa[i], y = pb[i];
      const double d = std::abs(x - y) - 1e-5 * std::abs(x);
      if (d > worst) worst = d, at = i;
    }
    EXPECT_LE(worst, 1e-6) << "parameter " << at << ": " << pa[at] << " vs " << pb[at];
  }

  // ep = 2 against ep = 1 on the same 2 ranks, and optionally against one process (global batch).
  void compare(const std::string& name, const std::vector<std::string>& extra, bool vs_one_process) {
    const int64_t steps = 6;
    const fs::path run_dp = root_ / (name + "_dp2"), run_ep = root_ / (name + "_ep2");
    auto dp = make(recipe_config(steps, kB, 1, extra), run_dp, g_comm);
    ASSERT_TRUE(dp);
    ASSERT_TRUE(dp->run().ok());
    auto ep = make(recipe_config(steps, kB, 2, extra), run_ep, g_comm);
    ASSERT_TRUE(ep);
    EXPECT_EQ(ep->model().expert_parallel().size, 2);
    Status s = ep->run();
    ASSERT_TRUE(s.ok()) << s.ToString();
    ASSERT_TRUE(g_comm->barrier().ok());
    expect_losses(run_dp, run_ep, steps);
    // The global gradient norm counts each replicated tensor once over the ep group and each
    // expert once; validation runs every expert through the exchange too.
    test::expect_close_by_step(test::records_of(run_dp, "step", "grad_norm"), test::records_of(run_ep, "step", "grad_norm"),
                               1e-4, "grad_norm");
    const auto val_dp = test::records_of(run_dp, "val", "val_loss"), val_ep = test::records_of(run_ep, "val", "val_loss");
    EXPECT_FALSE(val_ep.empty());
    test::expect_close_by_step(val_dp, val_ep, 1e-5, "val_loss");
    expect_params(*dp, *ep);
    if (!vs_one_process) return;
    const fs::path run_one = root_ / (name + "_one_rank" + std::to_string(g_comm->rank()));
    dist::SoloCommunicator solo;
    auto one = make(recipe_config(steps, kB * g_comm->world(), 1, extra), run_one, &solo);
    ASSERT_TRUE(one);
    ASSERT_TRUE(one->run().ok());
    expect_losses(run_one, run_ep, steps);
    expect_params(*one, *ep);
  }

  static fs::path root_;
};
fs::path EpTrainTest::root_;

// The aux loss, the z-loss and capacity are computed per rank's micro-batch, with or without EP
// (so not comparable with one process of twice the batch).
TEST_F(EpTrainTest, Ep2EqualsDp2WithAuxLossZLossAndCapacity) {
  REQUIRE_TWO_OR_FOUR_RANKS();
  compare("aux", {"model.moe.aux_loss_coef=0.01", "model.moe.router_z_loss=0.001", "model.moe.capacity_factor=1.0"},
          false);
}

TEST_F(EpTrainTest, Ep2EqualsDp2AndOneProcessWhenDropless) {
  REQUIRE_TWO_OR_FOUR_RANKS();
  compare("none", {"model.moe.balance=none"}, true);
}

TEST_F(EpTrainTest, Ep2WithZero1AndGradAccumulationEqualsOneProcess) {
  REQUIRE_TWO_OR_FOUR_RANKS();
  compare("z1acc", {"model.moe.balance=bias_update", "train.zero=1", "train.grad_accum=2", "model.moe.shared_experts=1"},
          true);
}

// ZeRO-2 (the gradients reduce-scattered over the edp group) and Muon (the experts are whole
// matrices on their holders, orthogonalised there; Newton–Schulz in f32 as dist_test explains).
TEST_F(EpTrainTest, Ep2WithZero2AndMuonEqualsDp2) {
  REQUIRE_TWO_OR_FOUR_RANKS();
  compare("z2muon", {"train.zero=2", "optim.name=muon", "optim.muon_ns_dtype=fp32", "model.moe.balance=none"}, false);
}

// bf16 GEMMs: each expert's products are the same on its holder as without EP; the replicated
// tensors' gradients are summed in another order. Within bf16 tolerance of ep = 1.
TEST_F(EpTrainTest, Bf16Ep2CloseToDp2) {
  REQUIRE_TWO_OR_FOUR_RANKS();
  const int64_t steps = 5;
  const std::vector<std::string> extra = {"train.dtype=bf16", "model.moe.balance=none"};
  const fs::path run_dp = root_ / "bf16_dp", run_ep = root_ / "bf16_ep";
  auto dp = make(recipe_config(steps, kB, 1, extra), run_dp, g_comm);
  auto ep = make(recipe_config(steps, kB, 2, extra), run_ep, g_comm);
  ASSERT_TRUE(dp && ep);
  ASSERT_TRUE(dp->run().ok());
  Status s = ep->run();
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_TRUE(g_comm->barrier().ok());
  test::expect_close_by_step(test::losses_of(run_dp), test::losses_of(run_ep), 1e-3, "loss");
}

// Each rank holds only its ep rank's experts (half of them), every other tensor whole: the
// routed experts' parameters, gradients and optimizer state are split over the ep group.
TEST_F(EpTrainTest, EachRankHoldsItsExpertsOnly) {
  REQUIRE_TWO_OR_FOUR_RANKS();
  auto one = make(recipe_config(1, kB, 1, {}), root_ / "held_ep1", g_comm);
  auto t = make(recipe_config(1, kB, 2, {}), root_ / "held_ep2", g_comm);
  ASSERT_TRUE(one && t);
  const model::ModelConfig& c = t->model().config();
  EXPECT_EQ(c.moe.held_experts(), 2);
  EXPECT_EQ(c.moe.first_expert, 2 * (g_comm->rank() % 2));
  EXPECT_EQ(t->model().param_views().blocks[0].experts_up_w.dim(0), 2);
  EXPECT_EQ(t->model().param_views().blocks[0].router_w.dim(0), 4);  // the router stays whole
  int64_t experts = 0, other = 0, experts_here = 0, other_here = 0;
  for (const model::ParamInfo& p : one->model().layout().params())
    (p.name.find(".mlp.experts.") != std::string::npos ? experts : other) += p.numel;
  for (const model::ParamInfo& p : t->model().layout().params())
    (p.name.find(".mlp.experts.") != std::string::npos ? experts_here : other_here) += p.numel;
  EXPECT_EQ(experts_here * 2, experts);
  EXPECT_EQ(other_here, other);
  // Model-state bytes shrink by the experts this rank does not hold (params, grads, Adam's m and v;
  // ZeRO 0 here, so the data-parallel group does not shard anything else).
  const int64_t a = one->data_parallel().model_state_bytes(one->model(), one->engine().optimizer());
  const int64_t b = t->data_parallel().model_state_bytes(t->model(), t->engine().optimizer());
  EXPECT_NEAR(static_cast<double>(a - b), static_cast<double>(experts / 2 * 16), 4096.0) << a << " vs " << b;
  ASSERT_TRUE(g_comm->barrier().ok());
}

// Checkpoints are whole models: saved by the ep ranks at step 3 (experts gathered), resumed by one
// process with the global batch, which then trains like the uninterrupted single process; and the
// reverse, one process's checkpoint resumed with the experts sharded.
TEST_F(EpTrainTest, CheckpointsMoveBetweenShardedExpertsAndOneProcess) {
  REQUIRE_TWO_OR_FOUR_RANKS();
  const std::vector<std::string> extra = {"model.moe.balance=bias_update", "model.moe.shared_experts=1"};
  const int64_t steps = 6, W = g_comm->world();
  const fs::path ref = root_ / ("ckpt_ref_rank" + std::to_string(g_comm->rank()));
  std::unique_ptr<train::Trainer> uninterrupted;
  {
    dist::SoloCommunicator solo;
    uninterrupted = make(recipe_config(steps, kB * W, 1, extra), ref, &solo);
    ASSERT_TRUE(uninterrupted && uninterrupted->run().ok());
  }
  // ep ranks save, one process resumes.
  const fs::path run = root_ / "ckpt_by_ep";
  test::saved_by_ranks_resumed_in_one_process(recipe_config(steps, kB, 2, extra), recipe_config(steps, kB * W, 1, extra),
                                              run, g_comm, 3, [&](train::Trainer&) { expect_losses(ref, run, steps); });
  // One process saves, the ep ranks resume with their experts (and Adam state) only.
  const fs::path back = root_ / "ckpt_to_ep";
  if (g_comm->rank() == 0) {
    dist::SoloCommunicator solo;
    auto t = make(recipe_config(steps, kB * W, 1, extra), back, &solo);
    ASSERT_TRUE(t && t->run(/*stop_after=*/3).ok());
  }
  ASSERT_TRUE(g_comm->barrier().ok());
  auto t = make(recipe_config(steps, kB, 2, extra), back, g_comm, /*resume=*/true);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->step(), 3);
  Status s = t->run();
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_TRUE(g_comm->barrier().ok());
  expect_losses(ref, back, steps);
  expect_params(*uninterrupted, *t);
}

TEST_F(EpTrainTest, BadEpIsRefusedNamingTheKey) {
  REQUIRE_TWO_RANKS();
  // 3 does not divide 4 experts: refused when the recipe is built.
  auto r3 = train::recipe_from_config(recipe_config(1, kB, 3, {}), "test.toml");
  ASSERT_FALSE(r3.ok());
  EXPECT_NE(r3.status().ToString().find("parallel.ep"), std::string::npos) << r3.status().ToString();
  // 4 divides the experts but not the 2 data-parallel ranks: refused at start, on every rank.
  const config::Config c4 = recipe_config(1, kB, 4, {});
  auto r4 = train::recipe_from_config(c4, "test.toml");
  ASSERT_TRUE(r4.ok()) << r4.status().ToString();
  auto t = train::Trainer::create(*r4, c4.to_toml(), (root_ / "bad_ep").string(), false, g_comm);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().ToString().find("parallel.ep = 4"), std::string::npos) << t.status().ToString();
  EXPECT_FALSE(fs::exists(root_ / "bad_ep")) << "nothing written";
  // Per-layer gradient norms would need the other ranks' experts: refused with sharded experts.
  test::expect_refused_before_writing(recipe_config(1, kB, 2, {"metrics.layer_grad_norm_every=1"}),
                                      root_ / "bad_ep_layer_norms", g_comm, "layer_grad_norm_every");
}

}  // namespace
}  // namespace lmt

int main(int argc, char** argv) { return lmt::test::mpi_test_main(argc, argv, &lmt::g_comm); }
