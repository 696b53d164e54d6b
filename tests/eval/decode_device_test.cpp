// The KV-cache decoder on a device backend: the pretend GPU of tests/common/pretend_device.h (the
// cpu kernels over memory that host code cannot touch: a host read or write of it crashes, as on a
// GPU) against the cpu backend, for every dense tiny model variant and both decode weight dtypes.
// Prefill logits at every position, a prompt's last logits, batched steps (one row sitting out),
// segments over rows, and a sampled generation agree bit for bit: the kernels and the data are the
// same, only where the data lives differs. load_model_dir puts a real model (stories260K) on the
// device and decodes it like the cpu; MoE models decode there too. The GPU's own kernels are
// cuda_op_test's.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "../model/model_test_util.h"
#include "common/pretend_device.h"
#include "common/shared_data.h"
#include "lmt/eval/decode.h"
#include "lmt/eval/generate.h"
#include "lmt/eval/model_dir.h"
#include "lmt/kernels/registry.h"

namespace lmt::eval {
namespace {

test::PretendDeviceBackend& device() {
  static test::PretendDeviceBackend be("pretend_decode", 2);
  return be;
}

void expect_same(const std::vector<float>& want, const std::vector<float>& got, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0) << what << ": logits differ";
}

// Everything a user's decoding does, on one decoder; the logits it saw, in order.
std::vector<std::vector<float>> decode_all(Decoder& d) {
  const int64_t V = d.vocab_size();
  std::vector<std::vector<float>> seen;
  const std::vector<int32_t> prompt0 = {3, 1, 4, 1, 5}, prompt1 = {2, 7, 1};
  std::vector<float> all(prompt0.size() * static_cast<size_t>(V));
  d.forward(prompt0, all.data(), 0);
  seen.push_back(all);
  const auto last = d.forward(prompt1, nullptr, 1);
  seen.emplace_back(last.begin(), last.end());
  std::vector<float> logits(2 * static_cast<size_t>(V));
  for (const std::vector<int32_t>& step : std::vector<std::vector<int32_t>>{{6, 2}, {-1, 8}, {9, 3}}) {
    d.step(step, logits.data());
    seen.push_back(logits);
  }
  // Two continuations of row 0 and one of row 1, the logits after their last two tokens.
  const std::vector<Decoder::Segment> segments = {{0, d.length(0), 3, 1}, {0, d.length(0), 2, 0}, {1, d.length(1), 2, 1}};
  const std::vector<int32_t> tokens = {1, 2, 3, 4, 5, 6, 7};
  std::vector<float> seg((2 + 2 + 1) * static_cast<size_t>(V));
  d.forward_segments(tokens, segments, seg.data(), /*advance=*/false);
  seen.push_back(seg);
  return seen;
}

TEST(DecoderOnADevice, EqualsTheCpuDecoderBitForBit) {
  for (const auto& v : model::testing::tiny_variants()) {
    for (DType weights : {DType::kF32, DType::kBF16}) {
      SCOPED_TRACE(v.name + (weights == DType::kBF16 ? " bf16" : " f32"));
      model::Transformer on_cpu(v.config, kernels::cpu_backend()), on_device(v.config, device());
      on_cpu.init(5);
      on_device.init(5);
      Decoder dc(on_cpu, 16, 64, weights, 2), dd(on_device, 16, 64, weights, 2);
      const auto want = decode_all(dc), got = decode_all(dd);
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < want.size(); ++i) expect_same(want[i], got[i], "call " + std::to_string(i));
      GenerateOptions o;
      o.max_tokens = 6;
      o.sampling.temperature = 0.8f;
      o.sampling.seed = 11;
      const std::vector<int32_t> prompt = {1, 2, 3};
      auto gc = generate(dc, prompt, o, nullptr), gd = generate(dd, prompt, o, nullptr);
      ASSERT_TRUE(gc.ok() && gd.ok());
      EXPECT_EQ(gd->tokens, gc->tokens);
    }
  }
}

// MoE layers on the device: the routing bookkeeping goes through the backend's copies, and the
// selection bias (balance kBiasUpdate) is read from its copy in device memory. A bias that shifts
// the routing makes the check count: a device reading a stale (zero) bias routes differently.
TEST(DecoderOnADevice, MixtureOfExpertsModelsDecodeLikeTheCpu) {
  auto preset = model::preset("tiny-moe");
  ASSERT_TRUE(preset.ok()) << preset.status().ToString();
  model::ModelConfig c = *preset;
  c.n_layers = 2;
  c.moe.balance = model::MoeBalance::kBiasUpdate;
  model::Transformer on_cpu(c, kernels::cpu_backend()), on_device(c, device());
  for (model::Transformer* m : {&on_cpu, &on_device}) {
    m->init(5);
    for (int64_t l = 0; l < c.n_layers; ++l) {
      float* b = m->router_bias(l).as<float>();
      for (int64_t e = 0; e < c.moe.num_experts; ++e) b[e] = e == 3 ? 0.5f : (e == 5 ? -0.5f : 0.0f);
    }
    m->router_bias_written();
  }
  for (DType weights : {DType::kF32, DType::kBF16}) {
    SCOPED_TRACE(weights == DType::kBF16 ? "bf16" : "f32");
    Decoder dc(on_cpu, 16, 64, weights, 2), dd(on_device, 16, 64, weights, 2);
    const auto want = decode_all(dc), got = decode_all(dd);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) expect_same(want[i], got[i], "call " + std::to_string(i));
  }
}

TEST(DecoderOnADevice, LoadModelDirPutsARealModelOnTheDevice) {
  LMT_SKIP_WITHOUT_SHARED("models/stories260K/hf");
  const std::string dir = test::shared_data("models/stories260K/hf");
  auto cpu = load_model_dir(dir, kernels::cpu_backend());
  auto dev = load_model_dir(dir, device());
  ASSERT_TRUE(cpu.ok()) << cpu.status().ToString();
  ASSERT_TRUE(dev.ok()) << dev.status().ToString();
  EXPECT_FALSE(dev->model->params().device().is_host());
  Decoder dc(*cpu->model, 32), dd(*dev->model, 32);
  const std::vector<int32_t> prompt = {1, 403, 407, 261, 378};
  const auto a = dc.forward(prompt), b = dd.forward(prompt);
  expect_same(std::vector<float>(a.begin(), a.end()), std::vector<float>(b.begin(), b.end()), "stories260K");
}

}  // namespace
}  // namespace lmt::eval
