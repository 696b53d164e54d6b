// The MoE FFN in the model: parameter layout (hand count, HF names, contiguity), KV-cache decode
// equals the full forward, bias update direction, bf16 training runs, capacity drops.
#include <gtest/gtest.h>

#include <cmath>
#include <span>
#include <vector>

#include "lmt/base/rng.h"
#include "lmt/eval/decode.h"
#include "lmt/kernels/registry.h"
#include "lmt/model/transformer.h"

namespace lmt::model {
namespace {

// vocab 37, C 8, 3 layers (layer 1 MoE with every = 2), E 4, K 2, He 6, one shared expert.
ModelConfig small_moe(int64_t shared = 1, int64_t every = 2) {
  ModelConfig c = *preset("tiny");
  c.vocab_size = 37;
  c.max_seq_len = 32;
  c.n_layers = 3;
  c.d_model = 8;
  c.n_heads = 2;
  c.n_kv_heads = 1;
  c.head_dim = 4;
  c.ffn_hidden = 10;
  c.ffn = FfnKind::kGlu;
  c.norm = NormKind::kRmsNorm;
  c.positions = PositionKind::kRope;
  c.qk_norm = false;
  c.attn_bias = c.attn_out_bias = c.mlp_bias = false;
  c.tied_embeddings = true;
  c.init_std = 0.3f;
  c.moe.num_experts = 4;
  c.moe.top_k = 2;
  c.moe.expert_ffn = 6;
  c.moe.shared_experts = shared;
  c.moe.every = every;
  return c;
}

TEST(MoeLayout, HandCountNamesAndContiguity) {
  const ModelConfig c = small_moe();
  ASSERT_TRUE(c.validate().ok()) << c.validate().ToString();
  const ParamLayout layout(c);
  // Hand count (HF shapes): embeddings 37·8 = 296; per layer attention: 2 norms 16 + q 8·8 + k 4·8 +
  // v 4·8 + o 8·8 = 208; dense FFN (layers 0, 2): 3·10·8 = 240; MoE FFN (layer 1): router 4·8 = 32,
  // experts 4·3·6·8 = 576, shared 3·6·8 = 144; final norm 8.
  const int64_t want = 296 + 3 * 208 + 2 * 240 + (32 + 576 + 144) + 8;
  int64_t got = 0;
  for (const ParamInfo& p : layout.params()) got += p.hf_shape.numel();
  EXPECT_EQ(got, want);

  auto find = [&](const std::string& n) {
    const ParamInfo* p = layout.find(n);
    EXPECT_NE(p, nullptr) << n;
    return p;
  };
  EXPECT_NE(layout.find("model.layers.0.mlp.gate_proj.weight"), nullptr);
  EXPECT_EQ(layout.find("model.layers.1.mlp.gate_proj.weight"), nullptr);
  EXPECT_EQ(find("model.layers.1.mlp.gate.weight")->shape, (Shape{4, 8}));
  EXPECT_EQ(find("model.layers.1.mlp.experts.3.gate_proj.weight")->shape, (Shape{6, 8}));
  EXPECT_EQ(find("model.layers.1.mlp.experts.3.down_proj.weight")->shape, (Shape{8, 6}));
  EXPECT_EQ(find("model.layers.1.mlp.shared_expert.up_proj.weight")->shape, (Shape{6, 8}));
  EXPECT_EQ(find("model.layers.1.mlp.shared_expert.down_proj.weight")->shape, (Shape{8, 6}));
  EXPECT_EQ(layout.find("model.layers.1.mlp.shared_expert_gate.weight"), nullptr);  // ungated

  // [E, 2He, C] and [E, C, He] views: expert e's gate|up rows and down matrix at a fixed stride.
  const int64_t g0 = find("model.layers.1.mlp.experts.0.gate_proj.weight")->offset;
  for (int64_t e = 0; e < 4; ++e) {
    const std::string x = "model.layers.1.mlp.experts." + std::to_string(e) + ".";
    EXPECT_EQ(find(x + "gate_proj.weight")->offset, g0 + e * 2 * 6 * 8) << e;
    EXPECT_EQ(find(x + "up_proj.weight")->offset, g0 + e * 2 * 6 * 8 + 6 * 8) << e;
  }
  const int64_t d0 = find("model.layers.1.mlp.experts.0.down_proj.weight")->offset;
  for (int64_t e = 1; e < 4; ++e)
    EXPECT_EQ(find("model.layers.1.mlp.experts." + std::to_string(e) + ".down_proj.weight")->offset, d0 + e * 8 * 6);
  std::vector<float> buf(static_cast<size_t>(layout.total_numel()));
  const ModelViews v = layout.views(buf.data(), DType::kF32);
  EXPECT_EQ(v.blocks[1].experts_up_w.shape(), (Shape{4, 12, 8}));
  EXPECT_EQ(v.blocks[1].experts_up_w.data(), buf.data() + g0);
  EXPECT_EQ(v.blocks[1].experts_down_w.shape(), (Shape{4, 8, 6}));
  EXPECT_EQ(v.blocks[1].experts_down_w.data(), buf.data() + d0);
  EXPECT_EQ(v.blocks[1].up_w.shape(), (Shape{12, 8}));  // the shared expert's gate|up
  EXPECT_FALSE(v.blocks[0].router_w.present());
}

std::vector<float> full_logits(Transformer& m, const std::vector<int32_t>& tokens) {
  const int64_t T = static_cast<int64_t>(tokens.size()), V = m.config().vocab_size;
  RunOptions o;
  o.compute = DType::kF32;
  m.prepare(1, T, o);
  Tensor out({T, V}, DType::kF32);
  m.logits(tokens.data(), nullptr, out);
  return std::vector<float>(out.as<float>(), out.as<float>() + T * V);
}

// The KV-cache decode of an MoE model (prefill chunks, then one token at a time) equals its full
// forward, with and without shared experts, with a selection bias, on both backends.
TEST(MoeDecode, EqualsFullForward) {
  for (const char* be_name : {"cpu", "ref"})
    for (int64_t shared : {0, 1})
      for (int bias : {0, 1}) {
        ModelConfig c = small_moe(shared, /*every=*/1);
        if (bias) c.moe.balance = MoeBalance::kBiasUpdate;
        Transformer m(c, kernels::backend(be_name));
        m.init(7);
        if (bias)
          for (int64_t l = 0; l < c.n_layers; ++l)
            for (int64_t e = 0; e < 4; ++e) m.router_bias(l).as<float>()[e] = 0.1f * static_cast<float>((e * 3 + l) % 4);
        Rng rng(11);
        std::vector<int32_t> tokens(20);
        for (auto& t : tokens) t = static_cast<int32_t>(rng.below(37));
        const std::vector<float> full = full_logits(m, tokens);
        const int64_t T = 20, V = 37, prefill = 7;
        eval::Decoder d(m, T, /*prefill_chunk=*/4);
        std::vector<float> inc(static_cast<size_t>(T * V));
        d.forward(std::span<const int32_t>(tokens.data(), prefill), inc.data());
        for (int64_t t = prefill; t < T; ++t) {
          std::span<const float> last = d.forward(std::span<const int32_t>(&tokens[t], 1));
          std::copy(last.begin(), last.end(), inc.begin() + t * V);
        }
        double diff = 0, peak = 0;
        for (size_t i = 0; i < full.size(); ++i) {
          diff = std::max(diff, static_cast<double>(std::abs(full[i] - inc[i])));
          peak = std::max(peak, static_cast<double>(std::abs(full[i])));
        }
        EXPECT_LE(diff, 2e-5) << be_name << " shared " << shared << " bias " << bias;
        EXPECT_GT(peak, 0.1);
      }
}

// Training in bf16 (the default) runs, records the routing statistics, and the bias update moves
// each expert's bias towards balance: up for an under-loaded expert, down for an over-loaded one.
TEST(MoeTrain, Bf16StepStatsAndBiasUpdate) {
  ModelConfig c = small_moe(1, 1);
  c.moe.balance = MoeBalance::kBiasUpdate;
  c.moe.bias_update_rate = 0.01f;
  c.moe.capacity_factor = 1.0f;
  Transformer m(c, kernels::cpu_backend());
  m.init(3);
  const int64_t B = 2, T = 16, N = B * T;
  RunOptions o;  // bf16
  m.prepare(B, T, o);
  Rng rng(5);
  std::vector<int32_t> tokens(N), targets(N);
  for (auto& t : tokens) t = static_cast<int32_t>(rng.below(37));
  for (auto& t : targets) t = static_cast<int32_t>(rng.below(37));
  m.zero_grads();
  const double loss = m.forward(tokens.data(), targets.data(), nullptr, true, 0.5f);
  m.backward();
  EXPECT_TRUE(std::isfinite(loss));
  EXPECT_GT(std::sqrt(kernels::cpu_backend().sum_squares(m.grads())), 0.0);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    const MoeStepStats& s = m.moe_stats()[l];
    ASSERT_EQ(s.forwards, 1);
    int64_t routed = 0;
    for (int64_t x : s.load) routed += x;
    EXPECT_EQ(routed, N * 2);
    // capacity ceil(1.0·32·2/4) = 16 per expert: what exceeds it is dropped
    int64_t over = 0;
    for (int64_t x : s.load) over += std::max<int64_t>(0, x - 16);
    EXPECT_EQ(s.dropped, over);
  }
  const std::vector<MoeStepStats> before = m.moe_stats();
  m.update_router_bias();
  for (int64_t l = 0; l < c.n_layers; ++l)
    for (int64_t e = 0; e < 4; ++e) {
      const double mean = 16.0, load = static_cast<double>(before[l].load[e]);
      const float want = load < mean ? 0.01f : (load > mean ? -0.01f : 0.0f);
      EXPECT_FLOAT_EQ(m.router_bias(l).as<float>()[e], want) << "layer " << l << " expert " << e;
    }
  EXPECT_EQ(m.moe_stats()[0].forwards, 0);  // reset
}

}  // namespace
}  // namespace lmt::model
