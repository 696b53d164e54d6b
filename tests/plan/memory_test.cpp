// Per-device memory against the literature: the ZeRO paper's model-state figures and Korthikanti et
// al.'s activation formula.
#include "lmt/plan/memory.h"

#include <gtest/gtest.h>

#include "test_models.h"

namespace lmt::plan {
namespace {

using metrics::Precision;

MemoryInputs bare(double params, int zero, int64_t dp) {
  MemoryInputs in;
  in.params = params;
  in.zero_stage = zero;
  in.dp = dp;
  in.fragmentation = 0;
  return in;
}

// Mixed-precision Adam: 2 (bf16 weights) + 2 (bf16 grads) + 4 (fp32 master) + 4 + 4 (Adam m, v).
TEST(Memory, MixedPrecisionAdamIs16BytesPerParam128GBFor8B) {
  const StateBytes b = state_bytes_per_param(Precision::kBf16);
  EXPECT_EQ(b.weights + b.grads + b.master + b.adam_m + b.adam_v, 16);
  const StateBytes f = state_bytes_per_param(Precision::kFp32);
  EXPECT_EQ(f.weights + f.grads + f.master + f.adam_m + f.adam_v, 16);
  const MemoryBreakdown m = estimate_memory(bare(8e9, 0, 1));
  EXPECT_DOUBLE_EQ(m.model_states(), 128e9);
  EXPECT_DOUBLE_EQ(m.total, 128e9);  // no runtime allowance, no activations (no shape)
  EXPECT_FALSE(m.activations_known);
}

// Rajbhandari et al. 2020, figure 1: Ψ = 7.5B, N_d = 64: 120 GB, 31.4 GB, 16.6 GB, 1.9 GB.
TEST(Memory, ZeroPaperFigure1) {
  EXPECT_NEAR(estimate_memory(bare(7.5e9, 0, 64)).model_states(), 120e9, 0.05e9);
  EXPECT_NEAR(estimate_memory(bare(7.5e9, 1, 64)).model_states(), 31.4e9, 0.05e9);
  EXPECT_NEAR(estimate_memory(bare(7.5e9, 2, 64)).model_states(), 16.6e9, 0.05e9);
  EXPECT_NEAR(estimate_memory(bare(7.5e9, 3, 64)).model_states(), 1.9e9, 0.05e9);
}

// Korthikanti et al. 2022, eq. 1: sbh(34 + 5as/h) bytes per GPT layer (16-bit, with dropout).
TEST(Memory, GptLayerActivationsAreKorthikantiEquation1) {
  const model::ModelConfig c = testing::gpt_block(96, 12288, 96);  // GPT-3 175B shape
  const double s = 2048, b = 1, h = 12288, a = 96;
  EXPECT_DOUBLE_EQ(layer_activation_bytes(c, 2048, 1, /*flash=*/false, /*dropout=*/true, 2),
                   s * b * h * (34 + 5 * a * s / h));
  // Flash attention removes the 5as²b term; it keeps an fp32 log-sum-exp per query row and head.
  EXPECT_DOUBLE_EQ(layer_activation_bytes(c, 2048, 1, true, true, 2), s * b * h * 34 + 4 * a * s * b);
}

TEST(Memory, TensorParallelWithSequenceParallelDividesActivationsByT) {
  MemoryInputs in;
  in.config = testing::llama3_8b();
  in.seq_len = 4096;
  MemoryBreakdown one = estimate_memory(in);
  in.tp = 8;
  MemoryBreakdown eight = estimate_memory(in);
  EXPECT_NEAR(eight.activations, one.activations / 8, 1);
  EXPECT_NEAR(eight.stage_params, one.stage_params / 8, 1);
}

// Full recompute keeps each layer's input (2sbh) plus one layer's working set.
TEST(Memory, FullRecomputeKeepsOnlyLayerInputs) {
  MemoryInputs in;
  in.config = testing::llama3_8b();
  in.seq_len = 4096;
  in.recompute = true;
  const MemoryBreakdown m = estimate_memory(in);
  const double sbh = 4096.0 * 4096, layer = layer_activation_bytes(*in.config, 4096, 1, true, false, 2);
  const double logits = 4.0 * 4096 * 128256 + 2 * sbh;
  EXPECT_DOUBLE_EQ(m.activations, 32 * 2 * sbh + layer + logits);
  EXPECT_LT(m.activation_variants.recompute_flash, m.activation_variants.flash / 5);
  EXPECT_GT(m.activation_variants.plain, m.activation_variants.flash);
  EXPECT_GT(m.activation_variants.recompute, m.activation_variants.recompute_flash);
}

// Under 1F1B the first stage holds p micro-batches of its L/p layers: L layers' worth.
TEST(Memory, FirstPipelineStageHoldsPMicroBatches) {
  MemoryInputs in;
  in.config = testing::llama3_8b();
  in.seq_len = 4096;
  in.fragmentation = 0;
  in.pp = 4;
  in.micro_batches_per_step = 16;
  const MemoryBreakdown m = estimate_memory(in);
  const double layer = layer_activation_bytes(*in.config, 4096, 1, true, false, 2);
  EXPECT_EQ(m.stage, 0);
  EXPECT_DOUBLE_EQ(m.activations, 32 * layer);
  in.micro_batches_per_step = 2;  // fewer micro-batches than stages: only 2 in flight
  EXPECT_DOUBLE_EQ(estimate_memory(in).activations, 2 * 8 * layer);
}

TEST(Memory, ZeroStagesShardProgressively) {
  MemoryInputs in;
  in.config = testing::llama3_8b();
  in.dp = 8;
  double previous = 1e300;
  for (int z = 0; z <= 3; ++z) {
    in.zero_stage = z;
    const double states = estimate_memory(in).model_states();
    EXPECT_LT(states, previous) << z;
    previous = states;
  }
  in.zero_stage = 3;
  EXPECT_GT(estimate_memory(in).zero3_gather, 0);
}

}  // namespace
}  // namespace lmt::plan
