// The step-time model (plan/step_time.h): each term against numbers computed by hand from the
// formulas in the header, the tabulated and measured links, and `lmtrain plan`'s use of it
// (ranking and the DP2 / TP2 / PP2 / ZeRO-3 comparison on the CPU).
#include "lmt/plan/step_time.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "lmt/plan/plan.h"

namespace lmt::plan {
namespace {

// B = 1 GB/s, α = 10 µs, no overlap: round numbers for hand arithmetic.
Link slow_link(bool overlaps = false) { return {"test", 1e9, 1e-5, overlaps, "test"}; }

model::ModelConfig small_model() {
  model::ModelConfig m;
  m.vocab_size = 64;
  m.max_seq_len = 256;
  m.n_layers = 4;
  m.d_model = 64;
  m.n_heads = 4;
  m.n_kv_heads = 4;
  m.head_dim = 16;
  m.ffn_hidden = 256;
  return m;
}

// 2 devices, 8 sequences of 256 tokens in micro-batches of 4: 2048 tokens, 6e6 FLOPs each →
// 1.2288e10 FLOPs; peak 1e11 at efficiency 0.5 on 2 devices → compute 0.12288 s.
StepTimeInputs base() {
  StepTimeInputs in;
  in.model = small_model();
  in.params = 1e8;
  in.flops_per_token = 6e6;
  in.seq_len = 256;
  in.micro_batch = 4;
  in.global_batch = 8;
  in.devices = 2;
  in.devices_per_node = 2;
  in.dp = 2;
  in.act_bytes = 2;
  in.grad_bytes = 4;
  in.peak_flops_per_device = 1e11;
  in.efficiency = 0.5;
  in.links = {slow_link(), slow_link()};
  return in;
}

TEST(StepTime, RingCollectives) {
  const Link l = slow_link();
  EXPECT_DOUBLE_EQ(all_reduce_seconds(1e9, 2, l), 1.0 + 2e-5);          // 2·(1/2)·1 s + 2·1·α
  EXPECT_DOUBLE_EQ(reduce_scatter_seconds(1e9, 4, l), 0.75 + 3e-5);     // (3/4)·1 s + 3·α
  EXPECT_DOUBLE_EQ(all_gather_seconds(1e9, 4, l), 0.75 + 3e-5);
  EXPECT_DOUBLE_EQ(p2p_seconds(5e8, l), 0.5 + 1e-5);
  EXPECT_EQ(all_reduce_seconds(1e9, 1, l), 0);
}

TEST(StepTime, ComputeTerm) {
  StepTimeInputs in = base();
  auto t = predict_step_time(in);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_DOUBLE_EQ(t->compute, 0.12288);
  EXPECT_EQ(t->micro_batches, 1);  // 8 / (4 · 2)
  in.recompute = true;             // one more forward: × 4/3
  t = predict_step_time(in);
  ASSERT_TRUE(t.ok());
  EXPECT_DOUBLE_EQ(t->compute, 0.16384);
}

TEST(StepTime, DataParallelTermsByZeroStage) {
  StepTimeInputs in = base();  // 1e8 params: fp32 grads 4e8 B, bf16 weights 2e8 B
  auto t = predict_step_time(in);
  ASSERT_TRUE(t.ok());
  EXPECT_DOUBLE_EQ(t->dp_comm, 0.4 + 2e-5);  // ZeRO-0 all-reduce of 4e8 B over 2: 2·(1/2)·0.4 s + 2α
  EXPECT_DOUBLE_EQ(t->step, 0.12288 + 0.4 + 2e-5);
  EXPECT_DOUBLE_EQ(t->tokens_per_s, 2048 / (0.12288 + 0.4 + 2e-5));
  in.zero_stage = 1;  // reduce-scatter 4e8 (0.2 s + α) + all-gather 2e8 (0.1 s + α)
  t = predict_step_time(in);
  EXPECT_DOUBLE_EQ(t->dp_comm, 0.3 + 2e-5);
  in.zero_stage = 3;  // per micro-batch (m = 1): reduce-scatter + 2 all-gathers of the f32 master (4e8 B)
  t = predict_step_time(in);
  EXPECT_DOUBLE_EQ(t->dp_comm, 0.2 + 1e-5 + 2 * (0.2 + 1e-5));
  in.global_batch = 16;  // m = 2: twice the ZeRO-3 traffic, twice the compute
  t = predict_step_time(in);
  EXPECT_DOUBLE_EQ(t->dp_comm, 2 * (0.6 + 3e-5));
  EXPECT_DOUBLE_EQ(t->compute, 2 * 0.12288);
}

TEST(StepTime, OverlappingLinksHideDataParallelBehindBackward) {
  StepTimeInputs in = base();
  in.links = {slow_link(true), slow_link(true)};
  auto t = predict_step_time(in);
  ASSERT_TRUE(t.ok());
  EXPECT_DOUBLE_EQ(t->dp_comm_total, 0.4 + 2e-5);
  EXPECT_DOUBLE_EQ(t->dp_comm, 0.4 + 2e-5 - 0.12288 * 2 / 3);  // what backward (2/3 of compute) cannot hide
  in.links.intra.bytes_per_s = 1e12;                           // fast enough to hide all of it
  t = predict_step_time(in);
  EXPECT_EQ(t->dp_comm, 0);
}

TEST(StepTime, TensorParallelTerm) {
  StepTimeInputs in = base();
  in.tp = 2;
  in.dp = 1;  // m = 8 / 4 = 2 micro-batches
  // Activations b·s·C·2 B = 4·256·64·2 = 131072 B; per micro-batch and block 4 all-reduces over 2:
  // each 131072/1e9 + 2α. 2 micro-batches × 4 blocks × 4.
  auto t = predict_step_time(in);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  const double ar = 131072 / 1e9 + 2e-5;
  EXPECT_DOUBLE_EQ(t->tp_comm, 2 * 4 * 4 * ar);
  EXPECT_EQ(t->dp_comm, 0);  // DP 1
  EXPECT_EQ(t->bubble, 0);
  // TP 2 halves each rank's model shard: with DP 1 there is no gradient traffic at all.
  EXPECT_DOUBLE_EQ(t->step, 0.12288 + 2 * 4 * 4 * ar);
  in.recompute = true;  // 6 all-reduces per block
  t = predict_step_time(in);
  EXPECT_DOUBLE_EQ(t->tp_comm, 2 * 4 * 6 * ar);
}

TEST(StepTime, PipelineTermsAndBubble) {
  StepTimeInputs in = base();
  in.pp = 2;
  in.dp = 1;  // m = 2
  auto t = predict_step_time(in);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  const double p2p = 131072 / 1e9 + 1e-5;
  EXPECT_DOUBLE_EQ(t->pp_comm, 2 * 2 * p2p);  // per micro-batch: activations forward, gradients back
  const double busy = 0.12288 + 2 * 2 * p2p;
  EXPECT_DOUBLE_EQ(t->bubble, busy * (2 - 1) / 2.0);  // busy · (p−1)/m
  EXPECT_DOUBLE_EQ(t->step, busy * (2 + 2 - 1) / 2.0);  // busy · (m+p−1)/m
  EXPECT_EQ(t->pp_link, "test");
  in.devices_per_node = 1;  // stages on two nodes: the inter-node link
  in.links.inter.name = "inter";
  t = predict_step_time(in);
  EXPECT_EQ(t->pp_link, "inter");
}

TEST(StepTime, RejectsLayoutsThatAreNotTheDevices) {
  StepTimeInputs in = base();
  in.tp = 2;  // 2 · 1 · 2 = 4 ≠ 2
  EXPECT_FALSE(predict_step_time(in).ok());
  in = base();
  in.global_batch = 6;  // not a multiple of 4 · 2
  EXPECT_FALSE(predict_step_time(in).ok());
}

TEST(StepTime, TabulatedLinks) {
  auto h100 = tabulated_links(*metrics::device_spec("h100-sxm"));
  ASSERT_TRUE(h100.ok());
  EXPECT_EQ(h100->intra.name, "nvlink4");
  EXPECT_DOUBLE_EQ(h100->intra.bytes_per_s, 450e9);  // 900 GB/s total NVLink, per direction
  EXPECT_DOUBLE_EQ(h100->inter.bytes_per_s, 50e9);   // NDR 400 Gb/s
  EXPECT_TRUE(h100->intra.overlaps);
  for (const auto& n : metrics::device_names()) {
    auto d = metrics::device_spec(n);
    ASSERT_TRUE(d.ok());
    auto l = tabulated_links(*d);
    ASSERT_TRUE(l.ok()) << n;  // every device has links
    EXPECT_GT(l->intra.bytes_per_s, l->inter.bytes_per_s) << n;
  }
}

TEST(StepTime, MeasuredLinkFromBenchCollectives) {
  const std::string path = (std::filesystem::temp_directory_path() / ("lmt_coll_" + std::to_string(::getpid()) + ".json")).string();
  {
    std::ofstream f(path);  // the shape `lmtrain bench collectives --json` prints (bench_collectives_cmd.cpp)
    f << R"({"bench":"collectives","mb":475,"ranks":2,"seconds":{"memcpy":0.0408,"mpi_allreduce":0.3214,)"
         R"("shm_allreduce":0.0576,"shm_reduce_scatter":0.029,"shm_all_gather":0.0281},"threads":1,"machine":"x"})";
  }
  auto l = link_from_collectives_json(path);
  ASSERT_TRUE(l.ok()) << l.status().ToString();
  EXPECT_DOUBLE_EQ(l->bytes_per_s, 2.0 * 0.5 * 475.0 * (1 << 20) / 0.0576);  // 8.65 GB/s
  EXPECT_FALSE(l->overlaps);
  {
    std::ofstream f(path);
    f << R"({"bench":"collectives","mb":475,"ranks":2,"seconds":{}})";
  }
  l = link_from_collectives_json(path);
  ASSERT_FALSE(l.ok());
  EXPECT_NE(l.status().message().find("shm_allreduce"), std::string::npos) << l.status().ToString();
  EXPECT_NE(l.status().message().find(path), std::string::npos);
  std::filesystem::remove(path);
  EXPECT_EQ(link_from_collectives_json(path).status().code(), StatusCode::kNotFound);
}

// `lmtrain plan --hardware cpu --devices 2 --preset gpt2-124m`: the four layouts of the issue,
// each the sum of its terms, ranked by the model.
TEST(StepTime, CpuPlanComparesDpTpPpAndZero3) {
  PlanInputs in;
  in.model = *model::preset("gpt2-124m");
  in.hardware = "cpu";
  in.devices = 2;
  in.seq_len = 256;
  in.micro_batch = 4;
  in.global_batch = 16;
  in.mfu = 0.5;
  auto r = make_plan(in);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->inputs.devices_per_node, 2);  // cpu: the ranks of this machine
  EXPECT_DOUBLE_EQ(r->step_efficiency, 0.5);
  std::map<std::string, StepTime> by_name;
  for (const auto& sc : r->step_scenarios) {
    by_name[sc.name] = sc.time;
    EXPECT_NEAR(sc.time.step, sc.time.compute + sc.time.tp_comm + sc.time.pp_comm + sc.time.bubble + sc.time.dp_comm,
                1e-12 * sc.time.step) << sc.name;
  }
  for (const char* n : {"DP2", "TP2", "PP2", "DP2 ZeRO-3"}) ASSERT_TRUE(by_name.count(n)) << n;
  // Same compute everywhere (same FLOPs on the same 2 devices); the terms that differ are the layouts'.
  EXPECT_DOUBLE_EQ(by_name["DP2"].compute, by_name["TP2"].compute);
  EXPECT_GT(by_name["DP2"].dp_comm, 0);
  EXPECT_EQ(by_name["TP2"].dp_comm, 0);
  EXPECT_GT(by_name["TP2"].tp_comm, 0);
  EXPECT_GT(by_name["PP2"].bubble, 0);
  EXPECT_EQ(by_name["PP2"].micro_batches, 4);  // 16 / 4
  EXPECT_DOUBLE_EQ(by_name["PP2"].bubble, (by_name["PP2"].compute + by_name["PP2"].pp_comm) / 4);
  EXPECT_GT(by_name["DP2 ZeRO-3"].dp_comm, by_name["DP2"].dp_comm);
  // The ranking is the model's: fitting layouts by predicted step time, the chosen one first.
  for (size_t i = 1; i < r->search.ranked.size(); ++i) {
    if (r->search.ranked[i].fits == r->search.ranked[i - 1].fits) {
      EXPECT_LE(r->search.ranked[i - 1].step_seconds, r->search.ranked[i].step_seconds);
    }
  }
  EXPECT_EQ(r->layout.step_seconds, r->search.ranked.front().step_seconds);
  EXPECT_DOUBLE_EQ(r->layout_time.step, r->layout.step_seconds);
  // The JSON carries the same figures.
  const nlohmann::json j = to_json(*r);
  ASSERT_TRUE(j.contains("step_model"));
  EXPECT_EQ(j["step_model"]["scenarios"].size(), r->step_scenarios.size());
  EXPECT_EQ(j["step_model"]["links"]["intra_node"]["name"], "cpu-shm");
}

TEST(StepTime, CpuDefaultEfficiencyIsStated) {
  PlanInputs in;
  in.model = *model::preset("tiny");
  in.hardware = "cpu";
  auto r = make_plan(in);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_DOUBLE_EQ(r->step_efficiency, kDefaultCpuEfficiency);
  EXPECT_NE(r->step_efficiency_source.find("default for cpu"), std::string::npos);
  in.hardware = "h100-sxm";
  r = make_plan(in);
  ASSERT_TRUE(r.ok());
  EXPECT_DOUBLE_EQ(r->step_efficiency, kDefaultMfu);  // GPUs: the plan's MFU
}

}  // namespace
}  // namespace lmt::plan
