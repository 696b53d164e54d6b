// `lmtrain bench model`: forward + backward throughput of a preset, tokens/s and MFU.
//
// MFU = achieved model FLOP/s / the dense peak for the compute dtype (metrics/peaks.h: this machine's,
// cached per machine, or --peak-flops).
// "mfu" counts the detailed training FLOPs (matmuls incl. attention over the full T×T, PaLM's
// convention); "mfu_6n" counts 6·N per token.
#include <algorithm>
#include <cstdio>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_stats.h"
#include "backend_flag.h"
#include "commands.h"
#include "lmt/base/rng.h"
#include "lmt/base/timer.h"
#include "lmt/metrics/hardware.h"
#include "lmt/metrics/peaks.h"
#include "lmt/model/flops.h"
#include "lmt/model/transformer.h"
#include "lmt/tensor/compute_dtype.h"

namespace lmt::cli {
namespace {

struct ModelBenchArgs {
  std::string preset = "gpt2-124m";
  int64_t batch = 4, seq = 256;
  std::string dtype = "bf16";
  std::string attention = "flash";
  std::string backend = "cpu";
  bool recompute = false;
  int warmup = 1, iters = 5;
  double peak_gflops = 0;  // --peak-flops; 0: this machine's peak
  CLI::Option* peak_flag = nullptr;
  bool json = false;
};

Status run_model_bench(const ModelBenchArgs& a) {
  LMT_ASSIGN_OR_RETURN(model::ModelConfig config, model::preset(a.preset));
  if (a.batch <= 0 || a.seq <= 0 || a.seq > config.max_seq_len)
    return InvalidArgument("--micro-batch must be positive and --seq-len in [1, " + std::to_string(config.max_seq_len) + "]",
                           "the preset's max_seq_len bounds --seq-len");
  model::RunOptions o;
  LMT_ASSIGN_OR_RETURN(o.compute, parse_compute_dtype(a.dtype, "--dtype"));
  if (a.attention == "flash") o.attention = model::AttentionChoice::kFlash;
  else if (a.attention == "naive") o.attention = model::AttentionChoice::kNaive;
  else if (a.attention == "auto") o.attention = model::AttentionChoice::kAuto;
  else return InvalidArgument("--attention '" + a.attention + "' is unknown", "use auto, flash or naive");
  o.recompute = a.recompute;
  if (a.peak_flag != nullptr && a.peak_flag->count() > 0) LMT_RETURN_IF_ERROR(metrics::check_peak_gflops(a.peak_gflops, "--peak-flops"));
  LMT_RETURN_IF_ERROR(check_flag("--micro-batch", a.batch, 1, int64_t{1} << 20));
  LMT_RETURN_IF_ERROR(check_flag("--warmup", a.warmup, 0, 1000000, "untimed steps"));
  LMT_RETURN_IF_ERROR(check_flag("--iters", a.iters, 1, 1000000, "timed steps"));
  LMT_RETURN_IF_ERROR(check_omp_num_threads());
  LMT_RETURN_IF_ERROR(model::activation_memory_check(
      config, a.batch, a.seq, o, 8.0 * config.param_count_estimate() + (o.compute == DType::kBF16 ? 2.0 : 0.0) * config.param_count_estimate(),
      "--preset " + a.preset + " --micro-batch " + std::to_string(a.batch) + " --seq-len " + std::to_string(a.seq),
      "lower --micro-batch or --seq-len, or pass --recompute"));

  LMT_ASSIGN_OR_RETURN(kernels::Backend* be, backend_from_flag(a.backend));
  model::Transformer m(config, *be);
  m.init(1);
  m.prepare(a.batch, a.seq, o);
  const int64_t N = a.batch * a.seq;
  std::vector<int32_t> tokens(N), targets(N);
  Rng rng(2);
  for (int64_t i = 0; i < N; ++i) {
    tokens[i] = static_cast<int32_t>(rng.below(config.vocab_size));
    targets[i] = static_cast<int32_t>(rng.below(config.vocab_size));
  }
  std::vector<double> fwd, bwd;
  for (int i = 0; i < a.warmup + a.iters; ++i) {
    Timer t;
    m.forward(tokens.data(), targets.data(), nullptr, true);
    const double tf = t.seconds();
    m.backward();
    if (i >= a.warmup) {
      fwd.push_back(tf);
      bwd.push_back(t.seconds() - tf);
    }
  }
  std::vector<double> step(fwd.size());
  for (size_t i = 0; i < fwd.size(); ++i) step[i] = fwd[i] + bwd[i];
  const double secs = median(step);
  const double tokens_per_s = static_cast<double>(N) / secs;
  const model::FlopsPerToken f = model::flops_per_token(config, a.seq);
  const double peak = metrics::peak_flops(o.compute, {.override_gflops = a.peak_gflops});
  const double mfu = f.training * tokens_per_s / peak, mfu_6n = f.six_n * tokens_per_s / peak;
  const size_t arena = m.arena().capacity(), ws = be->workspace_bytes();
  if (a.json) {
    nlohmann::json j = {{"bench", "model"}, {"preset", a.preset}, {"backend", a.backend}, {"batch", a.batch}, {"seq", a.seq},
                        {"dtype", a.dtype}, {"attention", a.attention}, {"recompute", a.recompute},
                        {"params", config.param_count()}, {"seconds", secs},
                        {"seconds_forward", median(fwd)}, {"seconds_backward", median(bwd)},
                        {"tokens_per_s", tokens_per_s}, {"mfu", mfu}, {"mfu_6n", mfu_6n},
                        {"tflops", f.training * tokens_per_s * 1e-12}, {"peak_tflops", peak * 1e-12},
                        {"activation_bytes", arena}, {"workspace_bytes", ws},
                        {"threads", metrics::cpu_info().threads}, {"machine", metrics::machine_summary()}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("machine: %s\n", metrics::machine_summary().c_str());
    std::printf("model %s (%.1fM params) B=%lld T=%lld %s, attention %s%s: forward %.1f ms + backward %.1f ms "
                "= %.1f ms/step, %.0f tokens/s, %.2f TFLOP/s, MFU %.1f%% (6N: %.1f%%); activations %.1f MiB, "
                "kernel workspace %.1f MiB\n",
                a.preset.c_str(), config.param_count() / 1e6, static_cast<long long>(a.batch),
                static_cast<long long>(a.seq), a.dtype.c_str(), a.attention.c_str(),
                a.recompute ? ", recompute" : "", median(fwd) * 1e3, median(bwd) * 1e3, secs * 1e3, tokens_per_s,
                f.training * tokens_per_s * 1e-12, mfu * 100, mfu_6n * 100, arena / 1048576.0, ws / 1048576.0);
  }
  return Status::Ok();
}

}  // namespace

void add_model_bench(CLI::App* bench, Runner& runner) {
  static ModelBenchArgs mb;
  CLI::App* m = bench->add_subcommand("model", "forward+backward throughput of a model preset (tokens/s, MFU)");
  m->add_option("--preset", mb.preset, "model preset (lmtrain model info lists them)")->capture_default_str();
  m->add_option("--micro-batch", mb.batch, "micro-batch B")->capture_default_str();
  add_deprecated_option(m, "--batch", "--micro-batch", mb.batch);
  m->add_option("--seq-len", mb.seq, "sequence length T")->capture_default_str();
  add_deprecated_option(m, "--seq", "--seq-len", mb.seq);
  m->add_option("--dtype", mb.dtype, "bf16 (mixed precision) or fp32")->capture_default_str();
  m->add_option("--attention", mb.attention, "auto, flash or naive")->capture_default_str();
  m->add_flag("--recompute", mb.recompute, "activation checkpointing per block");
  add_backend_flag(m, mb.backend);
  m->add_option("--warmup", mb.warmup, "untimed steps")->capture_default_str();
  m->add_option("--iters", mb.iters, "timed steps (the median is reported)")->capture_default_str();
  mb.peak_flag = m->add_option("--peak-flops", mb.peak_gflops, "GFLOP/s: dense peak MFU divides by (default: this machine's, cached)");
  m->add_flag("--json", mb.json, "print one JSON object");
  m->callback([&runner] { runner.set(run_model_bench(mb)); });
}

}  // namespace lmt::cli
