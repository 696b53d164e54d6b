// The layout arithmetic of tensor and pipeline parallelism (model/tensor_parallel.h,
// model/pipeline_split.h), in one process: shard and stage configs, the cuts, and that every
// rank's part put back together is the whole model, element for element. The parallel runs
// themselves are checked against one process under mpirun (tests/dist/tp_test.cpp, pp_test.cpp).
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "lmt/model/pipeline_split.h"
#include "lmt/model/tensor_parallel.h"

namespace lmt::model {
namespace {

ModelConfig llama() {
  ModelConfig c = *preset("tiny");
  c.n_layers = 3;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.ffn_hidden = 64;
  c.tied_embeddings = false;
  return c;
}

ModelConfig gpt2() {
  ModelConfig c = *preset("gpt2-124m");
  c.n_layers = 2;
  c.d_model = 32;
  c.n_heads = 4;
  c.n_kv_heads = 4;
  c.head_dim = 8;
  c.ffn_hidden = 128;
  c.max_seq_len = 64;
  c.vocab_size = 100;
  return c;
}

// Distinct values (the element index), zero in alignment gaps and padding as init leaves them.
std::vector<float> numbered(const ParamLayout& l) {
  std::vector<float> v(static_cast<size_t>(l.total_numel()), 0.0f);
  for (const ParamInfo& p : l.params())
    for (int64_t i = 0; i < p.numel; ++i) v[static_cast<size_t>(p.offset + i)] = static_cast<float>(p.offset + i + 1);
  return v;
}

TEST(ShardConfig, DividesHeadsKvHeadsAndFfn) {
  auto s = shard_config(llama(), 2);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->n_heads, 2);
  EXPECT_EQ(s->n_kv_heads, 1);
  EXPECT_EQ(s->ffn_hidden, 32);
  EXPECT_EQ(s->d_model, llama().d_model);
  auto g = shard_config(gpt2(), 4);  // gpt2's n_heads·head_dim = d_model does not hold for a part
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ(g->family, NamingFamily::kLlama);
  EXPECT_EQ(shard_config(llama(), 4).status().code(), StatusCode::kInvalidArgument);  // 2 KV heads
  ModelConfig full = llama();
  full.qk_norm = full.qk_norm_full = true;
  EXPECT_EQ(shard_config(full, 2).status().code(), StatusCode::kUnimplemented);
}

void expect_tp_round_trip(const ModelConfig& c, int tp) {
  TensorParallelMap map(c, tp);
  const std::vector<float> whole = numbered(map.full_layout());
  const int64_t n = map.shard_layout().total_numel();
  std::vector<float> shards(static_cast<size_t>(n * tp));
  for (int r = 0; r < tp; ++r) map.take_shard(r, whole.data(), shards.data() + r * n);
  std::vector<float> back(whole.size(), -1.0f);
  map.assemble(shards.data(), back.data());
  EXPECT_EQ(back, whole);
  // Every element of the whole model sits in exactly one rank's split tensors or in the replicated ones.
  int64_t replicated = 0;
  for (const auto& [b, e] : map.replicated_ranges()) replicated += e - b;
  int64_t params = 0, part = 0;
  for (const ParamInfo& p : map.full_layout().params()) params += p.numel;
  for (const ParamInfo& p : map.shard_layout().params()) part += p.numel;
  EXPECT_EQ(replicated + (part - replicated) * tp, params);
  // Rank 1's q rows are the whole q's second half (head-major split).
  const ModelViews f = map.full_layout().views(const_cast<float*>(whole.data()), DType::kF32);
  const ModelViews s1 = map.shard_layout().views(shards.data() + n, DType::kF32);
  EXPECT_EQ(s1.blocks[0].q_w.as<float>()[0], f.blocks[0].q_w.as<float>()[f.blocks[0].q_w.numel() / tp]);
  EXPECT_EQ(s1.blocks[0].o_w.as<float>()[0], f.blocks[0].o_w.as<float>()[f.blocks[0].o_w.dim(1) / tp]);
}

TEST(TensorParallelMap, PartsAssembleTheWholeModel) {
  expect_tp_round_trip(llama(), 2);
  expect_tp_round_trip(gpt2(), 2);
  expect_tp_round_trip(gpt2(), 4);
}

TEST(PipelineCuts, BalanceBlocksAndTheLmHead) {
  const ModelConfig g = *preset("gpt2-124m");  // the LM head is ~5 blocks of work at T = 256
  EXPECT_EQ(pipeline_cuts(g, 2, 256), (std::vector<int64_t>{0, 9, 12}));
  EXPECT_EQ(pipeline_cuts(g, 2, 0), (std::vector<int64_t>{0, 6, 12}));  // blocks alone
  EXPECT_EQ(pipeline_cuts(g, 1, 256), (std::vector<int64_t>{0, 12}));
  const std::vector<int64_t> four = pipeline_cuts(g, 4, 256);
  ASSERT_EQ(four.size(), 5u);
  for (size_t s = 0; s + 1 < four.size(); ++s) EXPECT_GE(four[s + 1] - four[s], 1);
  EXPECT_EQ(four.back(), 12);
  EXPECT_EQ(pipeline_cuts(llama(), 3, 32), (std::vector<int64_t>{0, 1, 2, 3}));
}

TEST(PipelineMap, StagesAssembleTheWholeModel) {
  for (const ModelConfig& c : {llama(), gpt2()}) {
    PipelineMap map(c, 2, 32);
    const std::vector<float> whole = numbered(map.full_layout());
    const std::vector<int64_t> n = map.stage_numels();
    std::vector<float> stages(static_cast<size_t>(std::accumulate(n.begin(), n.end(), int64_t{0})));
    int64_t off = 0;
    for (int s = 0; s < 2; ++s) {
      map.take_stage(s, whole.data(), stages.data() + off);
      off += n[static_cast<size_t>(s)];
    }
    std::vector<float> back(whole.size(), -1.0f);
    map.assemble(stages.data(), back.data());
    EXPECT_EQ(back, whole) << c.name;
    // The ends are whole on every stage.
    const ParamInfo* embed = map.stage_layout(1).find(c.family == NamingFamily::kGpt2 ? "transformer.wte.weight"
                                                                                      : "model.embed_tokens.weight");
    ASSERT_NE(embed, nullptr);
    EXPECT_EQ(embed->numel, map.full_layout().params()[0].numel);
  }
  EXPECT_EQ(pipeline_supported(llama(), 4).code(), StatusCode::kInvalidArgument);  // 3 layers
  ModelConfig nope = llama();
  nope.nope_every = 2;
  EXPECT_EQ(pipeline_supported(nope, 2).code(), StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace lmt::model
