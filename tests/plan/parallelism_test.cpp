// The (TP, PP, DP) search: the 8B / 32-GPU example (TP 4 within a node, PP 2, DP 4), the batch
// split, the bubble, and explained rejections.
#include "lmt/plan/parallelism.h"

#include <gtest/gtest.h>

#include <chrono>
#include <vector>

#include "lmt/metrics/device_peaks.h"
#include "test_models.h"

namespace lmt::plan {
namespace {

ParallelismInputs eight_b_on_32_gpus(const char* device = "a100-80gb") {
  ParallelismInputs in;
  in.memory.config = testing::llama3_8b();
  in.memory.seq_len = 4096;
  in.memory.micro_batch = 1;
  in.memory.zero_stage = 0;
  in.memory.runtime_overhead_bytes = 1.0 * (1 << 30);
  in.devices = 32;
  in.devices_per_node = 8;
  in.global_batch = 256;  // 1M tokens
  in.ideal_step_seconds = 10;
  in.device_memory_bytes = metrics::device_spec(device)->memory_bytes;
  return in;
}

const Layout* find(const ParallelismSearch& s, int64_t tp, int64_t pp) {
  for (const Layout& l : s.ranked)
    if (l.tp == tp && l.pp == pp) return &l;
  return nullptr;
}

TEST(Parallelism, BubbleIsPMinus1OverMPlusPMinus1) {
  EXPECT_EQ(pipeline_bubble(1, 8), 0);
  EXPECT_DOUBLE_EQ(pipeline_bubble(2, 64), 1.0 / 65);
  EXPECT_DOUBLE_EQ(pipeline_bubble(8, 8), 7.0 / 15);
}

TEST(Parallelism, EightBillionOn32GpusIncludesTp4Pp2Dp4) {
  EXPECT_EQ(testing::llama3_8b().param_count(), 8'030'261'248);
  const ParallelismSearch s = search_layouts(eight_b_on_32_gpus());
  const Layout* l = find(s, 4, 2);
  ASSERT_NE(l, nullptr);
  EXPECT_EQ(l->dp, 4);
  EXPECT_EQ(l->grad_accum, 64);  // 256 = 1 × 64 × 4
  EXPECT_DOUBLE_EQ(l->bubble, 1.0 / 65);
  EXPECT_TRUE(l->fits);
  // Model states: ~8.03e9 / 8 (+ the embedding on stage 0) × 16 B ≈ 17 GB under ZeRO 0.
  EXPECT_NEAR(l->memory.model_states(), 16.0 * (l->memory.stage_params), 1);
  EXPECT_NEAR(l->memory.stage_params, (8.03e9 - 2 * 525e6) / 8 + 525e6 / 4, 0.01e9);
}

TEST(Parallelism, RankingPutsFittingLayoutsFirstThenFaster) {
  const ParallelismSearch s = search_layouts(eight_b_on_32_gpus());
  ASSERT_FALSE(s.ranked.empty());
  // Pure DP needs 128 GB of model states per GPU under ZeRO 0: it cannot be first.
  const Layout* dp_only = find(s, 1, 1);
  ASSERT_NE(dp_only, nullptr);
  EXPECT_FALSE(dp_only->fits);
  bool seen_unfit = false;
  for (size_t i = 0; i < s.ranked.size(); ++i) {
    if (!s.ranked[i].fits) {
      seen_unfit = true;
    } else {
      EXPECT_FALSE(seen_unfit) << "a fitting layout ranked after one that does not fit";
    }
    if (i > 0 && s.ranked[i].fits == s.ranked[i - 1].fits) {
      EXPECT_LE(s.ranked[i - 1].step_factor, s.ranked[i].step_factor + 1e-12);
    }
  }
  EXPECT_TRUE(s.ranked.front().fits);
  // TP 4 / PP 2 / DP 4 is among the fitting layouts, within a few percent of the best.
  const Layout* l = find(s, 4, 2);
  EXPECT_LT(l->step_factor, s.ranked.front().step_factor * 1.10);
}

TEST(Parallelism, TpAcrossNodesIsRejectedWithTheReason) {
  const ParallelismSearch s = search_layouts(eight_b_on_32_gpus());
  bool found = false;
  for (const RejectedLayout& r : s.rejected)
    if (r.tp == 16) {
      found = true;
      EXPECT_NE(r.reason.find("spans nodes"), std::string::npos) << r.reason;
    }
  EXPECT_TRUE(found);
  EXPECT_EQ(find(s, 16, 1), nullptr);
}

TEST(Parallelism, TpNotDividingHeadsIsExplained) {
  ParallelismInputs in = eight_b_on_32_gpus();
  in.memory.config = testing::gpt_block(12, 768, 12);  // GPT-2 small: 12 heads
  in.memory.config->max_seq_len = 4096;
  auto l = evaluate_layout(in, 8, 1);
  ASSERT_FALSE(l.ok());
  EXPECT_NE(l.status().message().find("TP 8 does not divide n_heads = 12"), std::string::npos)
      << l.status().ToString();
  EXPECT_FALSE(l.status().hint().empty());
  EXPECT_TRUE(evaluate_layout(in, 4, 1).ok());
}

TEST(Parallelism, TpNotDividingKvHeadsIsExplained) {
  ParallelismInputs in = eight_b_on_32_gpus();
  in.memory.config->n_kv_heads = 4;  // 32 query heads, 4 KV heads
  auto l = evaluate_layout(in, 8, 1);
  ASSERT_FALSE(l.ok());
  EXPECT_NE(l.status().message().find("does not divide n_kv_heads = 4"), std::string::npos);
}

TEST(Parallelism, PpNotDividingLayersIsExplained) {
  ParallelismInputs in = eight_b_on_32_gpus();
  in.memory.config->n_layers = 30;
  auto l = evaluate_layout(in, 1, 4);
  ASSERT_FALSE(l.ok());
  EXPECT_NE(l.status().message().find("PP 4 does not divide n_layers = 30"), std::string::npos)
      << l.status().ToString();
  const ParallelismSearch s = search_layouts(in);
  bool explained = false;
  for (const RejectedLayout& r : s.rejected) explained |= r.pp == 4 && r.reason.find("n_layers = 30") != std::string::npos;
  EXPECT_TRUE(explained);
}

TEST(Parallelism, GlobalBatchMustSplitIntoMicroBatchesTimesDp) {
  ParallelismInputs in = eight_b_on_32_gpus();
  in.global_batch = 100;
  auto l = evaluate_layout(in, 1, 1);  // DP 32
  ASSERT_FALSE(l.ok());
  EXPECT_NE(l.status().message().find("global batch 100 is not a multiple of micro-batch 1 × DP 32"),
            std::string::npos)
      << l.status().ToString();
  auto ok = evaluate_layout(in, 4, 2);  // DP 4: 100 = 1 × 25 × 4
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->grad_accum, 25);
}

TEST(Parallelism, DivisorsAscending) {
  EXPECT_EQ(divisors(1), (std::vector<int64_t>{1}));
  EXPECT_EQ(divisors(12), (std::vector<int64_t>{1, 2, 3, 4, 6, 12}));
  EXPECT_EQ(divisors(49), (std::vector<int64_t>{1, 7, 49}));
  EXPECT_EQ(divisors(1'000'000'000'000).size(), 169u);  // 2^12 · 5^12
  EXPECT_EQ(divisors(999'999'999'989).size(), 2u);      // a prime
}

// The search visits divisors only: a huge device count is answered at once (it once counted TP up
// to the device count: more than 20 s for 10^12 devices; `lmtrain plan` allows up to 10^7).
TEST(Parallelism, HugeDeviceCountsAreSearchedAtOnce) {
  ParallelismInputs in = eight_b_on_32_gpus();
  const auto start = std::chrono::steady_clock::now();
  for (int64_t devices : {int64_t{10'000'000}, int64_t{9'999'991}, int64_t{8'648'640}, int64_t{1'000'000'000'000}}) {
    in.devices = devices;
    in.global_batch = 256;
    const ParallelismSearch s = search_layouts(in);
    EXPECT_FALSE(s.rejected.empty() && s.ranked.empty()) << devices;
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 5.0);
}

}  // namespace
}  // namespace lmt::plan
