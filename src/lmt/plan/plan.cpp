#include "lmt/plan/plan.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <thread>

#include "lmt/metrics/hardware.h"

#include "lmt/model/flops.h"

namespace lmt::plan {
namespace {

constexpr int64_t kMaxDevices = 10'000'000;
constexpr int64_t kMaxDevicesPerNode = 65536;
constexpr int64_t kMaxMicroBatch = int64_t{1} << 20;
constexpr int64_t kMaxGlobalBatch = int64_t{1} << 30;

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

Status check_inputs(const PlanInputs& in) {
  auto positive = [](const char* flag, double v, const char* example) -> Status {
    if (!(v > 0) || !std::isfinite(v))
      return InvalidArgument(std::string(flag) + " " + fmt("%g", v) + " must be positive", std::string("e.g. ") + flag + " " + example);
    return Status::Ok();
  };
  if (!in.model && !(in.params > 0))
    return InvalidArgument("no model: pass --preset PRESET|FILE or --params N",
                           "e.g. --preset llama3.2-1b, --preset my_model.json or --params 7e9");
  if (in.model && in.params > 0)
    return InvalidArgument("--preset and --params are mutually exclusive", "the parameter count comes from the model");
  if (in.hardware.empty())
    return InvalidArgument("no hardware: pass --hardware NAME", "valid hardware: " + [] {
      std::string s;
      for (const auto& n : metrics::device_names()) s += (s.empty() ? "" : ", ") + n;
      return s;
    }());
  // Upper limits: far above any real cluster or run, low enough that the batch and token arithmetic
  // (int64) cannot overflow and the layout search answers at once.
  auto at_most = [](const char* flag, int64_t v, int64_t max, const char* what) -> Status {
    if (v > max)
      return InvalidArgument(std::string(flag) + " " + std::to_string(v) + " is out of range: it must be at most " +
                                 std::to_string(max),
                             what);
    return Status::Ok();
  };
  LMT_RETURN_IF_ERROR(positive("--devices", static_cast<double>(in.devices), "8"));
  LMT_RETURN_IF_ERROR(at_most("--devices", in.devices, kMaxDevices, "the number of accelerators (the largest clusters have about 10^5)"));
  if (in.devices_per_node < 0) return InvalidArgument("--devices-per-node must be positive", "e.g. --devices-per-node 8");
  LMT_RETURN_IF_ERROR(at_most("--devices-per-node", in.devices_per_node, kMaxDevicesPerNode, "e.g. --devices-per-node 8"));
  if (!in.model && in.params > model::ModelLimits::kMaxParams)
    return InvalidArgument("--params " + fmt("%g", in.params) + " is more than the limit of " + fmt("%g", model::ModelLimits::kMaxParams),
                           "the parameter count, e.g. --params 7e9");
  if (in.hours) LMT_RETURN_IF_ERROR(positive("--hours", *in.hours, "24"));
  if (in.tokens) LMT_RETURN_IF_ERROR(positive("--tokens", *in.tokens, "2e12"));
  if (in.throughput) LMT_RETURN_IF_ERROR(positive("--throughput", *in.throughput, "400000"));
  if (in.mfu) {
    LMT_RETURN_IF_ERROR(positive("--mfu", *in.mfu, "0.4"));
    if (*in.mfu > 1)
      return InvalidArgument("--mfu " + fmt("%g", *in.mfu) + " is above 1 (100% of the dense peak)",
                             "MFU is a fraction: 0.4 means 40%; well-tuned large runs reach 0.35-0.55");
  }
  if (in.price && (*in.price < 0 || !std::isfinite(*in.price)))
    return InvalidArgument("--price must be zero or positive", "USD per device-hour, e.g. --price 2.5");
  if (in.seq_len < 0) return InvalidArgument("--seq-len must be positive", "e.g. --seq-len 4096");
  LMT_RETURN_IF_ERROR(at_most("--seq-len", in.seq_len, model::ModelLimits::kMaxSeqLen, "tokens per sequence, e.g. --seq-len 4096"));
  LMT_RETURN_IF_ERROR(positive("--micro-batch", static_cast<double>(in.micro_batch), "1"));
  LMT_RETURN_IF_ERROR(at_most("--micro-batch", in.micro_batch, kMaxMicroBatch, "sequences per micro-batch per device, e.g. 1"));
  if (in.global_batch < 0) return InvalidArgument("--global-batch must be positive", "sequences per step, e.g. 512");
  LMT_RETURN_IF_ERROR(at_most("--global-batch", in.global_batch, kMaxGlobalBatch, "sequences per step, e.g. 512"));
  if (in.zero_stage < 0 || in.zero_stage > 3)
    return InvalidArgument("--zero " + std::to_string(in.zero_stage) + " is not a ZeRO stage",
                           "0 (none), 1 (optimizer states), 2 (+ gradients) or 3 (+ weights)");
  if ((in.tp && *in.tp < 1) || (in.pp && *in.pp < 1))
    return InvalidArgument("--tp and --pp must be at least 1", "e.g. --tp 4 --pp 2");
  if ((in.tp && *in.tp > in.devices) || (in.pp && *in.pp > in.devices))
    return InvalidArgument("--tp and --pp must be at most --devices (" + std::to_string(in.devices) + ")", "e.g. --tp 4 --pp 2");
  if (in.model) {
    Status v = in.model->validate();
    if (!v.ok()) return v;
  }
  if (in.ep < 1) return InvalidArgument("--ep " + std::to_string(in.ep) + " must be at least 1", "e.g. --ep 8");
  if (in.ep > 1) {
    if (!in.model || !in.model->moe.enabled())
      return InvalidArgument("--ep " + std::to_string(in.ep) + " needs a mixture-of-experts model",
                             "expert parallelism splits routed experts; use a model with moe.num_experts > 0 "
                             "(e.g. --preset olmoe-1b-7b), or drop --ep");
    if (in.model->moe.num_experts % in.ep != 0)
      return InvalidArgument("--ep " + std::to_string(in.ep) + " does not divide moe.num_experts = " +
                                 std::to_string(in.model->moe.num_experts),
                             "each EP rank holds num_experts / ep whole experts: choose a divisor");
    if (in.ep > in.devices)
      return InvalidArgument("--ep must be at most --devices (" + std::to_string(in.devices) + ")", "e.g. --ep 8");
  }
  return Status::Ok();
}

// Fills defaults that depend on the model and the device.
Status resolve_defaults(PlanInputs& in, const metrics::DeviceSpec& device) {
  // On the CPU a device is one rank of this machine (mpirun -np N): all of them share its memory bus.
  if (in.devices_per_node == 0) in.devices_per_node = device.is_cpu ? in.devices : std::min<int64_t>(in.devices, 8);
  if (in.devices_per_node > in.devices) in.devices_per_node = in.devices;
  if (in.devices % in.devices_per_node != 0)
    return InvalidArgument(std::to_string(in.devices) + " devices do not fill whole nodes of " +
                               std::to_string(in.devices_per_node),
                           "--devices must be a multiple of --devices-per-node");
  if (in.seq_len == 0) in.seq_len = in.model ? std::min<int64_t>(in.model->max_seq_len, 4096) : 4096;
  if (in.model && in.model->positions == model::PositionKind::kLearned && in.seq_len > in.model->max_seq_len)
    return InvalidArgument("--seq-len " + std::to_string(in.seq_len) + " exceeds the learned position table (" +
                               std::to_string(in.model->max_seq_len) + ")",
                           "use --seq-len " + std::to_string(in.model->max_seq_len) + " or less");
  if (in.global_batch == 0) {
    const int64_t unit = in.micro_batch * in.devices;
    const int64_t sequences = std::max<int64_t>(1, (int64_t{1} << 20) / in.seq_len);
    in.global_batch = (sequences + unit - 1) / unit * unit;
  }
  return Status::Ok();
}

}  // namespace

StatusOr<PlanReport> make_plan(const PlanInputs& raw) {
  LMT_RETURN_IF_ERROR(check_inputs(raw));
  PlanReport r;
  LMT_ASSIGN_OR_RETURN(r.device, metrics::device_spec(raw.hardware));
  LMT_ASSIGN_OR_RETURN(r.precision, metrics::parse_precision(raw.precision));
  LMT_ASSIGN_OR_RETURN(r.peak_flops_per_device, metrics::dense_peak_flops(r.device, r.precision));
  PlanInputs in = raw;
  LMT_RETURN_IF_ERROR(resolve_defaults(in, r.device));
  const double devices = static_cast<double>(in.devices);

  // FLOPs per token.
  r.model_name = in.model ? in.model->name : "params";
  r.params = in.model ? static_cast<double>(in.model->param_count()) : in.params;
  r.active_params = in.model ? static_cast<double>(in.model->active_param_count()) : in.params;
  r.flops_per_token_6n = 6 * r.active_params;
  if (in.model) r.flops_per_token_detailed = model::flops_per_token(*in.model, in.seq_len).training;
  const bool detailed = r.flops_per_token_detailed && in.flops_basis == FlopsBasis::kDetailed;
  r.flops_per_token = detailed ? *r.flops_per_token_detailed : r.flops_per_token_6n;
  r.flops_basis = detailed ? "detailed" : "6n";

  // Throughput: claimed, or from MFU.
  const double peak_cluster = devices * r.peak_flops_per_device;
  if (in.throughput) {
    r.tokens_per_second = *in.throughput;
    r.implied_mfu = implied_mfu(*in.throughput, r.flops_per_token, devices, r.peak_flops_per_device);
    r.mfu = *r.implied_mfu;
    r.mfu_source = "implied by --throughput";
    if (*r.implied_mfu > 1) {
      r.implied_mfu_impossible = true;
      r.warnings.push_back("claimed throughput " + fmt("%.4g", *in.throughput) + " tokens/s implies MFU " +
                           fmt("%.1f%%", *r.implied_mfu * 100) + " on " + std::to_string(in.devices) + " x " +
                           r.device.name + ": above 100% of the dense peak, impossible (check the FLOP count, "
                           "the device or the claim)");
    }
    if (in.mfu)
      r.warnings.push_back("--throughput overrides --mfu " + fmt("%g", *in.mfu) + " for time and token estimates");
  } else {
    r.mfu = in.mfu.value_or(kDefaultMfu);
    r.mfu_source = in.mfu ? (in.mfu_source.empty() ? "assumed" : in.mfu_source) : "default";
    r.tokens_per_second = tokens_per_second(devices, r.peak_flops_per_device, r.mfu, r.flops_per_token);
  }

  // Tokens, time, FLOPs, cost.
  if (in.hours) r.tokens_feasible = tokens_in_hours(r.tokens_per_second, *in.hours);
  if (in.tokens) {
    r.tokens = *in.tokens;
    r.tokens_source = "--tokens";
  } else if (in.hours) {
    r.tokens = *r.tokens_feasible;
    r.tokens_source = "--hours";
  } else {
    r.tokens = 20 * r.params;
    r.tokens_source = "20 tokens/param";
  }
  if (in.tokens || !in.hours) r.hours_to_target = hours_for_tokens(r.tokens_per_second, r.tokens);
  r.hours = r.hours_to_target ? *r.hours_to_target : *in.hours;
  if (in.tokens && in.hours) {
    r.target_within_budget = *r.hours_to_target <= *in.hours;
    r.required_mfu = *in.tokens * r.flops_per_token / (peak_cluster * *in.hours * 3600);
    if (!*r.target_within_budget)
      r.warnings.push_back(fmt("%.4g", *in.tokens) + " tokens need " + fmt("%.1f", *r.hours_to_target) +
                           " h at " + fmt("%.4g", r.tokens_per_second) + " tokens/s, over the " + fmt("%g", *in.hours) +
                           " h budget (they would need MFU " + fmt("%.1f%%", *r.required_mfu * 100) + ")");
  }
  r.total_flops = total_flops(r.flops_per_token, r.tokens);
  r.total_flops_6n = total_flops(r.flops_per_token_6n, r.tokens);
  r.compute_budget_flops = in.hours ? peak_cluster * r.mfu * *in.hours * 3600 : r.total_flops;
  r.chinchilla = chinchilla_optimal(r.compute_budget_flops);
  if (in.price) {
    r.cost = cost_usd(devices, r.hours, *in.price);
    if (in.hours) r.budget_cost = cost_usd(devices, *in.hours, *in.price);
  }

  // Layouts.
  ParallelismInputs pin;
  pin.memory.config = in.model;
  pin.memory.params = r.params;
  pin.memory.seq_len = in.seq_len;
  pin.memory.micro_batch = in.micro_batch;
  pin.memory.zero_stage = in.zero_stage;
  pin.memory.ep = in.ep;
  pin.memory.recompute = in.recompute;
  pin.memory.flash_attention = in.flash_attention;
  pin.memory.precision = r.precision;
  pin.memory.runtime_overhead_bytes = r.device.runtime_overhead_bytes;
  pin.devices = in.devices;
  pin.devices_per_node = in.devices_per_node;
  pin.global_batch = in.global_batch;
  pin.device_memory_bytes = r.device.memory_bytes;
  const double base_step = static_cast<double>(in.global_batch * in.seq_len) / r.tokens_per_second;
  pin.ideal_step_seconds = base_step;
  r.search = search_layouts(pin);

  // The step-time model: links, efficiency, then every layout's predicted step (plan/step_time.h).
  LMT_ASSIGN_OR_RETURN(r.links, tabulated_links(r.device));
  if (!in.collectives_file.empty()) {
    LMT_ASSIGN_OR_RETURN(r.links.intra, link_from_collectives_json(in.collectives_file));
    if (!r.device.is_cpu)
      r.warnings.push_back("--collectives measured this machine's shared memory; it stands in for the " + r.device.name +
                           " intra-node link");
  }
  if (in.mfu || in.throughput || !r.device.is_cpu) {
    r.step_efficiency = r.mfu;
    r.step_efficiency_source = r.mfu_source;
  } else {
    r.step_efficiency = kDefaultCpuEfficiency;
    r.step_efficiency_source = "default for cpu (lmtrain's measured single-process MFU, docs/PERFORMANCE.md)";
  }
  StepTimeInputs st;
  st.model = in.model;
  st.params = r.params;
  st.flops_per_token = r.flops_per_token;
  st.seq_len = in.seq_len;
  st.micro_batch = in.micro_batch;
  st.global_batch = in.global_batch;
  st.devices = in.devices;
  st.devices_per_node = in.devices_per_node;
  st.zero_stage = in.zero_stage;
  st.recompute = in.recompute;
  st.act_bytes = r.precision == metrics::Precision::kFp32 || r.precision == metrics::Precision::kTf32 ? 4 : 2;
  st.peak_flops_per_device = r.peak_flops_per_device;
  st.efficiency = r.step_efficiency;
  st.links = r.links;
  auto time_of = [&st](const Layout& l, int zero) {
    StepTimeInputs x = st;
    x.tp = l.tp;
    x.pp = l.pp;
    x.dp = l.dp;
    x.zero_stage = zero;
    return predict_step_time(x);
  };
  auto cost = [&](Layout& l) -> StatusOr<StepTime> {
    LMT_ASSIGN_OR_RETURN(StepTime t, time_of(l, in.zero_stage));
    l.step_seconds = t.step;
    l.step_factor = t.compute > 0 ? t.step / t.compute : 1;
    return t;
  };
  // Without a peak (a CPU whose peak could not be measured) there is no compute term: the search's
  // planning factor ranks the layouts instead, and the report says so.
  const bool model_ok = r.peak_flops_per_device > 0 && r.step_efficiency > 0;
  if (!model_ok)
    r.warnings.push_back("no dense peak for " + r.device.name + ": the step-time model is skipped and layouts are ranked "
                         "by the planning factor (1 + bubble)(1 + 0.03 log2 TP)");
  if (model_ok) {
    for (Layout& l : r.search.ranked) LMT_RETURN_IF_ERROR(cost(l).status());
  }
  std::stable_sort(r.search.ranked.begin(), r.search.ranked.end(), [](const Layout& a, const Layout& b) {
    if (a.fits != b.fits) return a.fits;
    if (std::abs(a.step_seconds - b.step_seconds) > 1e-12 * std::max(a.step_seconds, b.step_seconds))
      return a.step_seconds < b.step_seconds;
    return a.memory.total < b.memory.total;
  });
  auto name_of = [](const Layout& l) {
    std::string n;
    if (l.tp > 1) n += "TP" + std::to_string(l.tp);
    if (l.pp > 1) n += (n.empty() ? "" : " ") + std::string("PP") + std::to_string(l.pp);
    if (l.dp > 1 || n.empty()) n += (n.empty() ? "" : " ") + std::string("DP") + std::to_string(l.dp);
    return n;
  };
  for (const Layout& l : model_ok ? r.search.ranked : std::vector<Layout>{}) {
    StepScenario sc{name_of(l) + (in.zero_stage > 0 ? " ZeRO-" + std::to_string(in.zero_stage) : ""), l, in.zero_stage,
                    l.memory.total, {}};
    LMT_ASSIGN_OR_RETURN(sc.time, time_of(l, in.zero_stage));
    r.step_scenarios.push_back(sc);
  }
  if (model_ok && in.zero_stage != 3) {  // pure DP, fully sharded
    for (const Layout& l : r.search.ranked) {
      if (l.tp != 1 || l.pp != 1 || l.dp < 2) continue;
      StepScenario sc{name_of(l) + " ZeRO-3", l, 3, 0, {}};
      MemoryInputs m = pin.memory;
      m.dp = l.dp;
      m.micro_batches_per_step = l.grad_accum;
      m.zero_stage = 3;
      sc.memory_per_device = estimate_memory(m).total;
      sc.layout.fits = sc.memory_per_device <= r.device.memory_bytes;
      LMT_ASSIGN_OR_RETURN(sc.time, time_of(l, 3));
      r.step_scenarios.push_back(sc);
    }
  }
  if (in.tp || in.pp) {
    LMT_ASSIGN_OR_RETURN(r.layout, evaluate_layout(pin, in.tp.value_or(1), in.pp.value_or(1)));
    if (model_ok) {
      LMT_RETURN_IF_ERROR(cost(r.layout).status());
    }
  } else {
    if (r.search.ranked.empty()) {
      std::string why;
      for (const auto& x : r.search.rejected)
        why += "\n  TP " + std::to_string(x.tp) + ", PP " + std::to_string(x.pp) + ": " + x.reason;
      return InvalidArgument("no valid (TP, PP, DP) layout for " + std::to_string(in.devices) + " devices:" + why,
                             "change --devices, --devices-per-node, --global-batch or --micro-batch");
    }
    r.layout = r.search.ranked.front();
    r.layout_searched = true;
  }
  if (model_ok) {
    LMT_ASSIGN_OR_RETURN(r.layout_time, time_of(r.layout, in.zero_stage));
  }
  for (int z = 0; z <= 3; ++z) {
    MemoryInputs m = pin.memory;
    m.tp = r.layout.tp;
    m.pp = r.layout.pp;
    m.dp = r.layout.dp;
    m.micro_batches_per_step = r.layout.grad_accum;
    m.zero_stage = z;
    r.memory_by_zero[static_cast<size_t>(z)] = estimate_memory(m);
  }
  if (r.device.is_cpu) {
    const int threads = metrics::cpu_info().threads;
    const unsigned cores = std::thread::hardware_concurrency();
    if (cores > 0 && in.devices * threads > static_cast<int64_t>(cores))
      r.warnings.push_back(std::to_string(in.devices) + " cpu devices x " + std::to_string(threads) +
                           " threads (this process's OMP_NUM_THREADS, which sets the per-device peak) exceed this "
                           "machine's " + std::to_string(cores) + " hardware threads: run plan with the threads each "
                           "rank will use, e.g. OMP_NUM_THREADS=1 lmtrain plan --hardware cpu --devices 2");
  }
  if (!r.layout.fits)
    r.warnings.push_back("the layout needs " + fmt("%.1f", r.layout.memory.total / (1 << 30)) + " GiB per device, over the " +
                         fmt("%.1f", r.device.memory_bytes / (1 << 30)) +
                         " GiB of " + r.device.name + ": raise --zero, use --recompute, a smaller --micro-batch, or more TP/PP");
  if (!in.model)
    r.warnings.push_back("--params gives no shape: activations are not included in memory (and TP/PP "
                         "divisibility is not checked); pass --preset for a full estimate");
  if (in.model && in.seq_len > in.model->max_seq_len)
    r.warnings.push_back("--seq-len " + std::to_string(in.seq_len) + " exceeds the model's max_seq_len " +
                         std::to_string(in.model->max_seq_len));
  r.inputs = in;
  return r;
}

}  // namespace lmt::plan
