// Golden tests: lmtrain's AdamW and Muon against PyTorch over five steps of the tiny layout that
// tests/optim/golden/optim_golden_common.py describes (torch.optim.AdamW with two param groups; a
// transcription of Keller Jordan's Muon reference). Regenerate the .safetensors files with
//   /usr/bin/python3 tests/optim/golden/make_adamw_golden.py
//   /usr/bin/python3 tests/optim/golden/make_muon_golden.py
//   build/venv/bin/python tests/optim/golden/make_muon_golden.py --bf16   (muon_bf16_golden)
//
// Tolerances (elementwise |got − want| <= rtol·|want| + rtol·max|want| over the tensor, the second
// term so that entries that cancel to ~0 are judged on the tensor's scale):
//   AdamW: rtol 1e-6. PyTorch and lmtrain run the same f32 arithmetic in a different order
//          (decay before vs fused with the step, sqrt(v)/sqrt(bc2) vs sqrt(v/bc2)): ~1 ulp per op.
//   Muon:  rtol 1e-5. Five Newton–Schulz iterations of f32 GEMMs (oneDNN or the ref backend vs
//          PyTorch's) amplify per-op rounding somewhat; measured errors are below 1e-6.
//   Muon, bf16 Newton–Schulz (muon_bf16_golden: muon.py's iteration entirely in bf16, PyTorch
//          2.x; lmtrain rounds only the GEMM operands to bf16 and keeps f32 between GEMMs):
//          momentum is f32 on both sides (rtol 1e-5 still); the parameters move by
//          lr·NS(D), and NS(D) in bf16 carries a relative error of a few bf16 units
//          (2^-8 = 0.4% each) on each side, so params get rtol 2e-3 on their scaled error (the
//          update is ~lr = 0.02 of the tensor's scale, so 2e-3 allows ~10% error in the update:
//          loose enough for two different bf16 roundings, tight enough to catch a wrong
//          coefficient, transpose or step, which moves it by O(1)).
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
    // Goldens made before bf16 Newton–Schulz have no key: they are the f32 iteration.
    c.muon_ns_dtype = j.value("muon_ns_dtype", std::string("fp32"));
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

// Runs the golden's five steps on `backend` and compares state within rtol and parameters within
// param_rtol (rtol when negative).
// ns_dtype, when given, overrides the golden's optim.muon_ns_dtype; worst_param, when given,
// receives the parameters' worst scaled error.
void run_golden(const std::string& file, kernels::Backend& backend, double rtol, double param_rtol = -1,
                const std::string& ns_dtype = "", double* worst_param_out = nullptr) {
  if (param_rtol < 0) param_rtol = rtol;
  SCOPED_TRACE(file + " on " + std::string(backend.name()));
  const Golden g = open_golden(file);
  const model::ParamLayout layout(golden_model());
  OptimizerConfig cfg = optimizer_config(g.config);
  if (!ns_dtype.empty()) cfg.muon_ns_dtype = ns_dtype;
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
  double worst_param = 0;
  auto expect_close = [&](const std::string& key, const ParamInfo& p, const TensorView& got, double tol = -1) {
    const double e = scaled_error(g, key, p, got.as<float>());
    EXPECT_LE(e, tol < 0 ? rtol : tol) << key;
    (tol < 0 ? worst : worst_param) = std::max(tol < 0 ? worst : worst_param, e);
  };
  for (const ParamInfo& p : layout.params()) {
    SCOPED_TRACE(p.name);
    expect_close("final.param." + p.name, p, params, param_rtol);
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
  std::cout << file << " on " << backend.name() << ": worst scaled error " << worst << " (tolerance " << rtol
            << "), parameters " << worst_param << " (tolerance " << param_rtol << ")\n";
  if (worst_param_out != nullptr) *worst_param_out = worst_param;
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

// optim.muon_ns_dtype = "bf16" (the default) against muon.py's bf16 iteration: same inputs as
// muon_golden. Parameters: rtol 5e-3, about twice the reference's own distance from the f32
// iteration (2.2e-3, measured by the next test), since both sides round to bf16, differently.
TEST(OptimGolden, MuonBf16NewtonSchulzMatchesTheBf16Reference) {
  for (kernels::Backend* b : {&kernels::cpu_backend(), &kernels::ref_backend()})
    run_golden("muon_bf16_golden.safetensors", *b, 1e-5, 5e-3);
}

// lmtrain's bf16 Newton–Schulz is at least as exact as the reference's: against the f32 golden
// its parameters' worst scaled error is at most that of muon.py's bf16 iteration (the bf16
// golden's final parameters against the f32 golden's, computed here from the two files).
TEST(OptimGolden, MuonBf16IsAtLeastAsExactAsTheReferenceBf16) {
  const Golden f32 = open_golden("muon_golden.safetensors"), ref16 = open_golden("muon_bf16_golden.safetensors");
  const model::ParamLayout layout(golden_model());
  std::vector<float> ref_params(static_cast<size_t>(layout.total_numel()));
  double reference = 0;
  for (const ParamInfo& p : layout.params()) {
    load(ref16, "final.param." + p.name, p, ref_params.data());
    reference = std::max(reference, scaled_error(f32, "final.param." + p.name, p, ref_params.data()));
  }
  ASSERT_GT(reference, 1e-4) << "the bf16 golden should differ from the f32 one by bf16 rounding";
  for (kernels::Backend* b : {&kernels::cpu_backend(), &kernels::ref_backend()}) {
    double ours = 1e30;
    run_golden("muon_golden.safetensors", *b, 1e-5, reference, "bf16", &ours);
    std::cout << "bf16 Newton-Schulz vs the f32 golden: lmtrain " << ours << ", muon.py's bf16 " << reference << "\n";
  }
}

TEST(OptimGolden, MuonWithoutNesterovMatchesTheReference) {
  for (kernels::Backend* b : {&kernels::cpu_backend(), &kernels::ref_backend()})
    run_golden("muon_plain_golden.safetensors", *b, 1e-5);
}

}  // namespace
}  // namespace lmt::optim
