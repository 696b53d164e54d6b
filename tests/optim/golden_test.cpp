// Golden tests: lmtrain's AdamW and Muon against PyTorch over five steps of the tiny layout that
// tests/optim/golden/optim_golden_common.py describes (torch.optim.AdamW with two param groups; a
// transcription of Keller Jordan's Muon reference). Regenerate the .safetensors files with
//   /usr/bin/python3 tests/optim/golden/make_adamw_golden.py
//   /usr/bin/python3 tests/optim/golden/make_muon_golden.py
//
// Tolerances (elementwise |got − want| <= rtol·|want| + rtol·max|want| over the tensor, the second
// term so that entries that cancel to ~0 are judged on the tensor's scale):
//   AdamW: rtol 1e-6. PyTorch and lmtrain run the same f32 arithmetic in a different order
//          (decay before vs fused with the step, sqrt(v)/sqrt(bc2) vs sqrt(v/bc2)): ~1 ulp per op.
//   Muon:  rtol 1e-5. Five Newton–Schulz iterations of f32 GEMMs (oneDNN or the ref backend vs
//          PyTorch's) amplify per-op rounding somewhat; measured errors are below 1e-6.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include "lmt/io/safetensors.h"
#include "lmt/kernels/registry.h"
#include "lmt/optim/optimizer.h"

namespace lmt::optim {
namespace {

using model::ParamInfo;
using model::ParamRole;

const std::string kGoldenDir = LMT_OPTIM_GOLDEN_DIR;

// The tiny config of optim_golden_common.py (kept in step by LayoutMatchesTheScript).
model::ModelConfig golden_model() {
  model::ModelConfig c = *model::preset("tiny");
  c.name = "optim_golden";
  c.vocab_size = 20;
  c.vocab_pad_to = 32;
  c.max_seq_len = 16;
  c.n_layers = 1;
  c.d_model = 8;
  c.n_heads = 2;
  c.n_kv_heads = 1;
  c.head_dim = 8;
  c.ffn_hidden = 12;
  c.positions = model::PositionKind::kLearned;
  c.qk_norm = true;
  c.attn_bias = true;
  c.tied_embeddings = false;
  return c;
}

const char* role_name(ParamRole r) {
  switch (r) {
    case ParamRole::kEmbedding:
      return "embedding";
    case ParamRole::kPosition:
      return "position";
    case ParamRole::kLmHead:
      return "lm_head";
    case ParamRole::kMatrix:
      return "matrix";
    case ParamRole::kNorm:
      return "norm";
    case ParamRole::kBias:
      return "bias";
  }
  return "?";
}

struct Golden {
  io::SafetensorsFile file;
  nlohmann::json config, layout;
};

Golden open_golden(const std::string& name) {
  auto f = io::SafetensorsFile::open(kGoldenDir + "/" + name);
  LMT_CHECK(f.ok()) << f.status().ToString();
  Golden g{std::move(f).value(), {}, {}};
  g.config = nlohmann::json::parse(g.file.metadata().at("config"));
  g.layout = nlohmann::json::parse(g.file.metadata().at("layout"));
  return g;
}

OptimizerConfig optimizer_config(const nlohmann::json& j) {
  OptimizerConfig c;
  c.name = j.at("name");
  c.lr = j.at("lr");
  c.beta1 = j.at("beta1");
  c.beta2 = j.at("beta2");
  c.eps = j.at("eps");
  c.weight_decay = j.at("weight_decay");
  c.decay_embeddings = j.at("decay_embeddings");
  if (c.name == "muon") {
    c.muon_lr = j.at("muon_lr");
    c.muon_momentum = j.at("muon_momentum");
    c.muon_nesterov = j.at("muon_nesterov");
    c.muon_ns_steps = j.at("muon_ns_steps");
    c.muon_weight_decay = j.at("muon_weight_decay");
  }
  return c;
}

// Copies golden tensor `key` into buf at p's offset.
void load(const Golden& g, const std::string& key, const ParamInfo& p, float* buf) {
  const Status s = g.file.read_f32(key, buf + p.offset, p.numel);
  ASSERT_TRUE(s.ok()) << s.ToString();
}

// Largest |got − want| / (|want| + max|want|) over p's elements (the scaled error the tolerance bounds).
double scaled_error(const Golden& g, const std::string& key, const ParamInfo& p, const float* got) {
  std::vector<float> want(p.numel);
  EXPECT_TRUE(g.file.read_f32(key, want.data(), p.numel).ok()) << key;
  double scale = 0, worst = 0;
  for (float w : want) scale = std::max(scale, static_cast<double>(std::fabs(w)));
  for (int64_t i = 0; i < p.numel; ++i)
    worst = std::max(worst, std::fabs(got[p.offset + i] - want[i]) / (std::fabs(want[i]) + scale + 1e-30));
  return worst;
}

// Runs the golden's five steps on `backend` and compares parameters and state within rtol.
void run_golden(const std::string& file, kernels::Backend& backend, double rtol) {
  SCOPED_TRACE(file + " on " + std::string(backend.name()));
  const Golden g = open_golden(file);
  const model::ParamLayout layout(golden_model());
  const OptimizerConfig cfg = optimizer_config(g.config);
  auto opt = Optimizer::create(cfg, layout, backend);
  ASSERT_TRUE(opt.ok()) << opt.status().ToString();

  const int64_t n = layout.total_numel();
  Tensor params(Shape{n}, DType::kF32), grads(Shape{n}, DType::kF32), mirror(Shape{n}, DType::kBF16);
  for (const ParamInfo& p : layout.params()) load(g, "init." + p.name, p, params.as<float>());
  const auto lr_mults = g.config.at("lr_mults").get<std::vector<float>>();
  const auto grad_scales = g.config.at("grad_scales").get<std::vector<float>>();
  const int steps = g.config.at("steps");
  for (int k = 1; k <= steps; ++k) {
    for (const ParamInfo& p : layout.params()) load(g, "grad" + std::to_string(k) + "." + p.name, p, grads.as<float>());
    (*opt)->step(params, grads, mirror, lr_mults[k - 1], grad_scales[k - 1], k);
  }

  std::map<std::string, TensorView> state;
  for (auto& [name, view] : (*opt)->state()) state[name] = view;
  const bool muon = cfg.name == "muon";
  double worst = 0;
  auto expect_close = [&](const std::string& key, const ParamInfo& p, const TensorView& got) {
    const double e = scaled_error(g, key, p, got.as<float>());
    EXPECT_LE(e, rtol) << key;
    worst = std::max(worst, e);
  };
  for (const ParamInfo& p : layout.params()) {
    SCOPED_TRACE(p.name);
    expect_close("final.param." + p.name, p, params);
    if (muon && p.role == ParamRole::kMatrix) {
      expect_close("final.muon.momentum." + p.name, p, state.at("muon.momentum"));
    } else {
      expect_close("final.adam.m." + p.name, p, state.at("adam.m"));
      expect_close("final.adam.v." + p.name, p, state.at("adam.v"));
    }
    // Vocabulary padding rows: zero grads, so exactly zero values and state.
    if (p.role == ParamRole::kEmbedding || p.role == ParamRole::kLmHead) {
      const int64_t live = golden_model().vocab_size * p.shape[1];
      for (int64_t i = p.offset + live; i < p.offset + p.numel; ++i) {
        ASSERT_EQ(params.as<float>()[i], 0.0f) << "padding element " << i - p.offset;
        ASSERT_EQ(state.at("adam.m").as<float>()[i], 0.0f);
        ASSERT_EQ(state.at("adam.v").as<float>()[i], 0.0f);
      }
    }
    // The bf16 mirror is the new master weight, rounded.
    for (int64_t i = p.offset; i < p.offset + p.numel; ++i)
      ASSERT_EQ(mirror.as<bf16>()[i].bits, bf16::round_from_float(params.as<float>()[i])) << i - p.offset;
  }
  std::cout << file << " on " << backend.name() << ": worst scaled error " << worst << " (tolerance " << rtol << ")\n";
}

TEST(OptimGolden, LayoutMatchesTheScript) {
  const Golden g = open_golden("adamw_golden.safetensors");
  const model::ParamLayout layout(golden_model());
  ASSERT_EQ(g.layout.size(), layout.params().size());
  for (size_t i = 0; i < layout.params().size(); ++i) {
    const ParamInfo& p = layout.params()[i];
    const auto& want = g.layout[i];
    EXPECT_EQ(want[0].get<std::string>(), p.name);
    const auto shape = want[1].get<std::vector<int64_t>>();
    ASSERT_EQ(static_cast<int>(shape.size()), p.shape.rank()) << p.name;
    for (int d = 0; d < p.shape.rank(); ++d) EXPECT_EQ(shape[d], p.shape[d]) << p.name;
    EXPECT_EQ(want[2].get<std::string>(), role_name(p.role)) << p.name;
  }
}

TEST(OptimGolden, AdamWMatchesTorchAdamW) {
  for (kernels::Backend* b : {&kernels::cpu_backend(), &kernels::ref_backend()})
    run_golden("adamw_golden.safetensors", *b, 1e-6);
}

TEST(OptimGolden, MuonMatchesTheReference) {
  for (kernels::Backend* b : {&kernels::cpu_backend(), &kernels::ref_backend()})
    run_golden("muon_golden.safetensors", *b, 1e-5);
}

TEST(OptimGolden, MuonWithoutNesterovMatchesTheReference) {
  for (kernels::Backend* b : {&kernels::cpu_backend(), &kernels::ref_backend()})
    run_golden("muon_plain_golden.safetensors", *b, 1e-5);
}

}  // namespace
}  // namespace lmt::optim
