// `lmtrain plan`: feasibility, memory and parallelism planning before renting hardware.
//
// Flags are a stable interface (scripts rely on them; see docs/PLAN.md). Unknown or malformed flags
// are usage errors (exit 2, CLI11); values that parse but make no sense (unknown hardware, TP not
// dividing the heads, MFU above 1) are Status errors with a hint (exit 1). `--json` prints one JSON
// object (lmt/plan/plan.h: to_json); otherwise a table.
#include <cstdio>
#include <string>

#include <CLI/CLI.hpp>

#include "commands.h"
#include "lmt/metrics/device_peaks.h"
#include "lmt/plan/emit_config.h"
#include "lmt/plan/model_source.h"
#include "lmt/plan/plan.h"

namespace lmt::cli {
namespace {

struct PlanArgs {
  std::string model, hardware, precision = "bf16", mfu_from, flops_basis = "detailed", attention = "flash";
  std::string emit_config, collectives;
  double params = 0, hours = 0, tokens = 0, mfu = 0, throughput = 0, price = 0;
  int64_t devices = 1, devices_per_node = 0, seq_len = 0, micro_batch = 1, global_batch = 0, tp = 1, pp = 1, ep = 1;
  int zero = 0;
  bool recompute = false, no_flash = false, json = false;
  // Which optional flags were given.
  CLI::Option *o_hours = nullptr, *o_tokens = nullptr, *o_mfu = nullptr, *o_throughput = nullptr, *o_price = nullptr,
              *o_tp = nullptr, *o_pp = nullptr, *o_params = nullptr;
};

Status run_plan(const PlanArgs& a) {
  plan::PlanInputs in;
  if (!a.model.empty()) {
    LMT_ASSIGN_OR_RETURN(in.model, plan::load_model(a.model));
  } else if (a.o_params->count() > 0) {
    if (!(a.params > 0)) return InvalidArgument("--params must be positive", "e.g. --params 7e9");
    in.params = a.params;
  }
  in.hardware = a.hardware;
  in.devices = a.devices;
  in.devices_per_node = a.devices_per_node;
  in.precision = a.precision;
  if (a.o_hours->count()) in.hours = a.hours;
  if (a.o_tokens->count()) in.tokens = a.tokens;
  if (a.o_throughput->count()) in.throughput = a.throughput;
  if (a.o_price->count()) in.price = a.price;
  if (a.o_mfu->count()) in.mfu = a.mfu;
  if (!a.mfu_from.empty()) {
    LMT_ASSIGN_OR_RETURN(in.mfu, plan::mfu_from_metrics(a.mfu_from));
    in.mfu_source = "measured: " + a.mfu_from;
  }
  if (a.flops_basis == "detailed") in.flops_basis = plan::FlopsBasis::kDetailed;
  else if (a.flops_basis == "6n") in.flops_basis = plan::FlopsBasis::kSixN;
  else return InvalidArgument("--flops-basis '" + a.flops_basis + "' is unknown", "use detailed or 6n");
  in.seq_len = a.seq_len;
  in.micro_batch = a.micro_batch;
  in.global_batch = a.global_batch;
  in.zero_stage = a.zero;
  if (a.o_tp->count()) in.tp = a.tp;
  if (a.o_pp->count()) in.pp = a.pp;
  in.ep = a.ep;
  in.recompute = a.recompute;
  if (a.no_flash) in.flash_attention = false;
  else if (a.attention == "flash") in.flash_attention = true;
  else if (a.attention == "naive") in.flash_attention = false;
  else return UsageError("--attention '" + a.attention + "' is unknown", "use flash or naive");
  in.collectives_file = a.collectives;
  LMT_ASSIGN_OR_RETURN(plan::PlanReport report, plan::make_plan(in));
  if (a.emit_config == "-") return plan::emit_layout_config(report, "-");  // stdout holds the fragment only
  if (a.json) std::printf("%s\n", plan::to_json(report).dump().c_str());
  else std::printf("%s", plan::format_report(report).c_str());
  if (!a.emit_config.empty()) {
    std::fflush(stdout);
    LMT_RETURN_IF_ERROR(plan::emit_layout_config(report, a.emit_config));
    std::fprintf(stderr, "wrote the layout (TP %lld, PP %lld, DP %lld) to %s\n", static_cast<long long>(report.layout.tp),
                 static_cast<long long>(report.layout.pp), static_cast<long long>(report.layout.dp), a.emit_config.c_str());
  }
  return Status::Ok();
}

}  // namespace

void add_plan_command(CLI::App& app, Runner& runner) {
  static PlanArgs a;
  std::string hw_names;
  for (const auto& n : metrics::device_names()) hw_names += (hw_names.empty() ? "" : ", ") + n;
  CLI::App* p = app.add_subcommand("plan", "feasibility, memory and parallelism planning");
  CLI::Option* model = p->add_option("--preset", a.model, "model preset name or a .json model config file");
  CLI::Option* model_old = add_deprecated_option(p, "--model", "--preset", a.model);
  model_old->excludes(model);
  a.o_params = p->add_option("--params", a.params, "parameter count instead of a model (6N FLOPs; no activations)");
  model->excludes(a.o_params);
  model_old->excludes(a.o_params);
  p->add_option("--hardware", a.hardware, "device: " + hw_names)->required();
  p->add_option("--devices", a.devices, "number of devices")->capture_default_str();
  p->add_option("--devices-per-node", a.devices_per_node, "devices per node (default: min(devices, 8); cpu: 1)");
  p->add_option("--precision", a.precision, "bf16, fp8, fp32 or tf32")->capture_default_str();
  a.o_hours = p->add_option("--hours", a.hours, "time budget in hours");
  a.o_tokens = p->add_option("--tokens", a.tokens, "token target (default without --hours: 20 tokens/param)");
  a.o_mfu = p->add_option("--mfu", a.mfu, "assumed model FLOPs utilisation, a fraction (default 0.4)");
  CLI::Option* mfu_from = p->add_option("--mfu-from", a.mfu_from, "read the MFU from a run's metrics.jsonl");
  mfu_from->excludes(a.o_mfu);
  a.o_throughput = p->add_option("--throughput", a.throughput, "claimed cluster tokens/s: reports the implied MFU");
  p->add_option("--flops-basis", a.flops_basis, "FLOPs per token for time and MFU: detailed or 6n")->capture_default_str();
  p->add_option("--seq-len", a.seq_len, "sequence length (default: min(max_seq_len, 4096))");
  p->add_option("--micro-batch", a.micro_batch, "sequences per micro-batch per device")->capture_default_str();
  p->add_option("--global-batch", a.global_batch, "sequences per optimizer step (default: ~1M tokens)");
  p->add_option("--zero", a.zero, "ZeRO stage 0-3")->capture_default_str();
  a.o_tp = p->add_option("--tp", a.tp, "tensor-parallel degree (default: best of the search)");
  a.o_pp = p->add_option("--pp", a.pp, "pipeline-parallel degree (default: best of the search)");
  p->add_option("--ep", a.ep, "expert-parallel degree for MoE models, within DP: routed experts split over EP ranks "
                              "(divides DP and moe.num_experts)")->capture_default_str();
  p->add_flag("--recompute", a.recompute, "full activation checkpointing");
  CLI::Option* attention = p->add_option("--attention", a.attention, "flash, or naive: attention materialises the s x s probabilities")->capture_default_str();
  CLI::Option* no_flash = p->add_flag("--no-flash", a.no_flash, "deprecated: use --attention naive")->group("");
  no_flash->each([](const std::string&) { std::fprintf(stderr, "lmtrain: warning: --no-flash is deprecated, use --attention naive\n"); });
  no_flash->excludes(attention);
  a.o_price = p->add_option("--price", a.price, "USD per device-hour");
  p->add_flag("--json", a.json, "print one compact JSON object");
  p->add_option("--emit-config", a.emit_config,
                "write the chosen layout as a recipe fragment (parallel.*, train.zero/micro_batch/grad_accum/seq_len/"
                "recompute) for lmtrain train --config RECIPE --config FILE; - prints only it; never overwrites");
  p->add_option("--collectives", a.collectives,
                "the intra-node link of the step-time model from `lmtrain bench collectives --json` output saved to a file");
  p->callback([&runner] { runner.set(run_plan(a)); });
}

}  // namespace lmt::cli
