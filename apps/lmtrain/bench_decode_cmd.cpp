// `lmtrain bench decode`: KV-cached decoding speed of a preset (random weights) at --sequences rows,
// against the memory-bandwidth bound (--sequences: the batch).
//
// Each row is prefilled with --context tokens, then --warmup untimed and --steps timed
// Decoder::step() calls run (one new token per row each; no sampling). tokens/s = batch ÷ the
// median step time. The bound: a step reads every GEMM weight once whatever the batch
// (eval::DecodeWeights::bytes_per_token) plus each row's KV cache, so at the measured read bandwidth
// (metrics/bandwidth.h, measured here) a step cannot take less than bytes ÷ bandwidth; the bound in
// tokens/s is batch × bandwidth ÷ bytes, and "of bound" is the measured tokens/s over it.
#include <omp.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench_stats.h"
#include "backend_flag.h"
#include "commands.h"
#include "lmt/base/rng.h"
#include "lmt/base/timer.h"
#include "lmt/eval/decode.h"
#include "lmt/metrics/bandwidth.h"
#include "lmt/metrics/hardware.h"
#include "lmt/model/config.h"
#include "lmt/model/transformer.h"
#include "lmt/tensor/compute_dtype.h"

namespace lmt::cli {
namespace {

struct DecodeBenchArgs {
  std::string preset = "gpt2-124m", decode_dtype = "bf16", backend = "cpu";
  int64_t batch = 1, context = 16;
  int warmup = 3, steps = 32;
  bool json = false;
};

Status run_decode_bench(const DecodeBenchArgs& a) {
  LMT_ASSIGN_OR_RETURN(model::ModelConfig c, model::preset(a.preset));
  LMT_ASSIGN_OR_RETURN(const DType weights, parse_compute_dtype(a.decode_dtype, "--decode-dtype"));
  LMT_RETURN_IF_ERROR(check_flag("--sequences", a.batch, 1, 256, "sequences decoded side by side"));
  LMT_RETURN_IF_ERROR(check_flag("--warmup", a.warmup, 0, 100000, "untimed steps"));
  LMT_RETURN_IF_ERROR(check_flag("--steps", a.steps, 1, 100000, "timed steps (the median is reported)"));
  LMT_RETURN_IF_ERROR(check_flag("--context", a.context, 1, c.max_seq_len - 1, "prompt tokens per row before the timed steps"));
  if (a.context + a.warmup + a.steps > c.max_seq_len)
    return InvalidArgument("--context + --warmup + --steps = " + std::to_string(a.context + a.warmup + a.steps) +
                               " exceeds the preset's max_seq_len " + std::to_string(c.max_seq_len),
                           "use fewer steps or a shorter context");
  LMT_RETURN_IF_ERROR(check_omp_num_threads());
  const int64_t max_len = a.context + a.warmup + a.steps;
  LMT_RETURN_IF_ERROR(check_fits_in_memory(
      8.0 * c.param_count_estimate() +
          2.0 * 4 * static_cast<double>(c.n_layers * max_len * c.kv_dim()) * static_cast<double>(a.batch),
      "--preset " + a.preset, "pick a smaller preset or fewer --sequences"));
  LMT_ASSIGN_OR_RETURN(kernels::Backend* be, backend_from_flag(a.backend));
  if (!be->device().is_host())  // the bound below is the host's memory bandwidth
    return Unimplemented("bench decode on the '" + std::string(be->name()) +
                             "' backend is not supported yet: its bound is measured from host memory bandwidth",
                         "use --backend cpu (lmtrain generate runs on the GPU)");
  model::Transformer m(c, *be);
  m.init(1);
  eval::Decoder d(m, max_len, /*prefill_chunk=*/64, weights, a.batch);
  const int64_t V = c.vocab_size;
  Rng rng(7);
  std::vector<int32_t> ids(static_cast<size_t>(a.context));
  for (int64_t r = 0; r < a.batch; ++r) {
    for (int32_t& id : ids) id = static_cast<int32_t>(rng.below(static_cast<uint64_t>(V)));
    d.forward(ids, nullptr, r);
  }
  std::vector<int32_t> next(static_cast<size_t>(a.batch));
  std::vector<float> logits(static_cast<size_t>(a.batch * V));
  std::vector<double> t;
  for (int s = 0; s < a.warmup + a.steps; ++s) {
    for (int32_t& id : next) id = static_cast<int32_t>(rng.below(static_cast<uint64_t>(V)));
    Timer timer;
    d.step(next, logits.data());
    if (s >= a.warmup) t.push_back(timer.seconds());
  }
  const double step_s = median(t), tps = static_cast<double>(a.batch) / step_s;
  const int64_t weight_bytes = d.weights().bytes_per_token();
  // KV cache read per step at the middle of the timed steps: K and V of every layer and row.
  const int64_t kv_bytes =
      2 * 4 * c.n_layers * c.kv_dim() * (a.context + a.warmup + a.steps / 2) * a.batch;
  const metrics::Bandwidth bw = metrics::measure_read_bandwidth();
  const double bound_tps = static_cast<double>(a.batch) * bw.read_gb_per_s * 1e9 / static_cast<double>(weight_bytes + kv_bytes);
  if (a.json) {
    const nlohmann::json j = {{"bench", "decode"},
                              {"preset", a.preset},
                              {"backend", a.backend},
                              {"decode_dtype", compute_dtype_name(weights)},
                              {"sequences", a.batch},
                              {"context", a.context},
                              {"steps", a.steps},
                              {"step_seconds", step_s},
                              {"tokens_per_s", tps},
                              {"weight_bytes_per_step", weight_bytes},
                              {"kv_bytes_per_step", kv_bytes},
                              {"read_bandwidth_gb_per_s", bw.read_gb_per_s},
                              {"bound_tokens_per_s", bound_tps},
                              {"fraction_of_bound", tps / bound_tps},
                              {"threads", omp_get_max_threads()},
                              {"machine", metrics::machine_summary()}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("machine: %s\n", metrics::machine_summary().c_str());
    std::printf("decode %s, %s weights, %lld sequences, context %lld, median of %d steps: %.2f ms/step, %.1f tokens/s\n",
                a.preset.c_str(), std::string(compute_dtype_name(weights)).c_str(), static_cast<long long>(a.batch),
                static_cast<long long>(a.context), a.steps, step_s * 1e3, tps);
    std::printf("bound: %.1f MB weights + %.1f MB KV per step at %.1f GB/s read bandwidth (%d threads) = %.1f tokens/s; "
                "measured = %.0f%% of the bound\n",
                weight_bytes / 1e6, kv_bytes / 1e6, bw.read_gb_per_s, bw.threads, bound_tps, 100.0 * tps / bound_tps);
  }
  return Status::Ok();
}

}  // namespace

void add_decode_bench(CLI::App* bench, Runner& runner) {
  static DecodeBenchArgs db;
  CLI::App* t = bench->add_subcommand("decode", "KV-cached decoding tokens/s of N sequences side by side, against the memory-bandwidth bound");
  t->add_option("--preset", db.preset, "model preset (random weights)")->capture_default_str();
  t->add_option("--sequences", db.batch, "sequences decoded side by side (the batch)")->capture_default_str();
  t->add_option("--decode-dtype", db.decode_dtype, "GEMM weights: bf16 or fp32")->capture_default_str();
  t->add_option("--context", db.context, "prompt tokens per row before timing")->capture_default_str();
  add_backend_flag(t, db.backend);
  t->add_option("--warmup", db.warmup, "untimed steps")->capture_default_str();
  t->add_option("--steps", db.steps, "timed steps (the median is reported)")->capture_default_str();
  t->add_flag("--json", db.json, "print one JSON object");
  t->callback([&runner] { runner.set(run_decode_bench(db)); });
}

}  // namespace lmt::cli
