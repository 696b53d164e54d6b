// The parallel.* recipe keys (issue #15): parsed into the recipe, checked against the model when the
// recipe is built and against the world when training starts; tensor and pipeline parallelism are
// refused as Unimplemented (never silently ignored). Every error names its key.
#include "lmt/train/parallel_layout.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "common/synthetic_dataset.h"
#include "lmt/plan/emit_config.h"
#include "lmt/train/recipe.h"
#include "lmt/train/trainer.h"

namespace lmt::train {
namespace {
namespace fs = std::filesystem;

// A llama-style shape: 8 heads, 4 KV heads, 4 layers, ffn 96, vocabulary 100 padded to 128.
model::ModelConfig shape() {
  model::ModelConfig m;
  m.vocab_size = 100;
  m.vocab_pad_to = 64;
  m.n_layers = 4;
  m.d_model = 64;
  m.n_heads = 8;
  m.n_kv_heads = 4;
  m.head_dim = 8;
  m.ffn_hidden = 96;
  return m;
}

ParallelLayout layout(int64_t dp, int64_t tp, int64_t pp, bool sp = false) {
  ParallelLayout p;
  p.dp = dp;
  p.tp = tp;
  p.pp = pp;
  p.sp = sp;
  return p;
}

std::string check(const ParallelLayout& p, const model::ModelConfig& m = shape(), int64_t seq = 32) {
  Status s = check_parallel_layout(p, m, seq, "r.toml");
  return s.ok() ? "" : s.ToString();
}

TEST(ParallelLayoutCheck, ValidLayoutsPass) {
  EXPECT_EQ(check(layout(0, 1, 1)), "");
  EXPECT_EQ(check(layout(0, 2, 2)), "");      // 8/2, 4/2, 96/2, 128/2; 4 layers >= 2
  EXPECT_EQ(check(layout(2, 4, 4, true)), "");  // 4 divides 8, 4, 96, 128 and seq 32; 4 stages of 1 layer
}

TEST(ParallelLayoutCheck, HeadsNotDivisible) {
  model::ModelConfig m = shape();
  m.n_heads = 6;
  m.n_kv_heads = 6;
  const std::string e = check(layout(0, 4, 1), m);
  EXPECT_NE(e.find("parallel.tp = 4 does not divide model.n_heads = 6"), std::string::npos) << e;
  EXPECT_NE(e.find("r.toml"), std::string::npos) << e;
  EXPECT_NE(e.find("lmtrain plan"), std::string::npos) << e;  // the hint
}

TEST(ParallelLayoutCheck, KvHeadsNotDivisible) {
  const std::string e = check(layout(0, 8, 1));  // 8 heads divide, 4 KV heads do not
  EXPECT_NE(e.find("parallel.tp = 8 does not divide the KV heads (model.n_kv_heads = 4)"), std::string::npos) << e;
}

TEST(ParallelLayoutCheck, FfnNotDivisible) {
  model::ModelConfig m = shape();
  m.ffn_hidden = 90;
  const std::string e = check(layout(0, 4, 1), m);
  EXPECT_NE(e.find("does not divide model.ffn_hidden = 90"), std::string::npos) << e;
}

TEST(ParallelLayoutCheck, PaddedVocabularyNotDivisible) {
  model::ModelConfig m = shape();
  m.vocab_pad_to = 2;  // 100 → 100, not a multiple of 8
  m.n_heads = m.n_kv_heads = 8;
  m.ffn_hidden = 96;
  const std::string e = check(layout(0, 8, 1), m);
  EXPECT_NE(e.find("does not divide the padded vocabulary 100"), std::string::npos) << e;
  EXPECT_NE(e.find("vocab_pad_to"), std::string::npos) << e;
}

TEST(ParallelLayoutCheck, MoreStagesThanLayers) {
  const std::string e = check(layout(0, 1, 5));
  EXPECT_NE(e.find("parallel.pp = 5 is more than model.n_layers = 4"), std::string::npos) << e;
  EXPECT_NE(e.find("parallel.pp <= 4"), std::string::npos) << e;
}

TEST(ParallelLayoutCheck, SequenceParallelNeedsTensorParallel) {
  const std::string e = check(layout(0, 1, 1, true));
  EXPECT_NE(e.find("parallel.sp = true needs parallel.tp > 1"), std::string::npos) << e;
  const std::string e2 = check(layout(0, 4, 1, true), shape(), 30);  // 30 positions over 4 ranks
  EXPECT_NE(e2.find("train.seq_len = 30 is not divisible by parallel.tp = 4"), std::string::npos) << e2;
}

// parallel.ep (expert parallelism, docs/MOE.md): an MoE model whose expert count it divides, and
// (given or resolved) a data-parallel size it divides.
TEST(ParallelLayoutCheck, ExpertParallelNeedsMoeAndDivisibility) {
  ParallelLayout p = layout(4, 1, 1);
  p.ep = 2;
  std::string e = check(p);
  EXPECT_NE(e.find("parallel.ep = 2 needs a mixture-of-experts model"), std::string::npos) << e;
  model::ModelConfig m = shape();
  m.moe.num_experts = 6;
  m.moe.top_k = 2;
  m.moe.expert_ffn = 16;
  EXPECT_EQ(check(p, m), "");
  p.ep = 4;
  e = check(p, m);
  EXPECT_NE(e.find("parallel.ep = 4 does not divide model.moe.num_experts = 6"), std::string::npos) << e;
  EXPECT_NE(e.find("r.toml"), std::string::npos) << e;
  p.ep = 3;
  e = check(p, m);
  EXPECT_NE(e.find("parallel.ep = 3 does not divide parallel.dp = 4"), std::string::npos) << e;
  p.dp = 0;  // auto: checked against the world
  EXPECT_EQ(check(p, m), "");
  auto s = resolve_parallel_layout(p, 3);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->dp, 3);
  s = resolve_parallel_layout(p, 4);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("parallel.ep = 3 does not divide the data-parallel size 4"), std::string::npos)
      << s.status().ToString();
}

TEST(ParallelLayoutResolve, DpAutoAndExplicit) {
  auto s = resolve_parallel_layout(layout(0, 1, 1), 4);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->dp, 4);
  EXPECT_EQ(s->tp, 1);
  EXPECT_EQ(s->pp, 1);
  s = resolve_parallel_layout(layout(2, 1, 1), 2);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->dp, 2);
  s = resolve_parallel_layout(layout(0, 1, 1), 1);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->dp, 1);
}

TEST(ParallelLayoutResolve, ProductMustBeTheWorld) {
  auto s = resolve_parallel_layout(layout(2, 1, 1), 1);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("parallel.dp · parallel.tp · parallel.pp = 2 · 1 · 1 = 2 is not the world size 1"),
            std::string::npos) << s.status().ToString();
  EXPECT_NE(s.status().ToString().find("mpirun -np 2"), std::string::npos) << s.status().ToString();
  s = resolve_parallel_layout(layout(3, 1, 1), 2);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("= 3 is not the world size 2"), std::string::npos) << s.status().ToString();
}

TEST(ParallelLayoutResolve, TensorPipelineAndSequenceResolve) {
  auto t = resolve_parallel_layout(layout(0, 2, 1), 4);  // tp runs: dp = 4 / 2
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->tp, 2);
  EXPECT_EQ(t->dp, 2);
  t = resolve_parallel_layout(layout(0, 2, 2), 8);  // and tp × pp: dp = 8 / 4
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->pp, 2);
  EXPECT_EQ(t->dp, 2);
  t = resolve_parallel_layout(layout(0, 2, 1), 1);  // but needs tp ranks
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find("does not divide the world size 1"), std::string::npos) << t.status().ToString();
  t = resolve_parallel_layout(layout(0, 2, 1, true), 2);  // sequence parallelism inside tp
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->tp, 2);
}

// Through the real recipe loader and trainer.
class ParallelRecipeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = fs::temp_directory_path() / ("lmt_parallel_layout_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_);
    test::write_markov_dataset((root_ / "data").string(), 64, "parallel_layout_test");
  }
  static void TearDownTestSuite() { fs::remove_all(root_); }

  config::Config base() {
    config::Config c = config::Config::defaults();
    for (const char* kv : {"model.n_layers=2", "model.d_model=32", "model.n_heads=4", "model.n_kv_heads=2",
                           "model.head_dim=8", "model.ffn_hidden=64", "model.max_seq_len=64", "train.micro_batch=2",
                           "train.seq_len=32", "train.max_steps=1", "checkpoint.async=false"})
      EXPECT_TRUE(c.apply_override(kv).ok()) << kv;
    EXPECT_TRUE(c.apply_override("data.path=" + (root_ / "data").string()).ok());
    return c;
  }
  static fs::path root_;
};
fs::path ParallelRecipeTest::root_;

TEST_F(ParallelRecipeTest, KeysReachTheRecipe) {
  config::Config c = base();
  auto r = recipe_from_config(c, "test.toml");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->parallel.dp, 0);  // defaults: auto dp, no model parallelism
  EXPECT_EQ(r->parallel.tp, 1);
  EXPECT_EQ(r->parallel.pp, 1);
  EXPECT_FALSE(r->parallel.sp);
  for (const char* kv : {"parallel.dp=3", "parallel.tp=2", "parallel.pp=2", "parallel.sp=true"})
    ASSERT_TRUE(c.apply_override(kv).ok()) << kv;
  r = recipe_from_config(c, "test.toml");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->parallel.dp, 3);
  EXPECT_EQ(r->parallel.tp, 2);
  EXPECT_EQ(r->parallel.pp, 2);
  EXPECT_TRUE(r->parallel.sp);
}

TEST_F(ParallelRecipeTest, ModelErrorsNameTheKeyAndTheFlag) {
  config::Config c = base();
  ASSERT_TRUE(c.apply_override("parallel.tp=4").ok());  // 4 heads but 2 KV heads
  auto r = recipe_from_config(c, "test.toml");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("parallel.tp = 4 does not divide the KV heads"), std::string::npos) << r.status().ToString();
  EXPECT_NE(r.status().message().find("--set"), std::string::npos) << r.status().ToString();  // where it came from
  c = base();
  ASSERT_TRUE(c.apply_override("parallel.pp=3").ok());
  r = recipe_from_config(c, "test.toml");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("parallel.pp = 3 is more than model.n_layers = 2"), std::string::npos);
  EXPECT_FALSE(c.apply_override("parallel.tp=0").ok());  // the schema's range
}

TEST_F(ParallelRecipeTest, ZeroAlias) {
  config::Config c = base();
  ASSERT_TRUE(c.apply_override("parallel.zero=1").ok());
  auto r = recipe_from_config(c, "test.toml");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->zero, 1);
  ASSERT_TRUE(c.apply_override("train.zero=1").ok());  // both, agreeing
  r = recipe_from_config(c, "test.toml");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->zero, 1);
  ASSERT_TRUE(c.apply_override("train.zero=2").ok());  // both, contradicting
  r = recipe_from_config(c, "test.toml");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("parallel.zero = 1 contradicts train.zero = 2"), std::string::npos)
      << r.status().ToString();
}

// parallel.pp_layers: one whole block count per stage, summing to the layers.
TEST_F(ParallelRecipeTest, StageSizesAreChecked) {
  config::Config c = base();  // 2 layers
  ASSERT_TRUE(c.apply_override("parallel.pp=2").ok());
  ASSERT_TRUE(c.apply_override("parallel.pp_layers=[1, 1]").ok());
  auto r = recipe_from_config(c, "test.toml");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->parallel.pp_layers, (std::vector<int64_t>{1, 1}));
  for (const char* bad : {"parallel.pp_layers=[2, 1]", "parallel.pp_layers=[2]", "parallel.pp_layers=[1.5, 1.5]"}) {
    config::Config b = base();
    ASSERT_TRUE(b.apply_override("parallel.pp=2").ok());
    ASSERT_TRUE(b.apply_override(bad).ok()) << bad;
    auto rb = recipe_from_config(b, "test.toml");
    ASSERT_FALSE(rb.ok()) << bad;
    EXPECT_EQ(rb.status().code(), StatusCode::kInvalidArgument) << rb.status().ToString();
    EXPECT_NE(rb.status().ToString().find("parallel.pp_layers"), std::string::npos) << rb.status().ToString();
    EXPECT_NE(rb.status().ToString().find("hint"), std::string::npos) << rb.status().ToString();
  }
}

TEST_F(ParallelRecipeTest, TrainerRefusesTheWrongWorld) {
  config::Config c = base();  // TP2 × PP2 with SP runs (tests/dist/tp_test.cpp, pp_test.cpp), but not in one process
  ASSERT_TRUE(c.apply_override("parallel.tp=2").ok());
  ASSERT_TRUE(c.apply_override("parallel.pp=2").ok());
  ASSERT_TRUE(c.apply_override("parallel.sp=true").ok());
  auto r = recipe_from_config(c, "test.toml");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->run.sequence_shards, 2);
  auto t = Trainer::create(*r, c.to_toml(), (root_ / "tp2").string(), false);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().ToString().find("world size 1"), std::string::npos) << t.status().ToString();
  EXPECT_FALSE(fs::exists(root_ / "tp2"));

  c = base();
  ASSERT_TRUE(c.apply_override("parallel.dp=2").ok());
  r = recipe_from_config(c, "test.toml");
  ASSERT_TRUE(r.ok());
  t = Trainer::create(*r, c.to_toml(), (root_ / "dp2").string(), false);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("is not the world size 1"), std::string::npos) << t.status().ToString();

  c = base();  // expert parallelism with ZeRO-3: refused before anything is written
  for (const char* kv : {"model.moe.num_experts=2", "model.moe.top_k=1", "model.moe.expert_ffn=8", "parallel.ep=2",
                         "train.zero=3"})
    ASSERT_TRUE(c.apply_override(kv).ok()) << kv;
  r = recipe_from_config(c, "test.toml");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  t = Trainer::create(*r, c.to_toml(), (root_ / "ep_z3").string(), false);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(t.status().message().find("parallel.ep = 2 with train.zero = 3"), std::string::npos) << t.status().ToString();
  EXPECT_FALSE(fs::exists(root_ / "ep_z3"));

  c = base();
  ASSERT_TRUE(c.apply_override("parallel.dp=1").ok());  // explicit and right: trains
  r = recipe_from_config(c, "test.toml");
  ASSERT_TRUE(r.ok());
  t = Trainer::create(*r, c.to_toml(), (root_ / "dp1").string(), false);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_TRUE((*t)->run().ok());
}

// `lmtrain plan --emit-config` → the real recipe loader: the emitted layout reaches the recipe.
TEST_F(ParallelRecipeTest, EmittedLayoutLoadsThroughTheRecipeLoader) {
  plan::PlanInputs in;
  in.model = *model::preset("tiny");
  in.model->n_layers = 2;  // the shape of base(): 4 heads, 2 KV heads, ffn 64
  in.model->d_model = 32;
  in.model->n_heads = 4;
  in.model->n_kv_heads = 2;
  in.model->head_dim = 8;
  in.model->ffn_hidden = 64;
  in.model->max_seq_len = 64;
  in.hardware = "cpu";
  in.devices = 4;
  in.seq_len = 32;
  in.micro_batch = 2;
  in.global_batch = 16;
  in.zero_stage = 1;
  in.tp = 2;
  auto report = plan::make_plan(in);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  const std::string path = (root_ / "layout.toml").string();
  ASSERT_TRUE(plan::emit_layout_config(*report, path).ok());
  config::Config c = base();
  auto frag = config::Config::from_toml_file(path);
  ASSERT_TRUE(frag.ok()) << frag.status().ToString();
  c.overlay(*frag);
  auto r = recipe_from_config(c, "test.toml");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->parallel.tp, report->layout.tp);
  EXPECT_EQ(r->parallel.pp, report->layout.pp);
  EXPECT_EQ(r->parallel.dp, report->layout.dp);
  EXPECT_EQ(r->parallel.dp, 2);
  EXPECT_EQ(r->zero, 1);
  EXPECT_EQ(r->micro_batch, 2);
  EXPECT_EQ(r->grad_accum, report->layout.grad_accum);
  EXPECT_EQ(r->grad_accum, 4);  // 16 / (2 · 2)
  EXPECT_EQ(r->seq_len, 32);
  EXPECT_FALSE(r->run.recompute);
  // A plan never overwrites the file it wrote.
  EXPECT_FALSE(plan::emit_layout_config(*report, path).ok());
  // And this DP2 × TP2 layout resolves on its 4 ranks (tensor parallelism runs; tests/dist/tp_test).
  auto sizes = resolve_parallel_layout(r->parallel, 4);
  ASSERT_TRUE(sizes.ok()) << sizes.status().ToString();
  EXPECT_EQ(sizes->tp, 2);
}

}  // namespace
}  // namespace lmt::train
