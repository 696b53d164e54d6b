// Optimizer behaviour beyond the golden numbers: which tensors decay or get Muon, sharded steps
// equal whole steps bit for bit, state covers every element and restores, validation names keys.
#include "lmt/optim/optimizer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

#include "lmt/base/rng.h"
#include "lmt/kernels/cpu/cpu_backend.h"
#include "lmt/kernels/registry.h"
#include "model/model_test_util.h"

namespace lmt::optim {
namespace {

using model::ParamInfo;
using model::ParamLayout;
using model::ParamRole;

// A tiny GPT-2-style config: every role (embedding, position, matrix, norm, bias) appears.
model::ModelConfig gpt2_tiny() {
  model::ModelConfig c = *model::preset("tiny");
  c.family = model::NamingFamily::kGpt2;
  c.vocab_size = 37;
  c.max_seq_len = 16;
  c.n_layers = 2;
  c.d_model = 16;
  c.n_heads = 4;
  c.n_kv_heads = 4;
  c.head_dim = 4;
  c.ffn_hidden = 40;  // 40·16 = 640: c_fc ends on an alignment boundary, c_proj's bias does not
  c.positions = model::PositionKind::kLearned;
  c.norm = model::NormKind::kLayerNorm;
  c.ffn = model::FfnKind::kMlp;
  c.attn_bias = c.attn_out_bias = c.mlp_bias = true;
  return c;
}

// Llama-style with QK-norm, biases and an untied LM head: tall, wide and square Muon matrices,
// and fused bias groups whose later members start unaligned (k|v after q: 8 each; up after gate: 24).
model::ModelConfig llama_tiny() {
  model::ModelConfig c = model::testing::tiny_test_config();
  c.n_kv_heads = 1;
  c.head_dim = 8;
  c.qk_norm = true;
  c.attn_bias = true;
  c.mlp_bias = true;
  c.tied_embeddings = false;
  return c;
}

// Odd widths: fused Muon matrices (q|k|v, gate|up) meet at unaligned offsets, so some matrix
// boundaries are not legal cuts and balanced_cuts must step over whole runs of matrices.
model::ModelConfig odd_tiny() {
  model::ModelConfig c = llama_tiny();
  c.d_model = 10;
  c.n_heads = 2;
  c.head_dim = 5;
  c.ffn_hidden = 13;
  return c;
}

OptimizerConfig muon_config() {
  OptimizerConfig c;
  c.name = "muon";
  c.lr = 1e-2f;
  c.muon_weight_decay = 0.1f;
  return c;
}

struct Buffers {
  Tensor params, grads, mirror;
  explicit Buffers(const ParamLayout& layout)
      : params(Shape{layout.total_numel()}, DType::kF32),
        grads(Shape{layout.total_numel()}, DType::kF32),
        mirror(Shape{layout.total_numel()}, DType::kBF16) {
    model::init_params(layout, params.as<float>(), 3);
  }
  // Random gradients on every element of every tensor (padding rows included: all must be owned).
  void random_grads(const ParamLayout& layout, uint64_t seed) {
    Rng rng(seed);
    for (const ParamInfo& p : layout.params())
      for (int64_t i = 0; i < p.numel; ++i) grads.as<float>()[p.offset + i] = static_cast<float>(rng.normal());
  }
};

bool same_bits(const TensorView& a, const TensorView& b) {
  return a.bytes() == b.bytes() && std::memcmp(a.data(), b.data(), a.bytes()) == 0;
}

std::unique_ptr<Optimizer> make(const OptimizerConfig& c, const ParamLayout& layout,
                                kernels::Backend& b = kernels::cpu_backend()) {
  auto opt = Optimizer::create(c, layout, b);
  LMT_CHECK(opt.ok()) << opt.status().ToString();
  return std::move(opt).value();
}

// Zero gradients leave only decoupled decay: w ← w·(1 − lr·wd) (AdamW's update is 0/(0+eps)).
// So a tensor moved iff it decays, and by how much tells which decay it got.
std::map<std::string, double> decay_ratios(const OptimizerConfig& c, const ParamLayout& layout) {
  Buffers buf(layout);
  std::fill_n(buf.params.as<float>(), layout.total_numel(), 1.0f);  // biases start at 0 otherwise
  std::vector<float> before(buf.params.as<float>(), buf.params.as<float>() + layout.total_numel());
  make(c, layout)->step(buf.params, buf.grads, TensorView(), 1.0f, 1.0f, 1);
  std::map<std::string, double> ratio;
  for (const ParamInfo& p : layout.params()) {
    const int64_t i = p.offset;
    ratio[p.name] = buf.params.as<float>()[i] / before[i];
  }
  return ratio;
}

TEST(Optimizer, AdamWDecaysMatricesOnlyUnlessEmbeddingsAsked) {
  const ParamLayout layout(gpt2_tiny());
  OptimizerConfig c;
  c.lr = 0.5f;
  c.weight_decay = 0.2f;  // decayed tensors shrink by 0.9
  for (bool embeddings : {false, true}) {
    c.decay_embeddings = embeddings;
    const auto ratio = decay_ratios(c, layout);
    for (const ParamInfo& p : layout.params()) {
      const bool decays = p.role == ParamRole::kMatrix ||
                          (embeddings && (p.role == ParamRole::kEmbedding || p.role == ParamRole::kPosition ||
                                          p.role == ParamRole::kLmHead));
      EXPECT_NEAR(ratio.at(p.name), decays ? 0.9 : 1.0, 1e-6) << p.name << " decay_embeddings=" << embeddings;
    }
  }
}

TEST(Optimizer, MuonTakesMatricesWithItsOwnDecayAndAdamWTheRest) {
  const ParamLayout layout(llama_tiny());
  OptimizerConfig c = muon_config();
  c.lr = 0.5f;
  c.weight_decay = 0.2f;  // AdamW tensors: 0.9 when decayed
  c.muon_lr = 0.25f;
  c.muon_weight_decay = 0.8f;  // Muon matrices: 0.8
  c.decay_embeddings = true;
  const auto ratio = decay_ratios(c, layout);
  for (const ParamInfo& p : layout.params()) {
    const double want = p.role == ParamRole::kMatrix                                 ? 0.8
                        : (p.role == ParamRole::kNorm || p.role == ParamRole::kBias) ? 1.0
                                                                                     : 0.9;
    EXPECT_NEAR(ratio.at(p.name), want, 1e-6) << p.name;
  }
}

// optim.muon_ns_dtype = "bf16" runs in f32 without Gram restarts on a backend that widens bf16 GEMM
// operands to f32 (faster there, and more exact: muon_test), and in bf16 where they are native.
TEST(Optimizer, MuonBf16RunsInF32WhereBf16GemmsAreWidened) {
  // A cpu backend told to widen (as where the CPU's bf16 unit is slower than its fp32 FMAs).
  kernels::CpuBackend widening;
  widening.set_bf16_gemms(kernels::CpuBf16Gemms::kWidened);
  EXPECT_FALSE(widening.native_bf16_gemms());
  const ParamLayout layout(llama_tiny());
  OptimizerConfig c = muon_config();
  auto precision = [&](kernels::Backend& b) { return make(c, layout, b)->muon_precision(); };
  EXPECT_EQ(precision(widening), NsPrecision::kF32NoRestart);
  EXPECT_EQ(precision(kernels::ref_backend()), NsPrecision::kBF16);
  c.muon_ns_dtype = "fp32";
  EXPECT_EQ(precision(widening), NsPrecision::kF32);
  EXPECT_EQ(precision(kernels::ref_backend()), NsPrecision::kF32);
  EXPECT_FALSE(make(OptimizerConfig(), layout, widening)->muon_precision().has_value());
  // The cpu backend answers for its CPU: oneDNN 2.6 has bf16 matmuls from AVX-512 on, none on AVX2;
  // where it has them, the process's choice decides (kernels::cpu_bf16_gemms(): native in this test
  // binary unless LMT_CPU_BF16_GEMM says otherwise).
  const std::string isa = kernels::cpu_gemm_isa();
  if (isa.rfind("avx512_core", 0) == 0) {
    EXPECT_EQ(kernels::cpu_backend().native_bf16_gemms(), kernels::cpu_bf16_gemms() == kernels::CpuBf16Gemms::kNative)
        << isa;
  } else if (isa == "avx2") {
    EXPECT_FALSE(kernels::cpu_backend().native_bf16_gemms()) << isa;
  }
}

// One whole step versus the same step done shard by shard at every boundary, and versus two
// halves at balanced_cuts(2): identical bits in params, mirror and state (2 steps: state matters).
TEST(Optimizer, ShardedStepsEqualAWholeStepBitForBit) {
  for (const auto& cfg : {OptimizerConfig(), muon_config()}) {
    for (const model::ModelConfig& mc : {gpt2_tiny(), llama_tiny(), odd_tiny()}) {
      SCOPED_TRACE(cfg.name + " on " + std::string(model::family_name(mc.family)) + " d_model " +
                   std::to_string(mc.d_model));
      const ParamLayout layout(mc);
      Buffers whole(layout), halves(layout), pieces(layout);
      auto opt_whole = make(cfg, layout), opt_halves = make(cfg, layout), opt_pieces = make(cfg, layout);
      const std::vector<int64_t> cuts = balanced_cuts(cfg, layout, 2);
      ASSERT_EQ(cuts.size(), 3u);
      EXPECT_GT(cuts[1], 0);
      EXPECT_LT(cuts[1], layout.total_numel());
      const std::vector<int64_t> bounds = opt_pieces->shard_boundaries();
      for (int64_t s = 1; s <= 2; ++s) {
        for (Buffers* b : {&whole, &halves, &pieces}) b->random_grads(layout, 10 + s);
        opt_whole->step(whole.params, whole.grads, whole.mirror, 0.7f, 0.9f, s);
        opt_halves->step(halves.params, halves.grads, halves.mirror, 0.7f, 0.9f, s, cuts[1], cuts[2]);
        opt_halves->step(halves.params, halves.grads, halves.mirror, 0.7f, 0.9f, s, cuts[0], cuts[1]);
        for (size_t k = 0; k + 1 < bounds.size(); ++k)
          opt_pieces->step(pieces.params, pieces.grads, pieces.mirror, 0.7f, 0.9f, s, bounds[k], bounds[k + 1]);
      }
      for (const Buffers* b : {&halves, &pieces}) {
        EXPECT_TRUE(same_bits(whole.params, b->params));
        EXPECT_TRUE(same_bits(whole.mirror, b->mirror));
      }
      const auto sw = opt_whole->state(), sh = opt_halves->state(), sp = opt_pieces->state();
      for (size_t k = 0; k < sw.size(); ++k) {
        EXPECT_TRUE(same_bits(sw[k].second, sh[k].second)) << sw[k].first;
        EXPECT_TRUE(same_bits(sw[k].second, sp[k].second)) << sw[k].first;
      }
    }
  }
}

// ZeRO form: two optimizers owning half the state each reproduce one whole optimizer, and their
// states laid end to end are the whole state (what resharding N ranks to M relies on).
TEST(Optimizer, StateRangesReproduceTheWholeOptimizer) {
  for (const auto& cfg : {OptimizerConfig(), muon_config()}) {
    SCOPED_TRACE(cfg.name);
    const ParamLayout layout(llama_tiny());
    const std::vector<int64_t> cuts = balanced_cuts(cfg, layout, 3);
    Buffers whole(layout), sharded(layout);
    auto opt_whole = make(cfg, layout);
    std::vector<std::unique_ptr<Optimizer>> ranks;
    for (int r = 0; r < 3; ++r) {
      auto o = Optimizer::create(cfg, layout, kernels::cpu_backend(), cuts[r], cuts[r + 1]);
      ASSERT_TRUE(o.ok()) << o.status().ToString();
      EXPECT_EQ((*o)->state_begin(), cuts[r]);
      EXPECT_EQ((*o)->state()[0].second.numel(), cuts[r + 1] - cuts[r]);
      ranks.push_back(std::move(o).value());
    }
    for (int64_t s = 1; s <= 3; ++s) {
      whole.random_grads(layout, 20 + s);
      sharded.random_grads(layout, 20 + s);
      opt_whole->step(whole.params, whole.grads, whole.mirror, 1.0f, 1.0f, s);
      for (auto& r : ranks) r->step(sharded.params, sharded.grads, sharded.mirror, 1.0f, 1.0f, s);
    }
    EXPECT_TRUE(same_bits(whole.params, sharded.params));
    EXPECT_TRUE(same_bits(whole.mirror, sharded.mirror));
    const auto sw = opt_whole->state();
    for (size_t k = 0; k < sw.size(); ++k) {
      std::vector<float> joined;
      for (auto& r : ranks) {
        const TensorView v = r->state()[k].second;
        joined.insert(joined.end(), v.as<float>(), v.as<float>() + v.numel());
      }
      ASSERT_EQ(static_cast<int64_t>(joined.size()), sw[k].second.numel());
      EXPECT_EQ(std::memcmp(joined.data(), sw[k].second.data(), sw[k].second.bytes()), 0) << sw[k].first;
    }
  }
}

// Every element of every tensor is owned by exactly one group's state; state views are disjoint
// and restoring them into a fresh optimizer continues the run bit for bit.
TEST(Optimizer, StateCoversEveryElementAndRestores) {
  for (const auto& cfg : {OptimizerConfig(), muon_config()}) {
    SCOPED_TRACE(cfg.name);
    const ParamLayout layout(llama_tiny());
    Buffers a(layout), b(layout);
    auto opt = make(cfg, layout);
    a.random_grads(layout, 1);
    opt->step(a.params, a.grads, a.mirror, 1.0f, 1.0f, 1);

    std::map<std::string, const float*> s;
    const auto state = opt->state();
    const bool muon = cfg.name == "muon";
    ASSERT_EQ(state.size(), muon ? 3u : 2u);
    for (const auto& [name, view] : state) {
      EXPECT_EQ(view.numel(), layout.total_numel()) << name;
      EXPECT_EQ(view.dtype(), DType::kF32) << name;
      s[name] = view.as<float>();
    }
    for (const auto& [n1, v1] : state)
      for (const auto& [n2, v2] : state)
        if (n1 != n2) {
          const char *b1 = static_cast<const char*>(v1.data()), *b2 = static_cast<const char*>(v2.data());
          EXPECT_TRUE(b1 + v1.bytes() <= b2 || b2 + v2.bytes() <= b1) << n1 << " overlaps " << n2;
        }
    for (const ParamInfo& p : layout.params()) {
      const bool in_muon = muon && p.role == ParamRole::kMatrix;
      for (int64_t i = p.offset; i < p.offset + p.numel; ++i) {
        ASSERT_EQ(s.at("adam.m")[i] != 0.0f, !in_muon) << p.name << " element " << i - p.offset;
        ASSERT_EQ(s.at("adam.v")[i] != 0.0f, !in_muon) << p.name << " element " << i - p.offset;
        if (muon) {
          ASSERT_EQ(s.at("muon.momentum")[i] != 0.0f, in_muon) << p.name << " element " << i - p.offset;
        }
      }
    }

    // Resume: params and state copied into a fresh optimizer; one more step on both.
    auto resumed = make(cfg, layout);
    std::memcpy(b.params.view().data(), a.params.view().data(), a.params.bytes());
    const auto fresh = resumed->state();
    for (size_t k = 0; k < state.size(); ++k)
      std::memcpy(fresh[k].second.data(), state[k].second.data(), state[k].second.bytes());
    a.random_grads(layout, 2);
    b.random_grads(layout, 2);
    opt->step(a.params, a.grads, a.mirror, 0.5f, 1.0f, 2);
    resumed->step(b.params, b.grads, b.mirror, 0.5f, 1.0f, 2);
    EXPECT_TRUE(same_bits(a.params, b.params));
    for (size_t k = 0; k < state.size(); ++k) EXPECT_TRUE(same_bits(state[k].second, fresh[k].second));
  }
}

TEST(Optimizer, GradientsAreLeftUntouched) {
  for (const auto& cfg : {OptimizerConfig(), muon_config()}) {
    const ParamLayout layout(llama_tiny());
    Buffers buf(layout);
    buf.random_grads(layout, 4);
    const std::vector<float> before(buf.grads.as<float>(), buf.grads.as<float>() + layout.total_numel());
    make(cfg, layout)->step(buf.params, buf.grads, buf.mirror, 1.0f, 0.5f, 1);
    EXPECT_EQ(std::memcmp(before.data(), buf.grads.view().data(), buf.grads.bytes()), 0) << cfg.name;
  }
}

TEST(Optimizer, CutPoints) {
  const ParamLayout layout(llama_tiny());
  const OptimizerConfig adamw, muon = muon_config();
  const ParamInfo* q = layout.find("model.layers.0.self_attn.q_proj.weight");
  ASSERT_NE(q, nullptr);
  const int64_t inside = q->offset + 2 * kCutAlignment;
  EXPECT_TRUE(is_legal_cut(adamw, layout, inside));
  EXPECT_FALSE(is_legal_cut(muon, layout, inside));
  EXPECT_TRUE(is_legal_cut(muon, layout, q->offset));
  EXPECT_FALSE(is_legal_cut(adamw, layout, q->offset + 1));  // not aligned
  EXPECT_FALSE(is_legal_cut(adamw, layout, -16));
  EXPECT_FALSE(is_legal_cut(adamw, layout, layout.total_numel() + 16));

  for (const auto& cfg : {adamw, muon}) {
    auto opt = make(cfg, layout);
    const auto bounds = opt->shard_boundaries();
    EXPECT_EQ(bounds.front(), 0);
    EXPECT_EQ(bounds.back(), layout.total_numel());
    for (const ParamInfo& p : layout.params()) {
      const bool listed = std::find(bounds.begin(), bounds.end(), p.offset) != bounds.end();
      EXPECT_EQ(listed, p.offset % kCutAlignment == 0) << p.name << " at " << p.offset;
    }
    const ParamInfo* v_bias = layout.find("model.layers.0.self_attn.v_proj.bias");
    ASSERT_NE(v_bias, nullptr);
    EXPECT_NE(v_bias->offset % kCutAlignment, 0) << "the config should exercise an unaligned fused member";
    for (size_t k = 0; k < bounds.size(); ++k) {
      EXPECT_TRUE(opt->is_legal_cut(bounds[k])) << bounds[k];
      if (k > 0) {
        EXPECT_LT(bounds[k - 1], bounds[k]);
      }
    }
    EXPECT_EQ(opt->is_legal_cut(inside), cfg.name == "adamw");
    for (int parts : {1, 2, 3, 7, 64}) {
      const auto cuts = balanced_cuts(cfg, layout, parts);
      ASSERT_EQ(cuts.size(), static_cast<size_t>(parts) + 1);
      EXPECT_EQ(cuts.front(), 0);
      EXPECT_EQ(cuts.back(), layout.total_numel());
      for (size_t k = 0; k < cuts.size(); ++k) {
        EXPECT_TRUE(is_legal_cut(cfg, layout, cuts[k])) << parts << " parts, cut " << cuts[k];
        if (k > 0) {
          EXPECT_LE(cuts[k - 1], cuts[k]);
        }
      }
    }
  }
  // Unaligned matrix boundaries: every balanced cut is still legal, over many part counts.
  const ParamLayout odd(odd_tiny());
  const ParamInfo* k = odd.find("model.layers.0.self_attn.k_proj.weight");
  ASSERT_NE(k->offset % kCutAlignment, 0);
  EXPECT_FALSE(is_legal_cut(muon, odd, k->offset / kCutAlignment * kCutAlignment + kCutAlignment));
  for (int parts = 1; parts <= 80; ++parts) {
    const auto cuts = balanced_cuts(muon, odd, parts);
    for (size_t j = 0; j < cuts.size(); ++j) {
      ASSERT_TRUE(is_legal_cut(muon, odd, cuts[j])) << parts << " parts, cut " << cuts[j];
      if (j > 0) {
        ASSERT_LE(cuts[j - 1], cuts[j]);
      }
    }
  }

  auto bad = Optimizer::create(muon, layout, kernels::cpu_backend(), 0, inside);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find(std::to_string(inside)), std::string::npos) << bad.status().message();
}

TEST(OptimizerDeathTest, StepRejectsAShardThatCutsAMuonMatrix) {
  const ParamLayout layout(llama_tiny());
  Buffers buf(layout);
  auto opt = make(muon_config(), layout);
  const int64_t inside = layout.find("model.layers.0.mlp.up_proj.weight")->offset + kCutAlignment;
  EXPECT_DEATH(opt->step(buf.params, buf.grads, TensorView(), 1.0f, 1.0f, 1, 0, inside), "legal cut points");
}

// Each bad value is reported with its key; the hint says what to do.
TEST(Optimizer, ValidationNamesTheKey) {
  auto message = [](auto mutate) {
    OptimizerConfig c;
    mutate(c);
    const Status s = validate(c);
    EXPECT_FALSE(s.ok());
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_FALSE(s.hint().empty()) << s.message();
    return s.message() + " | " + s.hint();
  };
  EXPECT_TRUE(validate(OptimizerConfig()).ok());
  EXPECT_TRUE(validate(muon_config()).ok());
  EXPECT_EQ(validate([] {
              OptimizerConfig c;
              c.beta2 = 1.5f;
              return c;
            }())
                .message(),
            "optim.beta2 = 1.5 must be in [0, 1)");
  EXPECT_NE(message([](auto& c) { c.name = "sgd"; }).find("optim.name = 'sgd'"), std::string::npos);
  EXPECT_NE(message([](auto& c) { c.name = "sgd"; }).find("adamw, muon"), std::string::npos);
  EXPECT_NE(message([](auto& c) { c.lr = 0; }).find("optim.lr = 0 must be > 0"), std::string::npos);
  EXPECT_NE(message([](auto& c) { c.lr = NAN; }).find("optim.lr = nan"), std::string::npos);
  EXPECT_NE(message([](auto& c) { c.beta1 = -0.1f; }).find("optim.beta1 = -0.1"), std::string::npos);
  EXPECT_NE(message([](auto& c) { c.eps = 0; }).find("optim.eps"), std::string::npos);
  EXPECT_NE(message([](auto& c) { c.weight_decay = -1; }).find("optim.weight_decay = -1"), std::string::npos);
  EXPECT_NE(message([](auto& c) { c.muon_lr = -1; }).find("optim.muon_lr"), std::string::npos);
  EXPECT_NE(message([](auto& c) { c.muon_momentum = 1; }).find("optim.muon_momentum = 1 must be in [0, 1)"),
            std::string::npos);
  EXPECT_NE(message([](auto& c) { c.muon_ns_steps = 0; }).find("optim.muon_ns_steps = 0"), std::string::npos);
  EXPECT_NE(message([](auto& c) { c.muon_ns_dtype = "fp16"; }).find("optim.muon_ns_dtype = 'fp16'"),
            std::string::npos);
  EXPECT_NE(message([](auto& c) { c.muon_ns_method = "fast"; }).find("optim.muon_ns_method = 'fast'"),
            std::string::npos);
  EXPECT_NE(message([](auto& c) { c.muon_weight_decay = -2; }).find("optim.muon_weight_decay"), std::string::npos);
  EXPECT_NE(message([](auto& c) {
              c.lr = 2;
              c.weight_decay = 0.6f;
            }).find("optim.lr · optim.weight_decay"),
            std::string::npos);
  auto opt = Optimizer::create(
      [] {
        OptimizerConfig c;
        c.beta2 = 1.5f;
        return c;
      }(),
      ParamLayout(llama_tiny()), kernels::cpu_backend());
  ASSERT_FALSE(opt.ok());
  EXPECT_NE(opt.status().message().find("optim.beta2"), std::string::npos);
}

}  // namespace
}  // namespace lmt::optim
