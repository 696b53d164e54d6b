// The trainer end to end on a tiny model and a synthetic, learnable dataset: the loss falls; a run
// stopped at step k and resumed gives exactly the losses of an uninterrupted run; NaNs and loss
// spikes are skipped (or rolled back) and too many bad steps stop the run; the profiler writes a
// trace; an existing run is never overwritten.
#include "lmt/train/trainer.h"

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "lmt/base/build_info.h"
#include "lmt/base/rng.h"
#include "lmt/metrics/hardware.h"
#include "lmt/metrics/peaks.h"
#include "lmt/base/xxh64.h"
#include "common/files.h"
#include "common/stall_reports.h"
#include "common/synthetic_dataset.h"
#include "lmt/data/dataset_writer.h"
#include "lmt/eval/model_dir.h"
#include "lmt/kernels/registry.h"

namespace lmt::train {
namespace {
namespace fs = std::filesystem;

constexpr int64_t kVocab = 64;

class TrainerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = fs::temp_directory_path() / ("lmt_trainer_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_);
    test::write_markov_dataset((root_ / "data").string(), kVocab, "trainer_test");
  }
  static void TearDownTestSuite() { fs::remove_all(root_); }

  config::Config recipe_config(int64_t steps) {
    config::Config c = config::Config::defaults();
    for (const char* kv : {"model.n_layers=2", "model.d_model=32", "model.n_heads=4", "model.n_kv_heads=2",
                           "model.head_dim=8", "model.ffn_hidden=64", "model.max_seq_len=64", "train.micro_batch=4",
                           "train.seq_len=32", "optim.lr=3e-3", "schedule.warmup_steps=2", "eval.batches=2",
                           "checkpoint.async=false", "stability.spike_window=10"})
      EXPECT_TRUE(c.apply_override(kv).ok()) << kv;
    EXPECT_TRUE(c.apply_override("data.path=" + (root_ / "data").string()).ok());
    EXPECT_TRUE(c.apply_override("train.max_steps=" + std::to_string(steps)).ok());
    return c;
  }

  std::unique_ptr<Trainer> make(const config::Config& c, const std::string& run, bool resume = false) {
    auto recipe = recipe_from_config(c, "test.toml");
    EXPECT_TRUE(recipe.ok()) << recipe.status().ToString();
    auto t = Trainer::create(*recipe, c.to_toml(), (root_ / run).string(), resume);
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    return t.ok() ? std::move(*t) : nullptr;
  }

  // Every record of RUN/metrics.jsonl, in order.
  std::vector<nlohmann::json> records_of(const std::string& run) {
    std::vector<nlohmann::json> out;
    std::ifstream in(root_ / run / "metrics.jsonl");
    std::string line;
    while (std::getline(in, line)) out.push_back(nlohmann::json::parse(line));
    return out;
  }

  // step -> the metrics record of that training step (header, val, eval and event records excluded).
  std::map<int64_t, nlohmann::json> steps_of(const std::string& run) {
    std::map<int64_t, nlohmann::json> out;
    std::ifstream in(root_ / run / "metrics.jsonl");
    std::string line;
    while (std::getline(in, line)) {
      auto j = nlohmann::json::parse(line);
      if (j.value("type", "") == "step") out[j["step"].get<int64_t>()] = j;
    }
    return out;
  }

  static fs::path root_;
};
fs::path TrainerTest::root_;

TEST_F(TrainerTest, LossFallsAndMetricsHaveEveryField) {
  auto t = make(recipe_config(30), "falls");
  ASSERT_TRUE(t && t->run().ok());
  auto s = steps_of("falls");
  ASSERT_EQ(s.size(), 30u);
  EXPECT_LT(s[30]["loss"].get<double>(), s[1]["loss"].get<double>() - 1.0);
  for (const char* k : {"step", "tokens", "loss", "lr", "grad_norm", "tokens_per_s", "tflops", "tflops_6n", "mfu", "time", "step_time",
                        "arena_peak_bytes", "rss_bytes"})
    EXPECT_TRUE(s[5].contains(k)) << k;
  for (const char* k : {"data", "forward", "backward", "optimizer", "checkpoint_wait"}) EXPECT_TRUE(s[5]["step_time"].contains(k)) << k;
  EXPECT_TRUE(fs::exists(root_ / "falls" / "checkpoints" / "step_00000030" / "manifest.json"));
  EXPECT_TRUE(fs::exists(root_ / "falls" / "config.toml"));
}

TEST_F(TrainerTest, StoppedAndResumedRunReproducesTheUninterruptedLosses) {
  auto full = make(recipe_config(8), "full");
  ASSERT_TRUE(full && full->run().ok());
  auto half = make(recipe_config(8), "resumed");
  ASSERT_TRUE(half && half->run(/*stop_after=*/4).ok());  // stopped at step 4 (checkpointed)
  half.reset();
  auto rest = make(recipe_config(8), "resumed", /*resume=*/true);
  ASSERT_TRUE(rest);
  EXPECT_EQ(rest->step(), 4);
  ASSERT_TRUE(rest->run().ok());
  auto a = steps_of("full"), b = steps_of("resumed");
  for (int64_t step = 1; step <= 8; ++step)
    EXPECT_EQ(a[step]["loss"].get<double>(), b[step]["loss"].get<double>()) << "step " << step;
}

// An MoE model (top-2 of 4 experts in every layer, the DeepSeek-V3 bias update, capacity 1.0):
// every step record carries the per-layer routing metrics, and a run stopped and resumed reproduces
// the uninterrupted losses, so the router bias (model state outside the parameters) is checkpointed.
// The recipe keys for MoE are another change's: the test sets the model config directly.
TEST_F(TrainerTest, MoeStepMetricsAndResumeWithTheRouterBias) {
  auto make_moe = [&](int64_t steps, const std::string& run, bool resume) -> std::unique_ptr<Trainer> {
    const config::Config c = recipe_config(steps);
    auto recipe = recipe_from_config(c, "test.toml");
    EXPECT_TRUE(recipe.ok()) << recipe.status().ToString();
    if (!recipe.ok()) return nullptr;
    model::MoeConfig& m = recipe->model.moe;
    m.num_experts = 4;
    m.top_k = 2;
    m.expert_ffn = 16;
    m.balance = model::MoeBalance::kBiasUpdate;
    m.bias_update_rate = 0.01f;  // large, so that a bias lost on resume changes the routing at once
    m.capacity_factor = 1.0f;
    auto t = Trainer::create(*recipe, c.to_toml(), (root_ / run).string(), resume);
    EXPECT_TRUE(t.ok()) << t.status().ToString();
    return t.ok() ? std::move(*t) : nullptr;
  };
  auto full = make_moe(8, "moe_full", false);
  ASSERT_TRUE(full && full->run().ok());
  auto half = make_moe(8, "moe_resumed", false);
  ASSERT_TRUE(half && half->run(/*stop_after=*/3).ok());  // odd: a ±rate bias has not come back to 0
  half.reset();
  auto rest = make_moe(8, "moe_resumed", true);
  ASSERT_TRUE(rest);
  ASSERT_TRUE(rest->run().ok());
  auto a = steps_of("moe_full"), b = steps_of("moe_resumed");
  ASSERT_EQ(a.size(), 8u);
  for (int64_t step = 1; step <= 8; ++step) {
    EXPECT_EQ(a[step]["loss"].get<double>(), b[step]["loss"].get<double>()) << "step " << step;
    const nlohmann::json& moe = a[step]["moe"];
    ASSERT_TRUE(moe.is_object()) << a[step].dump();
    ASSERT_EQ(moe["layers"].size(), 2u);
    for (const auto& l : moe["layers"]) {
      int64_t routed = 0, over = 0;
      for (const auto& x : l["load"]) routed += x.get<int64_t>(), over += std::max<int64_t>(0, x.get<int64_t>() - 64);
      EXPECT_EQ(routed, 4 * 32 * 2);  // micro_batch · seq_len · top_k
      EXPECT_EQ(l["dropped"].get<int64_t>(), over);  // capacity ceil(1.0·128·2/4) = 64
      EXPECT_GE(l["imbalance"].get<double>(), 1.0);
      EXPECT_EQ(l["aux_loss"].get<double>(), 0.0);  // balance by bias, no aux loss
    }
    EXPECT_EQ(moe["layers"], b[step]["moe"]["layers"]) << "step " << step;
  }
  EXPECT_TRUE(fs::exists(root_ / "moe_full" / "checkpoints" / "step_00000008"));
  // Loaded for evaluation or generation, the checkpoint's model routes with the trained bias (it
  // once came back with a zero bias: other experts than in training).
  auto loaded = eval::load_model_dir((root_ / "moe_full").string(), kernels::cpu_backend());
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  double moved = 0;
  for (int64_t l = 0; l < 2; ++l) {
    const TensorView want = full->model().router_bias(l), got = loaded->model->router_bias(l);
    ASSERT_TRUE(got.present());
    for (int64_t e = 0; e < 4; ++e) {
      EXPECT_EQ(got.as<float>()[e], want.as<float>()[e]) << "layer " << l << " expert " << e;
      moved += std::abs(want.as<float>()[e]);
    }
  }
  EXPECT_GT(moved, 0.0);
}

// metrics.jsonl: a header first (per start, the resumed one naming its step), then typed records,
// every one with a wall-clock time that never goes backwards; each step appears once.
TEST_F(TrainerTest, MetricsRecordsAreTypedTimedAndStartWithAHeader) {
  const double before = metrics::unix_seconds_now();
  config::Config c = recipe_config(6);
  ASSERT_TRUE(c.apply_override("eval.every=3").ok());
  auto t = make(c, "typed");
  ASSERT_TRUE(t && t->run(/*stop_after=*/4).ok());
  t.reset();
  auto rest = make(c, "typed", /*resume=*/true);
  ASSERT_TRUE(rest && rest->run().ok());
  const double after = metrics::unix_seconds_now();
  const auto recs = records_of("typed");
  ASSERT_FALSE(recs.empty());
  std::map<std::string, int> types;
  std::vector<int64_t> steps, vals, header_at;
  double last_time = before;
  for (size_t i = 0; i < recs.size(); ++i) {
    const auto& j = recs[i];
    ASSERT_TRUE(j.contains("type") && j["type"].is_string()) << j.dump();
    ASSERT_TRUE(j.contains("time") && j["time"].is_number()) << j.dump();
    const double time = j["time"].get<double>();
    EXPECT_GE(time, last_time) << j.dump();
    EXPECT_LE(time, after) << j.dump();
    last_time = time;
    const std::string type = j["type"];
    ++types[type];
    if (type == "step") steps.push_back(j["step"]);
    if (type == "val") vals.push_back(j["step"]);
    if (type == "header") header_at.push_back(static_cast<int64_t>(i));
  }
  EXPECT_EQ(steps, (std::vector<int64_t>{1, 2, 3, 4, 5, 6}));
  // Val at 3 and 6 (eval.every), and the final one at the stop (4, after the checkpoint at 4).
  EXPECT_EQ(vals, (std::vector<int64_t>{3, 4, 6}));
  ASSERT_EQ(header_at.size(), 2u);
  EXPECT_EQ(header_at[0], 0);
  const auto& h0 = recs[0];
  const auto& h1 = recs[static_cast<size_t>(header_at[1])];
  EXPECT_FALSE(h0.contains("resumed_from_step"));
  EXPECT_EQ(h1["resumed_from_step"], 4);
  EXPECT_EQ(h0["lmtrain_version"], build_version());
  EXPECT_EQ(h0["git_commit"], build_git_commit());
  EXPECT_EQ(h0["config_toml"], c.to_toml());
  EXPECT_EQ(h0["max_steps"], 6);
  EXPECT_EQ(h0["world"], (nlohmann::json{{"world_size", 1}, {"dp", 1}, {"tp", 1}, {"pp", 1}, {"ep", 1}}));
  EXPECT_EQ(h0["machine"]["cpu_brand"], metrics::cpu_info().brand);
  EXPECT_EQ(h0["machine"]["threads"], metrics::cpu_info().threads);
  EXPECT_GT(h0["peaks"]["mfu_peak_gflops"].get<double>(), 0);
  EXPECT_EQ(h0["peaks"]["fp32_gflops"].get<double>(), metrics::machine_peaks().peaks.fp32_gflops);
  EXPECT_EQ(h0["model"]["parameters"], recipe_from_config(c, "test.toml")->model.param_count());
}

TEST_F(TrainerTest, ExistingRunIsNeverOverwrittenWithoutResume) {
  auto t = make(recipe_config(2), "once");
  ASSERT_TRUE(t && t->run().ok());
  auto recipe = recipe_from_config(recipe_config(2), "test.toml");
  auto again = Trainer::create(*recipe, "", (root_ / "once").string(), false);
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.status().hint().find("--resume"), std::string::npos);
}

TEST_F(TrainerTest, NonFiniteStepIsSkippedAndTrainingGoesOn) {
  auto t = make(recipe_config(8), "nan");
  ASSERT_TRUE(t);
  float saved = 0;
  t->set_fault_injector([&](int64_t step, model::Transformer& m) {
    float* p = m.param_views().final_norm_w.as<float>();  // every token passes through it
    if (step == 5) saved = p[0], p[0] = std::numeric_limits<float>::quiet_NaN();
    if (step == 6) p[0] = saved;
  });
  ASSERT_TRUE(t->run().ok());
  auto s = steps_of("nan");
  EXPECT_EQ(s[5].value("skipped", ""), "nonfinite");
  EXPECT_FALSE(s[6].contains("skipped"));
  EXPECT_TRUE(std::isfinite(s[8]["loss"].get<double>()));
}

// A step that stops making progress (here the fault injector sleeps in step 3, as a rank waiting
// for a hung peer would) is reported by the stall watchdog, naming the step; the report goes to the
// handler (by default it ends the process with status 4: dist_fault_test). Steps that progress are
// not reported, and a run with train.stall_timeout_s = 0 has no watchdog.
TEST_F(TrainerTest, AStalledStepIsReportedNamingIt) {
  for (const char* timeout : {"1", "0"}) {
    config::Config c = recipe_config(4);
    ASSERT_TRUE(c.apply_override(std::string("train.stall_timeout_s=") + timeout).ok());
    auto t = make(c, std::string("stall_") + timeout);
    ASSERT_TRUE(t);
    test::StallReports stalls;
    t->set_stall_handler(stalls.handler());
    t->set_fault_injector([](int64_t step, model::Transformer&) {
      if (step == 3) std::this_thread::sleep_for(std::chrono::milliseconds(2500));
    });
    ASSERT_TRUE(t->run().ok());
    const std::vector<std::string> reports = stalls.got();
    if (std::string(timeout) == "0") {
      EXPECT_TRUE(reports.empty());
      continue;
    }
    ASSERT_EQ(reports.size(), 1u);
    EXPECT_NE(reports[0].find("since step 3 began: "), std::string::npos) << reports[0];
  }
}

TEST_F(TrainerTest, PersistentNanStopsTheRunAfterMaxBadSteps) {
  config::Config c = recipe_config(20);
  ASSERT_TRUE(c.apply_override("stability.max_bad_steps=3").ok());
  ASSERT_TRUE(c.apply_override("checkpoint.every=2").ok());
  auto t = make(c, "nan_stop");
  ASSERT_TRUE(t);
  t->set_fault_injector([](int64_t step, model::Transformer& m) {
    if (step == 5) m.param_views().final_norm_w.as<float>()[0] = std::numeric_limits<float>::quiet_NaN();
  });
  Status s = t->run();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("3 bad steps in a row"), std::string::npos) << s.message();
  EXPECT_EQ(t->step(), 7);
  // The last good checkpoint is intact.
  EXPECT_TRUE(io::verify_checkpoint((root_ / "nan_stop" / "checkpoints" / "step_00000004").string()).ok());
}

TEST_F(TrainerTest, LossSpikeIsSkippedOrRolledBack) {
  for (const char* action : {"skip", "rollback"}) {
    config::Config c = recipe_config(20);
    ASSERT_TRUE(c.apply_override(std::string("stability.spike_action=") + action).ok());
    ASSERT_TRUE(c.apply_override("checkpoint.every=5").ok());
    ASSERT_TRUE(c.apply_override("stability.loss_margin=100").ok());  // the spike detector alone, not DivergenceGuard
    const std::string run = std::string("spike_") + action;
    auto t = make(c, run);
    ASSERT_TRUE(t);
    std::vector<float> saved;
    t->set_fault_injector([&](int64_t step, model::Transformer& m) {
      float* p = m.params().as<float>();
      const int64_t n = m.params().numel();
      if (step == 15) {  // blow up every weight: a real spike in the loss
        saved.assign(p, p + n);
        for (int64_t i = 0; i < n; ++i) p[i] *= 8.0f;
        m.refresh_compute_weights();  // the bf16 GEMMs read the mirror
      }
      if (step == 16) {
        std::copy(saved.begin(), saved.end(), p);
        m.refresh_compute_weights();
      }
    });
    ASSERT_TRUE(t->run().ok()) << action;
    auto s = steps_of(run);
    EXPECT_EQ(s[15].value("skipped", ""), "spike") << action;
    EXPECT_GT(s[15]["spike_z"].get<double>(), 6.0) << action;
    EXPECT_LT(s[20]["loss"].get<double>(), s[14]["loss"].get<double>() + 0.5) << action;
  }
}

TEST_F(TrainerTest, ProfilerWritesAChromeTrace) {
  config::Config c = recipe_config(5);
  ASSERT_TRUE(c.apply_override("profile.steps=2:4").ok());
  auto t = make(c, "profile");
  ASSERT_TRUE(t && t->run().ok());
  std::ifstream in(root_ / "profile" / "trace.json");
  auto j = nlohmann::json::parse(in);
  int steps = 0, attention = 0;
  for (const auto& e : j["traceEvents"]) {
    steps += e["name"] == "train_step";
    attention += e["name"] == "attention";
  }
  EXPECT_EQ(steps, 2);
  EXPECT_EQ(attention, 2 * 2);  // two layers per step
}

TEST_F(TrainerTest, MultipleChoiceTasksAreScoredIntoMetrics) {
  const std::string shared = LMT_SHARED_DATA;
  if (!fs::exists(shared + "/eval/piqa/valid.jsonl")) GTEST_SKIP() << "shared test data not found at " << shared;
  // A dataset whose manifest names a real tokenizer (GPT-2's), so the task text can be encoded.
  const std::string dir = (root_ / "gpt2_data").string();
  test::write_gpt2_dataset(dir, shared);
  config::Config c = recipe_config(4);
  ASSERT_TRUE(c.apply_override("data.path=" + dir).ok());
  ASSERT_TRUE(c.set("eval.tasks", std::vector<std::string>{"piqa:" + shared + "/eval/piqa/valid.jsonl:4"}, "test").ok());
  ASSERT_TRUE(c.apply_override("eval.tasks_every=2").ok());
  auto t = make(c, "tasks");
  ASSERT_TRUE(t && t->run().ok());
  std::ifstream in(root_ / "tasks" / "metrics.jsonl");
  std::string line;
  std::vector<int64_t> scored_at;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    if (j.contains("eval_piqa_acc")) {
      EXPECT_EQ(j["type"], "eval");
      scored_at.push_back(j["step"].get<int64_t>());
      EXPECT_EQ(j["eval_piqa_items"], 4);
    }
  }
  EXPECT_EQ(scored_at, (std::vector<int64_t>{2, 4}));
}

// model.rope_scaling.* recipe keys reach the model (issue #16), a run trains with them, and a bad
// value is refused naming the key.
TEST_F(TrainerTest, RopeScalingKeysReachTheModel) {
  config::Config c = recipe_config(2);
  for (const char* kv : {"model.rope_scaling.type=yarn", "model.rope_scaling.factor=4",
                         "model.rope_scaling.original_max_position_embeddings=16"})
    ASSERT_TRUE(c.apply_override(kv).ok()) << kv;
  auto r = recipe_from_config(c, "test.toml");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->model.rope_scaling.type, model::RopeScalingType::kYarn);
  EXPECT_EQ(r->model.rope_scaling.factor, 4.0);
  EXPECT_EQ(r->model.rope_scaling.original_max_position_embeddings, 16);
  auto t = make(c, "yarn");
  ASSERT_TRUE(t && t->run().ok());

  ASSERT_TRUE(c.apply_override("model.rope_scaling.type=longrope").ok());
  r = recipe_from_config(c, "test.toml");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().ToString().find("rope_scaling.type"), std::string::npos) << r.status().ToString();
  EXPECT_NE(r.status().ToString().find("longrope"), std::string::npos) << r.status().ToString();
}

// model.qk_norm_full (OLMoE's QK-norm over whole q/k rows, issue #18) trains from a recipe; model.moe.*
// keys reach the model (values checked by name) and an MoE recipe trains.
TEST_F(TrainerTest, QkNormFullTrainsAndMoeKeysReachTheModel) {
  config::Config c = recipe_config(2);
  for (const char* kv : {"model.qk_norm=true", "model.qk_norm_full=true"}) ASSERT_TRUE(c.apply_override(kv).ok()) << kv;
  auto r = recipe_from_config(c, "test.toml");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->model.qk_norm_full);
  auto t = make(c, "qk_norm_full");
  ASSERT_TRUE(t && t->run().ok());

  config::Config m = recipe_config(2);
  for (const char* kv : {"model.moe.num_experts=4", "model.moe.top_k=2", "model.moe.expert_ffn=32",
                         "model.moe.router=softmax_topk", "model.moe.balance=bias_update"})
    ASSERT_TRUE(m.apply_override(kv).ok()) << kv;
  r = recipe_from_config(m, "test.toml");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->model.moe.num_experts, 4);
  EXPECT_FALSE(r->model.moe.renormalize);
  EXPECT_EQ(r->model.moe.balance, model::MoeBalance::kBiasUpdate);
  auto moe_run = make(m, "moe_keys");  // the keys reach a model that trains
  ASSERT_TRUE(moe_run && moe_run->run().ok());
  ASSERT_TRUE(m.apply_override("model.moe.top_k=5").ok());  // validated before anything else: named
  r = recipe_from_config(m, "test.toml");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("moe.top_k = 5 is out of range: it must be in [1, 4]"), std::string::npos)
      << r.status().ToString();
}

TEST_F(TrainerTest, BadTaskEntryNamesTheKey) {
  config::Config c = recipe_config(2);
  ASSERT_TRUE(c.set("eval.tasks", std::vector<std::string>{"piqa"}, "test").ok());
  auto r = recipe_from_config(c, "test.toml");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("eval.tasks"), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace lmt::train

namespace lmt::train {
namespace {

// Divergence from step 1 (issue #20): with lr = 10 the loss used to go 8.4 -> 43,098 unflagged,
// because the spike detector needs a history. The absolute guard skips those updates and the run
// stops after max_bad_steps, naming the divergence.
TEST_F(TrainerTest, DivergenceIsFlaggedFromTheFirstSteps) {
  config::Config c = recipe_config(30);
  ASSERT_TRUE(c.apply_override("optim.lr=10").ok());
  ASSERT_TRUE(c.apply_override("optim.weight_decay=0").ok());
  ASSERT_TRUE(c.apply_override("schedule.warmup_steps=0").ok());
  auto t = make(c, "diverge");
  ASSERT_TRUE(t);
  Status s = t->run();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("the run diverged"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("5 bad steps in a row"), std::string::npos) << s.message();
  EXPECT_LE(t->step(), 7);
  auto st = steps_of("diverge");
  int diverged = 0;
  for (const auto& [step, rec] : st) diverged += rec.value("skipped", "") == "diverged";
  EXPECT_EQ(diverged, 5);
}

// Rollback that keeps failing used to alternate with good steps forever and report success.
// (spike_window is 10 in these tests.)
TEST_F(TrainerTest, RollingBackAgainAndAgainStopsTheRun) {
  config::Config c = recipe_config(30);
  for (const char* kv : {"optim.lr=10", "optim.weight_decay=0", "schedule.warmup_steps=0", "stability.spike_action=rollback",
                         "checkpoint.every=1", "stability.max_bad_steps=20", "stability.max_rollbacks=3"})
    ASSERT_TRUE(c.apply_override(kv).ok()) << kv;
  auto t = make(c, "rollbacks");
  ASSERT_TRUE(t);
  Status s = t->run();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("after 3 rollbacks in the last 10 steps"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("rolling back does not help"), std::string::npos) << s.message();
}

// tinyshakespeare-like data with no val split and eval.every = 0 used to train to the end, fail the
// forced final validation and exit without a final checkpoint. Now it trains without validation;
// eval.every > 0 on such data is refused before training, with a hint that works.
TEST_F(TrainerTest, WithoutAValidationSplitTheRunTrainsAndSavesItsFinalCheckpoint) {
  test::write_markov_dataset((root_ / "noval").string(), kVocab, "trainer_test", /*with_val=*/false);
  config::Config c = recipe_config(3);
  ASSERT_TRUE(c.apply_override("data.path=" + (root_ / "noval").string()).ok());
  auto t = make(c, "noval_run");
  ASSERT_TRUE(t);
  ASSERT_TRUE(t->run().ok());
  EXPECT_TRUE(io::verify_checkpoint((root_ / "noval_run" / "checkpoints" / "step_00000003").string()).ok());
  ASSERT_TRUE(c.apply_override("eval.every=2").ok());
  auto recipe = recipe_from_config(c, "test.toml");
  ASSERT_TRUE(recipe.ok());
  auto refused = Trainer::create(*recipe, c.to_toml(), (root_ / "noval_eval").string(), false);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("has no validation split"), std::string::npos) << refused.status().ToString();
  EXPECT_NE(refused.status().hint().find("one-document input is split by tokens"), std::string::npos);
}

// The final checkpoint is written before the final validation: when that fails, the run is not lost.
TEST_F(TrainerTest, AFailingFinalValidationLeavesTheFinalCheckpointWritten) {
  fs::copy(root_ / "data", root_ / "data_copy", fs::copy_options::recursive);
  config::Config c = recipe_config(3);
  ASSERT_TRUE(c.apply_override("data.path=" + (root_ / "data_copy").string()).ok());
  auto t = make(c, "final_eval_fails");
  ASSERT_TRUE(t);
  for (const auto& e : fs::directory_iterator(root_ / "data_copy"))  // the val shards vanish mid-run
    if (e.path().filename().string().find("val") != std::string::npos && e.path().extension() != ".json")
      fs::remove(e.path());
  Status s = t->run();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("after the final checkpoint"), std::string::npos) << s.message();
  EXPECT_TRUE(io::verify_checkpoint((root_ / "final_eval_fails" / "checkpoints" / "step_00000003").string()).ok());
}

// A hostile trainer_state.json (with a manifest that matches it) used to abort with status 134 on
// an uncaught json exception; each is an error naming the file and the field now.
TEST_F(TrainerTest, AHostileTrainerStateIsAnErrorNamingTheFileAndField) {
  config::Config c = recipe_config(2);
  auto t = make(c, "hostile");
  ASSERT_TRUE(t);
  ASSERT_TRUE(t->run().ok());
  t.reset();
  const fs::path ckpt = root_ / "hostile" / "checkpoints" / "step_00000002";
  const std::string original = test::read_bytes((ckpt / "trainer_state.json").string());
  const nlohmann::json good = nlohmann::json::parse(original);
  auto with = [&](const char* key, nlohmann::json v) {
    nlohmann::json j = good;
    if (v.is_discarded()) j.erase(key);
    else j[key] = v;
    return j.dump();
  };
  const std::vector<std::pair<std::string, std::string>> cases = {
      {with("step", "two"), "'step' must be a non-negative integer"},
      {with("step", -5), "'step' must be a non-negative integer"},
      {with("loader", nlohmann::json::value_t::discarded), "'loader'"},
      {"[1, 2, 3]", "must be a JSON object"},
      {with("updates", 99), "'updates' must be at most 'step'"},
      {with("spike_window", "x"), "'spike_window' is not an array"},
  };
  for (const auto& [text, want] : cases) {
    test::write_bytes((ckpt / "trainer_state.json").string(), text);
    // Re-sign the manifest so that only the trainer state's parser can object.
    nlohmann::json m = nlohmann::json::parse(test::read_bytes((ckpt / "manifest.json").string()));
    m["files"]["trainer_state.json"] = {{"bytes", text.size()}, {"xxh64", hex64(xxh64(text.data(), text.size()))}};
    test::write_bytes((ckpt / "manifest.json").string(), m.dump(2));
    config::Config c4 = recipe_config(4);
    auto recipe = recipe_from_config(c4, "test.toml");
    ASSERT_TRUE(recipe.ok());
    auto r = Trainer::create(*recipe, c4.to_toml(), (root_ / "hostile").string(), /*resume=*/true);
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_NE(r.status().message().find("trainer_state.json"), std::string::npos) << r.status().ToString();
    EXPECT_NE(r.status().message().find(want), std::string::npos) << r.status().ToString();
  }
}

}  // namespace
}  // namespace lmt::train
