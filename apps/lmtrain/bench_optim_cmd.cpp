// `lmtrain bench optim`: the optimizer update alone of a preset's full parameter buffer (random
// gradients, the bf16 mirror refreshed as in training): AdamW, then Muon (hidden matrices by
// batched Newton–Schulz, AdamW for the rest), each warmed up and timed over --iters steps, and the
// two passes over the gradients every step makes beside the update (global norm, zeroing). Prints
// the medians and Muon / AdamW, the figure issue #21 targets (<= 2 on gpt2-124m); with
// --ns-method both (the default), Muon's Gram and standard Newton–Schulz side by side. On a device
// backend (--backend cuda) the buffers live on the device and each step is timed to completion.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend_flag.h"
#include "bench_stats.h"
#include "commands.h"
#include "lmt/base/limits.h"
#include "lmt/base/rng.h"
#include "lmt/metrics/hardware.h"
#include "lmt/model/params.h"
#include "lmt/model/config.h"
#include "lmt/optim/gradients.h"
#include "lmt/optim/optimizer.h"
#include "lmt/tensor/tensor.h"

namespace lmt::cli {
namespace {

struct OptimBenchArgs {
  std::string preset = "gpt2-124m", ns_dtype = "bf16", ns_method = "both", backend = "cpu";
  int warmup = 1, iters = 5, ns_steps = 5;
  bool json = false;
};

// Median seconds of one Optimizer::step of `name` over the whole buffer.
StatusOr<double> time_optimizer(const OptimBenchArgs& a, const std::string& name, const std::string& ns_method,
                                const model::ParamLayout& layout, kernels::Backend& be, Tensor& params, Tensor& grads,
                                Tensor& mirror) {
  optim::OptimizerConfig c;
  c.name = name;
  c.muon_ns_dtype = a.ns_dtype;
  c.muon_ns_method = ns_method;
  c.muon_ns_steps = a.ns_steps;
  LMT_ASSIGN_OR_RETURN(std::unique_ptr<optim::Optimizer> opt, optim::Optimizer::create(c, layout, be));
  int64_t update = 0;  // warm-up steps count as updates too
  return time_it(be, a.warmup, a.iters, [&] { opt->step(params, grads, mirror, 1.0f, 1.0f, ++update); }).median;
}

// n values Normal(0, scale²) where `be` computes: made on the host (and copied to a device).
Tensor random_values(kernels::Backend& be, int64_t n, Rng& rng, double scale) {
  Tensor host(Shape{n}, DType::kF32);
  for (int64_t i = 0; i < n; ++i) host.as<float>()[i] = static_cast<float>(rng.normal() * scale);
  if (be.device().is_host()) return host;
  Tensor t(Shape{n}, DType::kF32, be.allocator());
  be.copy(t, host);
  return t;
}

Status run_optim_bench(const OptimBenchArgs& a) {
  LMT_ASSIGN_OR_RETURN(model::ModelConfig config, model::preset(a.preset));
  LMT_RETURN_IF_ERROR(check_flag("--warmup", a.warmup, 0, 1000000, "untimed steps"));
  LMT_RETURN_IF_ERROR(check_flag("--iters", a.iters, 1, 1000000, "timed steps"));
  LMT_RETURN_IF_ERROR(check_flag("--ns-steps", a.ns_steps, 1, 100, "Newton-Schulz iterations, 5 by default"));
  if (a.ns_dtype != "bf16" && a.ns_dtype != "fp32")
    return InvalidArgument("--ns-dtype '" + a.ns_dtype + "' is not a Newton-Schulz precision", "use bf16 or fp32");
  if (a.ns_method != "both" && !optim::parse_ns_method(a.ns_method))
    return InvalidArgument("--ns-method '" + a.ns_method + "' is not a Newton-Schulz method",
                           "use gram, standard or both");
  LMT_RETURN_IF_ERROR(check_omp_num_threads());
  const model::ParamLayout layout(config);
  const int64_t n = layout.total_numel();
  // params, grads, mirror, AdamW's two moments or Muon's momentum, and Muon's batch scratch.
  LMT_RETURN_IF_ERROR(check_fits_in_memory(26.0 * static_cast<double>(n), "--preset " + a.preset,
                                           "pick a smaller preset"));
  LMT_ASSIGN_OR_RETURN(kernels::Backend* be, backend_from_flag(a.backend));
  Rng rng(5);
  Tensor params = random_values(*be, n, rng, 0.02), grads = random_values(*be, n, rng, 1e-3);
  Tensor mirror(Shape{n}, DType::kBF16, be->allocator());
  // The two passes over the gradients around every update: the global norm before it (clipping),
  // and the zeroing that starts the next step (on a copy: the optimizers need the gradients).
  const double grad_norm = time_it(*be, a.warmup, a.iters, [&] { optim::global_grad_norm(*be, grads); }).median;
  double zero_grads = 0;
  {
    Tensor scratch_grads(Shape{n}, DType::kF32, be->allocator());
    zero_grads = time_it(*be, a.warmup, a.iters, [&] { be->fill(scratch_grads, 0.0); }).median;
  }
  LMT_ASSIGN_OR_RETURN(const double adamw, time_optimizer(a, "adamw", "gram", layout, *be, params, grads, mirror));
  // The method Muon runs by default (gram) first; with "both", then the standard iteration.
  const std::vector<std::string> methods =
      a.ns_method == "both" ? std::vector<std::string>{"gram", "standard"} : std::vector<std::string>{a.ns_method};
  std::vector<double> muon;
  for (const std::string& m : methods) {
    LMT_ASSIGN_OR_RETURN(const double s, time_optimizer(a, "muon", m, layout, *be, params, grads, mirror));
    muon.push_back(s);
  }
  // What --ns-dtype runs as on this backend ("bf16" runs in f32 where bf16 GEMMs are widened).
  const optim::NsPrecision precision = optim::ns_precision(a.ns_dtype, *be);
  if (a.json) {
    nlohmann::json j = {{"bench", "optim"},           {"preset", a.preset},     {"backend", a.backend},
                        {"params", config.param_count()}, {"muon_ns_dtype", a.ns_dtype}, {"ns_steps", a.ns_steps},
                        {"muon_ns_method", methods[0]}, {"iters", a.iters},     {"adamw_seconds", adamw},
                        {"muon_seconds", muon[0]},    {"muon_over_adamw", muon[0] / adamw},
                        {"grad_norm_seconds", grad_norm}, {"zero_grads_seconds", zero_grads},
                        {"threads", metrics::cpu_info().threads}, {"machine", metrics::machine_summary()}};
    j["muon_ns_precision"] = optim::ns_precision_name(precision);
    if (muon.size() > 1) {
      j["muon_standard_seconds"] = muon[1];
      j["gram_speedup"] = muon[1] / muon[0];
    }
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("machine: %s\n", metrics::machine_summary().c_str());
    std::printf("optimizer step %s (%lld params), median of %d: AdamW %.1f ms\n", a.preset.c_str(),
                static_cast<long long>(config.param_count()), a.iters, adamw * 1e3);
    std::printf("  gradient passes: global norm %.1f ms, zeroing %.1f ms\n", grad_norm * 1e3, zero_grads * 1e3);
    for (size_t i = 0; i < methods.size(); ++i)
      std::printf("  Muon (Newton-Schulz %s, %s, %d steps) %.1f ms; Muon / AdamW = %.2fx\n", methods[i].c_str(),
                  std::string(optim::ns_precision_name(precision)).c_str(), a.ns_steps, muon[i] * 1e3, muon[i] / adamw);
    if (muon.size() > 1) std::printf("  gram / standard: %.2fx faster\n", muon[1] / muon[0]);
  }
  return Status::Ok();
}

}  // namespace

void add_optim_bench(CLI::App* bench, Runner& runner) {
  static OptimBenchArgs ob;
  CLI::App* t = bench->add_subcommand("optim", "optimizer step alone: AdamW vs Muon step time and their ratio");
  t->add_option("--preset", ob.preset, "model preset")->capture_default_str();
  t->add_option("--ns-dtype", ob.ns_dtype,
                "Muon's Newton-Schulz GEMM operands: bf16 or fp32 (bf16 runs in f32 where bf16 GEMMs are not native)")
      ->capture_default_str();
  t->add_option("--ns-steps", ob.ns_steps, "Newton-Schulz iterations")->capture_default_str();
  t->add_option("--ns-method", ob.ns_method, "Muon's Newton-Schulz: gram, standard, or both (timed one after the other)")
      ->capture_default_str();
  add_backend_flag(t, ob.backend);
  t->add_option("--warmup", ob.warmup, "untimed steps of each optimizer")->capture_default_str();
  t->add_option("--iters", ob.iters, "timed steps of each (the median is reported)")->capture_default_str();
  t->add_flag("--json", ob.json, "print one JSON object");
  t->callback([&runner] { runner.set(run_optim_bench(ob)); });
}

}  // namespace lmt::cli
