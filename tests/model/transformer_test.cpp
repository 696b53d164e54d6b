// Whole-model tests: activation planning, f64 finite differences of every parameter gradient,
// cpu vs ref, recompute invariance, and bf16 vs f32.
#include "lmt/model/transformer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "lmt/kernels/registry.h"
#include "model_test_util.h"

namespace lmt::model {
namespace {

using testing::Batch;
using testing::Variant;

class PerVariant : public ::testing::TestWithParam<Variant> {};

std::string variant_name(const ::testing::TestParamInfo<Variant>& info) { return info.param.name; }

constexpr int64_t kB = 2, kT = 8;

RunOptions options_for(const Variant& v, DType compute) {
  RunOptions o;
  o.compute = compute;
  o.z_loss = v.z_loss;
  o.lm_head_chunk = 5;  // does not divide B·T: exercises chunking
  return o;
}

double value(const TensorView& t, int64_t i) {
  return t.dtype() == DType::kF64 ? t.as<double>()[i] : t.as<float>()[i];
}

// f64 whole-model gradient check: every parameter tensor, a few sampled elements each.
TEST_P(PerVariant, F64GradientsMatchFiniteDifferences) {
  const Variant& v = GetParam();
  Transformer m(v.config, kernels::ref_backend(), DType::kF64);
  m.init(11);
  m.prepare(kB, kT, options_for(v, DType::kF64));
  Batch b = testing::random_batch(kB, kT, v.config.vocab_size, 5);
  const int32_t* docs = v.doc_masking ? b.doc_ids.data() : nullptr;
  m.zero_grads();
  m.forward(b.tokens.data(), b.targets.data(), docs, true);
  m.backward();
  double* p = m.params().as<double>();
  const double* g = m.grads().as<double>();
  Rng pick(9);
  const double h = 1e-6;
  for (const ParamInfo& info : m.layout().params()) {
    // Only real rows of the (padded) embedding matter; padding rows must get zero gradient.
    const int64_t live = info.role == ParamRole::kEmbedding || info.role == ParamRole::kLmHead
                             ? v.config.vocab_size * v.config.d_model : info.numel;
    for (int64_t pad = live; pad < info.numel; ++pad) ASSERT_EQ(g[info.offset + pad], 0.0) << info.name;
    for (int s = 0; s < 4; ++s) {
      const int64_t i = info.offset + static_cast<int64_t>(pick.below(live));
      const double saved = p[i];
      p[i] = saved + h;
      const double plus = m.forward(b.tokens.data(), b.targets.data(), docs, false);
      p[i] = saved - h;
      const double minus = m.forward(b.tokens.data(), b.targets.data(), docs, false);
      p[i] = saved;
      const double numeric = (plus - minus) / (2 * h);
      EXPECT_NEAR(g[i], numeric, 1e-7 + 1e-5 * std::abs(numeric)) << info.name << " element " << i - info.offset;
    }
  }
}

// The fast backend computes the same loss and gradients as the oracle, in f32.
TEST_P(PerVariant, CpuMatchesRefInF32) {
  const Variant& v = GetParam();
  Transformer ref(v.config, kernels::ref_backend()), cpu(v.config, kernels::cpu_backend());
  ref.init(3);
  cpu.init(3);
  Batch b = testing::random_batch(kB, kT, v.config.vocab_size, 7);
  const int32_t* docs = v.doc_masking ? b.doc_ids.data() : nullptr;
  double losses[2];
  Transformer* models[2] = {&ref, &cpu};
  for (int i = 0; i < 2; ++i) {
    models[i]->prepare(kB, kT, options_for(v, DType::kF32));
    models[i]->zero_grads();
    losses[i] = models[i]->forward(b.tokens.data(), b.targets.data(), docs, true);
    models[i]->backward();
  }
  EXPECT_NEAR(losses[1], losses[0], 1e-5 * std::abs(losses[0]));
  const float* gr = ref.grads().as<float>();
  const float* gc = cpu.grads().as<float>();
  for (const ParamInfo& info : ref.layout().params())
    for (int64_t i = info.offset; i < info.offset + info.numel; ++i)
      ASSERT_NEAR(gc[i], gr[i], 1e-4 + 1e-4 * std::abs(gr[i])) << info.name << " element " << i - info.offset;
}

// Activation checkpointing changes memory, never results (bit for bit on the same backend).
TEST_P(PerVariant, RecomputeGivesIdenticalLossAndGradients) {
  const Variant& v = GetParam();
  Transformer a(v.config, kernels::cpu_backend()), b(v.config, kernels::cpu_backend());
  a.init(4);
  b.init(4);
  RunOptions o = options_for(v, DType::kBF16), r = o;
  r.recompute = true;
  a.prepare(kB, kT, o);
  b.prepare(kB, kT, r);
  EXPECT_LT(b.arena().capacity(), a.arena().capacity());
  Batch x = testing::random_batch(kB, kT, v.config.vocab_size, 8);
  const int32_t* docs = v.doc_masking ? x.doc_ids.data() : nullptr;
  for (Transformer* m : {&a, &b}) m->zero_grads();
  EXPECT_EQ(a.forward(x.tokens.data(), x.targets.data(), docs, true),
            b.forward(x.tokens.data(), x.targets.data(), docs, true));
  a.backward();
  b.backward();
  for (int64_t i = 0; i < a.grads().numel(); ++i)
    ASSERT_EQ(a.grads().as<float>()[i], b.grads().as<float>()[i]) << "gradient element " << i;
}

// bf16 compute stays close to f32 (bf16 has 8 significant bits: ~0.4% per rounding).
TEST_P(PerVariant, Bf16IsCloseToF32) {
  const Variant& v = GetParam();
  Transformer f(v.config, kernels::cpu_backend()), h(v.config, kernels::cpu_backend());
  f.init(6);
  h.init(6);
  f.prepare(kB, kT, options_for(v, DType::kF32));
  h.prepare(kB, kT, options_for(v, DType::kBF16));
  Batch x = testing::random_batch(kB, kT, v.config.vocab_size, 9);
  const int32_t* docs = v.doc_masking ? x.doc_ids.data() : nullptr;
  f.zero_grads();
  h.zero_grads();
  const double lf = f.forward(x.tokens.data(), x.targets.data(), docs, true);
  const double lh = h.forward(x.tokens.data(), x.targets.data(), docs, true);
  EXPECT_NEAR(lh, lf, 1e-2 * std::abs(lf));
  f.backward();
  h.backward();
  // Gradient direction: cosine similarity of the flat gradients.
  double dot = 0, nf = 0, nh = 0;
  for (int64_t i = 0; i < f.grads().numel(); ++i) {
    const double a = value(f.grads(), i), b = value(h.grads(), i);
    dot += a * b;
    nf += a * a;
    nh += b * b;
  }
  EXPECT_GT(dot / std::sqrt(nf * nh), 0.999);
}

INSTANTIATE_TEST_SUITE_P(TinyVariants, PerVariant, ::testing::ValuesIn(testing::tiny_variants()), variant_name);

TEST(ActivationPlan, ArenaPeakEqualsTheReportForEveryMode) {
  const ModelConfig c = *preset("tiny");
  for (bool recompute : {false, true})
    for (DType dt : {DType::kBF16, DType::kF32}) {
      RunOptions o;
      o.compute = dt;
      o.recompute = recompute;
      const size_t report = activation_bytes(c, 3, 64, o);
      Transformer m(c, kernels::cpu_backend());
      m.prepare(3, 64, o);
      EXPECT_EQ(m.arena().peak(), report);
      EXPECT_EQ(m.arena().capacity(), Arena::round_up(report));
    }
  RunOptions o;
  RunOptions r = o;
  r.recompute = true;
  // Checkpointing keeps one block's activations instead of n_layers of them: it saves exactly
  // (n_layers - 1) blocks, a block being what one more layer costs without checkpointing beyond
  // what it costs with it (one more residual).
  ModelConfig one = c, two = c;
  one.n_layers = 1;
  two.n_layers = 2;
  const int64_t block = (static_cast<int64_t>(activation_bytes(two, 4, 256, o)) - activation_bytes(one, 4, 256, o)) -
                        (static_cast<int64_t>(activation_bytes(two, 4, 256, r)) - activation_bytes(one, 4, 256, r));
  EXPECT_GT(block, 0);
  EXPECT_EQ(static_cast<int64_t>(activation_bytes(c, 4, 256, o)) - static_cast<int64_t>(activation_bytes(c, 4, 256, r)),
            (c.n_layers - 1) * block);
}

// Regression: zero_grads scaled by 0, and NaN * 0 = NaN, so one non-finite step poisoned all later ones.
TEST(Transformer, ZeroGradsClearsNonFiniteGradients) {
  Transformer m(*preset("tiny"), kernels::cpu_backend());
  float* g = m.grads().as<float>();
  g[0] = std::numeric_limits<float>::quiet_NaN();
  g[1] = std::numeric_limits<float>::infinity();
  m.zero_grads();
  EXPECT_EQ(g[0], 0.0f);
  EXPECT_EQ(g[1], 0.0f);
}

// set_storage() moves params, grads and the bf16 mirror into the allocator's buffers (data
// parallelism puts them in memory shared between processes): the same loss and gradients follow,
// in the new buffers, and a failing allocator leaves the model as it was.
TEST(Transformer, SetStorageMovesEveryBufferAndKeepsResults) {
  const Variant v = testing::tiny_variants()[0];
  Transformer a(v.config, kernels::cpu_backend()), b(v.config, kernels::cpu_backend());
  for (Transformer* m : {&a, &b}) {
    m->init(5);
    m->prepare(kB, kT, options_for(v, DType::kBF16));
  }
  std::vector<std::shared_ptr<std::vector<char>>> owned;
  std::vector<Transformer::Storage> roles;
  Status s = b.set_storage([&](Transformer::Storage role, int64_t numel, DType dtype) -> StatusOr<Tensor> {
    auto mem = std::make_shared<std::vector<char>>(static_cast<size_t>(numel) * dtype_size(dtype) + 64, 0);
    owned.push_back(mem);
    roles.push_back(role);
    void* p = mem->data() + (64 - reinterpret_cast<uintptr_t>(mem->data()) % 64) % 64;
    return Tensor::over(p, Shape{numel}, dtype, mem);
  });
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_EQ(roles.size(), 3u) << "params, grads and the bf16 mirror";
  auto inside = [&](const TensorView& t, size_t i) {
    const char* p = static_cast<const char*>(t.data());
    return p >= owned[i]->data() && p + t.bytes() <= owned[i]->data() + owned[i]->size();
  };
  EXPECT_TRUE(inside(b.params(), 0));
  EXPECT_TRUE(inside(b.grads(), 1));
  EXPECT_TRUE(inside(b.compute_mirror(), 2));
  Batch x = testing::random_batch(kB, kT, v.config.vocab_size, 9);
  for (Transformer* m : {&a, &b}) m->zero_grads();
  EXPECT_EQ(a.forward(x.tokens.data(), x.targets.data(), nullptr, true),
            b.forward(x.tokens.data(), x.targets.data(), nullptr, true));
  a.backward();
  b.backward();
  for (int64_t i = 0; i < a.grads().numel(); ++i)
    ASSERT_EQ(a.grads().as<float>()[i], b.grads().as<float>()[i]) << "gradient element " << i;

  const void* before = b.params().data();
  Status bad = b.set_storage([](Transformer::Storage, int64_t, DType) -> StatusOr<Tensor> {
    return Internal("no shared memory left");
  });
  EXPECT_FALSE(bad.ok());
  EXPECT_EQ(b.params().data(), before) << "a failed set_storage keeps the old buffers";
}

// The parameter-residency hook (ZeRO-3's seam): called before the ends are read and before every
// block's forward and backward (and recompute), in that order; views bound from it are what the
// passes read and write, even after the model released its own buffers.
TEST(Transformer, ParamsNeededHookBindsViewsBeforeEveryUse) {
  const Variant v = testing::tiny_variants()[0];
  Transformer a(v.config, kernels::cpu_backend()), b(v.config, kernels::cpu_backend());
  RunOptions o = options_for(v, DType::kF32);
  o.recompute = true;
  for (Transformer* m : {&a, &b}) {
    m->init(5);
    m->prepare(kB, kT, o);
  }
  // b's parameters and gradients live elsewhere; the hook binds them unit by unit.
  Tensor p2({b.layout().total_numel()}, DType::kF32), g2({b.layout().total_numel()}, DType::kF32);
  kernels::cpu_backend().copy(p2, b.params());
  const ModelViews w = b.layout().views(p2.view().data(), DType::kF32);
  const ModelViews g = b.layout().views(g2.view().data(), DType::kF32);
  std::vector<std::pair<int64_t, bool>> calls;
  b.set_params_needed([&](int64_t layer, bool backward) {
    calls.emplace_back(layer, backward);
    if (layer < 0) b.bind_ends(w, g, w);
    else b.bind_block(layer, w.blocks[layer], g.blocks[layer], w.blocks[layer]);
  });
  b.release_storage();
  EXPECT_FALSE(b.params().present());
  EXPECT_EQ(b.storage_bytes(), 0);
  Batch x = testing::random_batch(kB, kT, v.config.vocab_size, 9);
  a.zero_grads();
  b.zero_grads();  // nothing of its own to clear
  EXPECT_EQ(a.forward(x.tokens.data(), x.targets.data(), nullptr, true),
            b.forward(x.tokens.data(), x.targets.data(), nullptr, true));
  a.backward();
  b.backward();
  for (int64_t i = 0; i < a.grads().numel(); ++i)
    ASSERT_EQ(a.grads().as<float>()[i], g2.as<float>()[i]) << "gradient element " << i;
  const int64_t L = v.config.n_layers;
  std::vector<std::pair<int64_t, bool>> want = {{-1, false}};
  for (int64_t l = 0; l < L; ++l) want.emplace_back(l, false);
  for (int64_t l = L - 1; l >= 0; --l) want.emplace_back(l, true);
  EXPECT_EQ(calls, want);
}

TEST(AttentionChoice, AutoTakesFlashWhereTheBackendHasItElseNaive) {
  EXPECT_EQ(resolve_attention(AttentionChoice::kAuto, kernels::cpu_backend()), kernels::AttentionBackend::kFlash);
  EXPECT_EQ(resolve_attention(AttentionChoice::kAuto, kernels::ref_backend()), kernels::AttentionBackend::kNaive);
  EXPECT_EQ(resolve_attention(AttentionChoice::kNaive, kernels::cpu_backend()), kernels::AttentionBackend::kNaive);
}

TEST(ParamLayout, HuggingFaceNamesAdjacencyAndPadding) {
  ParamLayout gpt2(*preset("gpt2-124m"));
  const ParamInfo* c_attn = gpt2.find("transformer.h.3.attn.c_attn.weight");
  ASSERT_NE(c_attn, nullptr);
  EXPECT_TRUE(c_attn->hf_transposed);
  EXPECT_EQ(c_attn->hf_shape, (Shape{768, 2304}));
  EXPECT_EQ(gpt2.find("transformer.wte.weight")->shape, (Shape{50304, 768}));
  EXPECT_EQ(gpt2.find("transformer.wte.weight")->hf_shape, (Shape{50257, 768}));
  EXPECT_EQ(gpt2.find("lm_head.weight"), nullptr);  // tied

  ParamLayout qwen(*preset("qwen3-1.8b"));
  const ParamInfo* q = qwen.find("model.layers.3.self_attn.q_proj.weight");
  const ParamInfo* k = qwen.find("model.layers.3.self_attn.k_proj.weight");
  const ParamInfo* v = qwen.find("model.layers.3.self_attn.v_proj.weight");
  ASSERT_TRUE(q && k && v);
  EXPECT_EQ(k->offset, q->offset + q->numel);  // q, k, v form one matrix
  EXPECT_EQ(v->offset, k->offset + k->numel);
  EXPECT_NE(qwen.find("model.layers.3.self_attn.q_norm.weight"), nullptr);
  EXPECT_NE(qwen.find("lm_head.weight"), nullptr);  // untied
  const ParamInfo* gate = qwen.find("model.layers.0.mlp.gate_proj.weight");
  EXPECT_EQ(qwen.find("model.layers.0.mlp.up_proj.weight")->offset, gate->offset + gate->numel);
}

// Regression: fused groups stay contiguous when their sizes are not multiples of the 16-float
// alignment (a gap made the fused views read padding instead of v_proj.bias and up_proj.bias).
TEST(ParamLayout, FusedGroupsAreContiguousForOddSizes) {
  ModelConfig c = *preset("tiny");
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 3;  // q 12, k/v 6: not multiples of 16
  c.d_model = 20;
  c.ffn_hidden = 21;
  c.attn_bias = c.mlp_bias = true;
  ParamLayout l(c);
  for (const char* group : {"self_attn.q_proj.", "self_attn.k_proj.", "mlp.gate_proj."})
    for (const char* kind : {"weight", "bias"}) {
      const std::string first = std::string("model.layers.1.") + group + kind;
      const ParamInfo* a = l.find(first);
      ASSERT_NE(a, nullptr) << first;
      const ParamInfo* next = &*(std::find_if(l.params().begin(), l.params().end(), [&](const ParamInfo& p) { return &p == a; }) + 1);
      EXPECT_EQ(next->offset, a->offset + a->numel) << first << " then " << next->name;
    }
  std::vector<char> base(1);
  const ModelViews views = l.views(base.data(), DType::kF32);  // b must not refer into a temporary
  const BlockViews& b = views.blocks[1];
  auto elems = [&](const TensorView& t) { return (static_cast<char*>(t.data()) - base.data()) / 4; };
  EXPECT_EQ(elems(b.v_b), l.find("model.layers.1.self_attn.v_proj.bias")->offset);
  EXPECT_EQ(elems(b.up_b) + c.ffn_hidden, l.find("model.layers.1.mlp.up_proj.bias")->offset);
}

}  // namespace
}  // namespace lmt::model
