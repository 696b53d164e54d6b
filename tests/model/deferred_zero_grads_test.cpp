// Transformer::zero_grads(defer_block_matrices = true) leaves the dense blocks' weight-matrix
// gradients unzeroed, and the next backward writes them over (GradWrite::kOverwrite): the gradients
// after any number of micro-batches must be bit for bit those of a full zeroing, whatever the
// deferred gradients held before (NaN here). Every tiny variant, an MoE model with dense and MoE
// layers, f32 and bf16, with and without recompute, on the cpu backend (oneDNN GEMMs that write
// their output) and the ref backend (the default: zeros, then the accumulating GEMM).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "lmt/kernels/registry.h"
#include "lmt/model/transformer.h"
#include "model_test_util.h"

namespace lmt::model {
namespace {

constexpr int64_t kB = 2, kT = 8;

// Two steps of `micro` micro-batches each, one model zeroing fully and one deferring, both from
// gradients poisoned with NaN; their gradients compared after each step.
void expect_deferred_matches_full(const ModelConfig& c, kernels::Backend& be, DType compute, bool recompute,
                                  bool docs, const std::string& what) {
  SCOPED_TRACE(what);
  Transformer full(c, be), deferred(c, be);
  RunOptions o;
  o.compute = compute;
  o.recompute = recompute;
  o.lm_head_chunk = 5;
  for (Transformer* m : {&full, &deferred}) {
    m->init(21);
    m->prepare(kB, kT, o);
  }
  const int micro = 2;
  for (int step = 0; step < 2; ++step) {
    for (Transformer* m : {&full, &deferred}) {
      float* g = m->grads().as<float>();
      std::fill(g, g + m->grads().numel(), std::numeric_limits<float>::quiet_NaN());
    }
    full.zero_grads();
    deferred.zero_grads(/*defer_block_matrices=*/true);
    for (int i = 0; i < micro; ++i) {
      const testing::Batch b = testing::random_batch(kB, kT, c.vocab_size, 100 + 10 * step + i);
      const int32_t* doc_ids = docs ? b.doc_ids.data() : nullptr;
      const double lf = full.forward(b.tokens.data(), b.targets.data(), doc_ids, true, 1.0f / micro);
      const double ld = deferred.forward(b.tokens.data(), b.targets.data(), doc_ids, true, 1.0f / micro);
      ASSERT_EQ(lf, ld) << "step " << step << " micro-batch " << i;
      full.backward();
      deferred.backward();
    }
    const float* gf = full.grads().as<float>();
    const float* gd = deferred.grads().as<float>();
    for (const ParamInfo& p : full.layout().params())
      for (int64_t i = p.offset; i < p.offset + p.numel; ++i) {
        ASSERT_TRUE(std::isfinite(gd[i])) << p.name << " element " << i - p.offset << " never written (step " << step << ")";
        ASSERT_EQ(gd[i], gf[i]) << p.name << " element " << i - p.offset << " (step " << step << ")";
      }
  }
}

TEST(DeferredZeroGrads, EveryVariantMatchesFullZeroing) {
  for (const testing::Variant& v : testing::tiny_variants())
    for (DType compute : {DType::kBF16, DType::kF32})
      for (bool recompute : {false, true})
        expect_deferred_matches_full(v.config, kernels::cpu_backend(), compute, recompute, v.doc_masking,
                                     v.name + (compute == DType::kBF16 ? " bf16" : " f32") +
                                         (recompute ? " recompute" : ""));
}

TEST(DeferredZeroGrads, RefBackendMatchesFullZeroing) {
  const testing::Variant v = testing::tiny_variants()[0];
  expect_deferred_matches_full(v.config, kernels::ref_backend(), DType::kF32, false, v.doc_masking, v.name + " ref");
}

// MoE layers' FFN gradients (experts, shared experts, router) accumulate; their attention's are deferred.
TEST(DeferredZeroGrads, MoeModelMatchesFullZeroing) {
  ModelConfig c = testing::tiny_test_config();
  c.n_layers = 3;
  c.norm = NormKind::kRmsNorm;
  c.positions = PositionKind::kRope;
  c.ffn = FfnKind::kGlu;
  c.moe.num_experts = 4;
  c.moe.top_k = 2;
  c.moe.expert_ffn = 6;
  c.moe.shared_experts = 1;
  c.moe.every = 2;  // layer 1 is MoE, layers 0 and 2 dense
  for (DType compute : {DType::kBF16, DType::kF32})
    expect_deferred_matches_full(c, kernels::cpu_backend(), compute, false, false,
                                 compute == DType::kBF16 ? "moe bf16" : "moe f32");
}

// Without the flag nothing changes: zero_grads() zeroes everything (NaN included).
TEST(DeferredZeroGrads, PlainZeroGradsZeroesEverything) {
  Transformer m(testing::tiny_test_config(), kernels::cpu_backend());
  float* g = m.grads().as<float>();
  std::fill(g, g + m.grads().numel(), std::numeric_limits<float>::quiet_NaN());
  m.zero_grads();
  for (int64_t i = 0; i < m.grads().numel(); ++i) ASSERT_EQ(g[i], 0.0f) << "element " << i;
}

}  // namespace
}  // namespace lmt::model
