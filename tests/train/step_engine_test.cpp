// StepEngine (train/step_engine.h) against the step protocol it replaced, written out here by hand
// (zero_grads; forward with loss scale 1/accum and backward per micro-batch; the global gradient
// norm; the optimizer's update with the clip factor): one process, AdamW and Muon, one and three
// micro-batches, fp32 and bf16. Losses, norms and parameters must be bitwise equal, since the engine
// only moved that code. Also: gradients without an update leave the weights alone, a non-finite
// loss is reported as such, and a failing micro-batch source ends the step with its error.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "lmt/base/rng.h"
#include "lmt/dist/communicator.h"
#include "lmt/kernels/registry.h"
#include "lmt/model/config.h"
#include "lmt/optim/gradients.h"
#include "lmt/train/step_engine.h"

namespace lmt::train {
namespace {

constexpr int64_t kB = 2, kT = 16;

model::ModelConfig small_config() {
  model::ModelConfig c = *model::preset("tiny");
  c.vocab_size = 64;
  c.max_seq_len = 32;
  c.n_layers = 2;
  c.d_model = 32;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 8;
  c.ffn_hidden = 64;
  return c;
}

// A fixed list of random micro-batches, handed out in turn; counts the calls.
class Batches final : public MicroBatchSource {
 public:
  explicit Batches(int n) {
    Rng rng(11);
    for (int i = 0; i < n; ++i) {
      data::Batch b;
      b.B = kB;
      b.T = kT;
      for (int64_t j = 0; j < kB * kT; ++j) {
        b.tokens.push_back(static_cast<int32_t>(rng.below(64)));
        b.targets.push_back(static_cast<int32_t>(rng.below(64)));
      }
      batches_.push_back(std::move(b));
    }
  }
  StatusOr<const data::Batch*> next() override {
    if (fail_) return DataLoss("shard 3 is damaged");
    return &batches_[static_cast<size_t>(calls_++) % batches_.size()];
  }
  const data::Batch& at(int64_t i) const { return batches_[static_cast<size_t>(i) % batches_.size()]; }
  int64_t calls_ = 0;
  bool fail_ = false;

 private:
  std::vector<data::Batch> batches_;
};

struct Case {
  const char* optimizer;
  int64_t accum;
  DType compute;
};

class StepEngineMatchesTheProtocol : public ::testing::TestWithParam<Case> {};

TEST_P(StepEngineMatchesTheProtocol, LossesNormsAndParametersAreBitwiseEqual) {
  const Case c = GetParam();
  const model::ModelConfig config = small_config();
  model::RunOptions ro;
  ro.compute = c.compute;
  model::Transformer engine_model(config, kernels::cpu_backend()), hand_model(config, kernels::cpu_backend());
  for (auto* m : {&engine_model, &hand_model}) {
    m->init(5);
    m->prepare(kB, kT, ro);
  }
  optim::OptimizerConfig oc;
  oc.name = c.optimizer;
  oc.lr = 3e-3f;
  dist::SoloCommunicator solo;
  DataParallel dp(solo, engine_model.layout(), oc, /*zero=*/0, /*bucket_bytes=*/1 << 20);
  StepEngineConfig ec;
  ec.grad_clip = 0.5f;  // small enough to clip: the clip factor is exercised
  auto engine = StepEngine::create(engine_model, dp, oc, ec);
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  auto hand_opt = optim::Optimizer::create(oc, hand_model.layout(), hand_model.backend());
  ASSERT_TRUE(hand_opt.ok());

  Batches source(5), hand_source(5);
  StepOptions so;
  so.accum = c.accum;
  int64_t hand_next = 0;
  for (int64_t s = 1; s <= 4; ++s) {
    const float lr_mult = 0.25f * static_cast<float>(s);
    StepResult r;
    ASSERT_TRUE((*engine)->step(source, so, lr_mult, s, &r).ok());
    EXPECT_EQ(source.calls_, s * c.accum) << "one micro-batch per accumulation step";
    EXPECT_TRUE(r.updated);
    EXPECT_TRUE(r.finite);

    // The protocol by hand.
    hand_model.zero_grads();
    double loss = 0;
    for (int64_t k = 0; k < c.accum; ++k) {
      const data::Batch& b = hand_source.at(hand_next++);
      loss += hand_model.forward(b.tokens.data(), b.targets.data(), nullptr, true, 1.0f / static_cast<float>(c.accum)) /
              static_cast<double>(c.accum);
      hand_model.backward();
    }
    const double norm = optim::global_grad_norm(hand_model.backend(), hand_model.grads());
    const float clip = optim::clip_factor(norm, ec.grad_clip);
    (*hand_opt)->step(hand_model.params(), hand_model.grads(), hand_model.compute_mirror(), lr_mult, clip, s);

    EXPECT_EQ(r.loss, loss) << "step " << s;
    EXPECT_EQ(r.grad_norm, norm) << "step " << s;
    EXPECT_EQ(r.clip_factor, clip) << "step " << s;
    EXPECT_LT(clip, 1.0f) << "step " << s << ": the test meant to clip";
    ASSERT_EQ(std::memcmp(engine_model.params().data(), hand_model.params().data(), engine_model.params().bytes()), 0)
        << "parameters differ after step " << s;
    if (c.compute == DType::kBF16) {
      ASSERT_EQ(std::memcmp(engine_model.compute_mirror().data(), hand_model.compute_mirror().data(),
                            engine_model.compute_mirror().bytes()), 0)
          << "bf16 mirror differs after step " << s;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, StepEngineMatchesTheProtocol,
                         ::testing::Values(Case{"adamw", 1, DType::kF32}, Case{"adamw", 3, DType::kF32},
                                           Case{"muon", 3, DType::kF32}, Case{"adamw", 2, DType::kBF16}),
                         [](const ::testing::TestParamInfo<Case>& i) {
                           return std::string(i.param.optimizer) + "_accum" + std::to_string(i.param.accum) +
                                  (i.param.compute == DType::kBF16 ? "_bf16" : "_fp32");
                         });

struct Fixture {
  model::Transformer model{small_config(), kernels::cpu_backend()};
  optim::OptimizerConfig oc;
  dist::SoloCommunicator solo;
  std::unique_ptr<DataParallel> dp;
  std::unique_ptr<StepEngine> engine;
  Fixture() {
    model.init(5);
    model::RunOptions ro;
    ro.compute = DType::kF32;
    model.prepare(kB, kT, ro);
    dp = std::make_unique<DataParallel>(solo, model.layout(), oc, 0, 1 << 20);
    auto e = StepEngine::create(model, *dp, oc, StepEngineConfig());
    EXPECT_TRUE(e.ok());
    if (e.ok()) engine = std::move(*e);
  }
  std::vector<float> params() const {
    const float* p = model.params().as<float>();
    return std::vector<float>(p, p + model.params().numel());
  }
};

TEST(StepEngineTest, GradientsWithoutAnUpdateLeaveTheWeightsAlone) {
  Fixture f;
  ASSERT_TRUE(f.engine);
  Batches source(2);
  const std::vector<float> before = f.params();
  StepOptions so;
  so.accum = 2;
  StepResult r;
  ASSERT_TRUE(f.engine->compute_gradients(source, so, &r).ok());
  EXPECT_FALSE(r.updated);
  EXPECT_TRUE(r.finite);
  EXPECT_GT(r.grad_norm, 0.0);
  EXPECT_NEAR(r.loss, std::log(64.0), 0.5) << "a fresh model predicts about uniformly";
  EXPECT_EQ(f.params(), before);
  ASSERT_TRUE(f.engine->apply_update(1.0f, 1, &r).ok());
  EXPECT_TRUE(r.updated);
  EXPECT_NE(f.params(), before);
}

TEST(StepEngineTest, NonFiniteLossIsReportedNotHidden) {
  Fixture f;
  ASSERT_TRUE(f.engine);
  float* p = f.model.params().as<float>();
  for (int64_t i = 0; i < f.model.params().numel(); ++i) p[i] = std::numeric_limits<float>::quiet_NaN();
  f.model.refresh_compute_weights();
  Batches source(1);
  StepResult r;
  ASSERT_TRUE(f.engine->compute_gradients(source, StepOptions(), &r).ok());
  EXPECT_FALSE(r.finite);
  EXPECT_FALSE(std::isfinite(r.loss));
}

TEST(StepEngineTest, AFailingSourceEndsTheStepWithItsError) {
  Fixture f;
  ASSERT_TRUE(f.engine);
  Batches source(1);
  source.fail_ = true;
  StepResult r;
  const std::vector<float> before = f.params();
  Status s = f.engine->step(source, StepOptions(), 1.0f, 1, &r);
  EXPECT_EQ(s.code(), StatusCode::kDataLoss);
  EXPECT_NE(s.ToString().find("shard 3"), std::string::npos) << s.ToString();
  EXPECT_FALSE(r.updated);
  EXPECT_EQ(f.params(), before);
}

}  // namespace
}  // namespace lmt::train
