// PlanReport → JSON (stable keys, raw SI numbers: bytes, FLOPs, seconds/hours, USD) and → a table
// for people (binary units for memory, engineering notation for counts).
#include <cmath>
#include <cstdio>
#include <string>

#include "lmt/plan/plan.h"

namespace lmt::plan {
namespace {

using nlohmann::json;

template <typename T>
json opt(const std::optional<T>& v) {
  return v ? json(*v) : json(nullptr);
}

json memory_json(const MemoryBreakdown& m) {
  json j = {{"weights", m.weights},
            {"grads", m.grads},
            {"master_fp32", m.master},
            {"adam_m", m.adam_m},
            {"adam_v", m.adam_v},
            {"model_states", m.model_states()},
            {"zero3_gather", m.zero3_gather},
            {"activations", m.activations_known ? json(m.activations) : json(nullptr)},
            {"runtime_overhead", m.runtime_overhead},
            {"fragmentation", m.fragmentation},
            {"total", m.total},
            {"stage_params", m.stage_params},
            {"expert_params", m.expert_params},
            {"pipeline_stage", m.stage}};
  if (m.activations_known) {
    const ActivationVariants& v = m.activation_variants;
    j["activation_variants"] = {{"no_recompute", v.plain},
                                {"no_recompute_flash", v.flash},
                                {"recompute", v.recompute},
                                {"recompute_flash", v.recompute_flash}};
  }
  return j;
}

json layout_json(const Layout& l) {
  return {{"tp", l.tp},
          {"pp", l.pp},
          {"dp", l.dp},
          {"micro_batch", l.micro_batch},
          {"grad_accum", l.grad_accum},
          {"bubble", l.bubble},
          {"step_factor", l.step_factor},
          {"step_seconds", l.step_seconds},
          {"memory_per_device_bytes", l.memory.total},
          {"fits", l.fits}};
}

json link_json(const Link& l) {
  return {{"name", l.name}, {"bytes_per_s", l.bytes_per_s}, {"latency_s", l.latency_s}, {"overlaps_compute", l.overlaps},
          {"source", l.source}};
}

json step_time_json(const StepTime& t) {
  return {{"compute_s", t.compute},       {"tp_comm_s", t.tp_comm},         {"pp_comm_s", t.pp_comm},
          {"bubble_s", t.bubble},         {"dp_comm_exposed_s", t.dp_comm}, {"dp_comm_total_s", t.dp_comm_total},
          {"step_s", t.step},             {"tokens_per_s", t.tokens_per_s}, {"micro_batches", t.micro_batches},
          {"dp_link", t.dp_link},         {"pp_link", t.pp_link}};
}

std::string f(const char* format, double v) {
  char buf[96];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

// 1234567 → "1.23M"; for counts of tokens and parameters.
std::string si(double v) {
  const char* units[] = {"", "K", "M", "B", "T", "P"};
  int i = 0;
  while (std::fabs(v) >= 1000 && i < 5) {
    v /= 1000;
    ++i;
  }
  return f(v >= 100 || i == 0 ? "%.0f" : "%.3g", v) + units[i];
}

// 1235814400 → "1,235,814,400".
std::string grouped(double v) {
  std::string digits = f("%.0f", v), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0 && digits[i - 1] != '-') out += ',';
    out += digits[i];
  }
  return out;
}

std::string gib(double bytes) { return f("%.2f GiB", bytes / (1024.0 * 1024.0 * 1024.0)); }

void line(std::string& out, const std::string& label, const std::string& value) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "  %-24s", label.c_str());
  out += buf + value + "\n";
}

}  // namespace

json to_json(const PlanReport& r) {
  const PlanInputs& in = r.inputs;
  json j;
  j["model"] = r.model_name;
  j["params"] = r.params;
  j["active_params"] = r.active_params;
  j["ep"] = in.ep;
  j["hardware"] = {{"name", r.device.name},
                   {"description", r.device.description},
                   {"memory_bytes", r.device.memory_bytes},
                   {"dense_peak_flops", r.peak_flops_per_device},
                   {"note", r.device.note}};
  j["devices"] = in.devices;
  j["devices_per_node"] = in.devices_per_node;
  j["precision"] = std::string(metrics::precision_name(r.precision));
  j["flops_per_token_6n"] = r.flops_per_token_6n;
  j["flops_per_token_detailed"] = opt(r.flops_per_token_detailed);
  j["flops_per_token"] = r.flops_per_token;
  j["flops_basis"] = r.flops_basis;
  j["mfu"] = r.mfu;
  j["mfu_source"] = r.mfu_source;
  j["tokens_per_second"] = r.tokens_per_second;
  j["implied_mfu"] = opt(r.implied_mfu);
  j["implied_mfu_impossible"] = r.implied_mfu_impossible;
  j["required_mfu"] = opt(r.required_mfu);
  j["tokens"] = r.tokens;
  j["tokens_source"] = r.tokens_source;
  j["tokens_feasible"] = opt(r.tokens_feasible);
  j["hours"] = r.hours;
  j["hours_budget"] = opt(in.hours);
  j["hours_to_target"] = opt(r.hours_to_target);
  j["target_within_budget"] = opt(r.target_within_budget);
  j["total_flops"] = r.total_flops;
  j["total_flops_6n"] = r.total_flops_6n;
  j["compute_budget_flops"] = r.compute_budget_flops;
  j["chinchilla_params"] = r.chinchilla.params;
  j["chinchilla_tokens"] = r.chinchilla.tokens;
  j["chinchilla_20x_params"] = r.chinchilla.params_20x;
  j["chinchilla_20x_tokens"] = r.chinchilla.tokens_20x;
  j["price_per_device_hour"] = opt(in.price);
  j["cost"] = opt(r.cost);
  j["budget_cost"] = opt(r.budget_cost);
  j["seq_len"] = in.seq_len;
  j["micro_batch"] = in.micro_batch;
  j["global_batch"] = in.global_batch;
  j["global_batch_tokens"] = in.global_batch * in.seq_len;
  j["zero"] = in.zero_stage;
  j["recompute"] = in.recompute;
  j["flash_attention"] = in.flash_attention;
  j["layout"] = layout_json(r.layout);
  j["layout_searched"] = r.layout_searched;
  j["memory_per_device_bytes"] = memory_json(r.layout.memory);
  json by_zero = json::array();
  for (int z = 0; z <= 3; ++z) {
    json m = memory_json(r.memory_by_zero[static_cast<size_t>(z)]);
    m["zero"] = z;
    m["fits"] = r.memory_by_zero[static_cast<size_t>(z)].total <= r.device.memory_bytes;
    by_zero.push_back(m);
  }
  j["memory_by_zero"] = by_zero;
  j["device_memory_bytes"] = r.device.memory_bytes;
  j["fits"] = r.layout.fits;
  j["parallelism"] = json::array();
  for (const Layout& l : r.search.ranked) j["parallelism"].push_back(layout_json(l));
  j["rejected_layouts"] = json::array();
  for (const RejectedLayout& x : r.search.rejected)
    j["rejected_layouts"].push_back({{"tp", x.tp}, {"pp", x.pp}, {"reason", x.reason}});
  json scenarios = json::array();
  for (const StepScenario& sc : r.step_scenarios) {
    json x = step_time_json(sc.time);
    x["name"] = sc.name;
    x["tp"] = sc.layout.tp;
    x["pp"] = sc.layout.pp;
    x["dp"] = sc.layout.dp;
    x["zero"] = sc.zero_stage;
    x["memory_per_device_bytes"] = sc.memory_per_device;
    x["fits"] = sc.layout.fits;
    scenarios.push_back(x);
  }
  j["step_model"] = {{"efficiency", r.step_efficiency},
                     {"efficiency_source", r.step_efficiency_source},
                     {"links", {{"intra_node", link_json(r.links.intra)}, {"inter_node", link_json(r.links.inter)}}},
                     {"layout", step_time_json(r.layout_time)},
                     {"scenarios", scenarios}};
  j["warnings"] = r.warnings;
  return j;
}

std::string format_report(const PlanReport& r) {
  const PlanInputs& in = r.inputs;
  std::string o;
  o += "lmtrain plan: " + r.model_name + " on " + std::to_string(in.devices) + " x " + r.device.name + " (" +
       r.device.description + "), " + std::string(metrics::precision_name(r.precision)) + "\n\n";
  o += "model\n";
  line(o, "parameters", grouped(r.params) + " (" + si(r.params) + ")");
  if (in.model) {
    const model::ModelConfig& c = *in.model;
    line(o, "shape", std::to_string(c.n_layers) + " layers, d " + std::to_string(c.d_model) + ", " +
                         std::to_string(c.n_heads) + " heads / " + std::to_string(c.n_kv_heads) + " kv, ffn " +
                         std::to_string(c.ffn_hidden) + " " + std::string(model::ffn_name(c.ffn)) + ", vocab " +
                         std::to_string(c.vocab_size));
    if (c.moe.enabled()) {
      line(o, "active parameters", grouped(r.active_params) + " (" + si(r.active_params) + ") per token: FLOPs, time, MFU");
      line(o, "experts", std::to_string(c.moe.num_experts) + " of " + std::to_string(c.moe.expert_ffn) + ", top " +
                             std::to_string(c.moe.top_k) + ", in " + std::to_string(c.moe_layer_count()) + " layers; EP " +
                             std::to_string(in.ep) + " (memory: all experts, split over EP)");
    }
  }
  o += "\nhardware\n";
  line(o, "dense peak / device", f("%.1f TFLOP/s", r.peak_flops_per_device / 1e12) + " (" +
                                     std::string(metrics::precision_name(r.precision)) + ")");
  line(o, "memory / device", gib(r.device.memory_bytes));
  line(o, "devices", std::to_string(in.devices) + " (" + std::to_string(in.devices_per_node) + " per node)");
  if (!r.device.note.empty()) line(o, "note", r.device.note);

  o += "\ncompute\n";
  line(o, "FLOPs/token (6N)", f("%.4g", r.flops_per_token_6n));
  if (r.flops_per_token_detailed)
    line(o, "FLOPs/token (detailed)", f("%.4g", *r.flops_per_token_detailed) + " at seq " + std::to_string(in.seq_len));
  line(o, "FLOPs/token used", r.flops_basis);
  line(o, "MFU", f("%.1f%%", r.mfu * 100) + " (" + r.mfu_source + ")");
  if (r.implied_mfu)
    line(o, "implied MFU", f("%.1f%%", *r.implied_mfu * 100) + (r.implied_mfu_impossible ? "  ** IMPOSSIBLE (> 100%) **" : ""));
  line(o, "throughput", si(r.tokens_per_second) + " tokens/s (" + si(r.tokens_per_second / static_cast<double>(in.devices)) +
                            " per device)");
  if (r.tokens_feasible) line(o, "tokens in budget", si(*r.tokens_feasible) + " in " + f("%g", *in.hours) + " h");
  line(o, "token target", si(r.tokens) + " (" + r.tokens_source + ")");
  if (r.hours_to_target) line(o, "time to target", f("%.1f h", *r.hours_to_target) + f(" (%.1f days)", *r.hours_to_target / 24));
  if (r.target_within_budget)
    line(o, "target within budget", *r.target_within_budget ? "yes" : "NO (needs MFU " + f("%.1f%%", *r.required_mfu * 100) + ")");
  line(o, "total FLOPs", f("%.4g", r.total_flops) + " (6N: " + f("%.4g", r.total_flops_6n) + ")");
  if (r.cost) line(o, "cost", f("$%.0f", *r.cost) + f(" (%.0f device-hours", static_cast<double>(in.devices) * r.hours) +
                                 f(" at $%.2f)", *in.price));

  o += "\nchinchilla (compute budget " + f("%.3g", r.compute_budget_flops) + " FLOPs)\n";
  line(o, "fitted optimum", "N " + si(r.chinchilla.params) + ", D " + si(r.chinchilla.tokens) + " tokens");
  line(o, "20 tokens/param", "N " + si(r.chinchilla.params_20x) + ", D " + si(r.chinchilla.tokens_20x) + " tokens");
  line(o, "this model", si(r.params) + " params on " + si(r.tokens) + f(" tokens (%.3g tokens/param)", r.tokens / r.params));

  const Layout& l = r.layout;
  o += "\nmemory per device (TP " + std::to_string(l.tp) + ", PP " + std::to_string(l.pp) + ", DP " + std::to_string(l.dp) +
       (in.ep > 1 ? ", EP " + std::to_string(in.ep) : std::string()) +
       ", ZeRO " + std::to_string(in.zero_stage) + ", micro-batch " + std::to_string(in.micro_batch) + " x seq " +
       std::to_string(in.seq_len) + (in.recompute ? ", recompute" : "") + (in.flash_attention ? ", flash" : "") + ")\n";
  char hdr[160];
  std::snprintf(hdr, sizeof hdr, "  %-6s %10s %10s %10s %10s %10s %12s %10s %10s  %s\n", "ZeRO", "weights", "grads",
                "master", "adam m+v", "activ.", "overhead", "total", "", "fits");
  o += hdr;
  for (int z = 0; z <= 3; ++z) {
    const MemoryBreakdown& m = r.memory_by_zero[static_cast<size_t>(z)];
    auto g = [](double b) { return f("%.2f", b / (1024.0 * 1024.0 * 1024.0)); };
    char row[200];
    std::snprintf(row, sizeof row, "  %-6s %10s %10s %10s %10s %10s %12s %10s %10s  %s\n",
                  (std::to_string(z) + (z == in.zero_stage ? "*" : "")).c_str(), g(m.weights).c_str(), g(m.grads).c_str(),
                  g(m.master).c_str(), g(m.adam_m + m.adam_v).c_str(), m.activations_known ? g(m.activations).c_str() : "?",
                  g(m.runtime_overhead + m.fragmentation + m.zero3_gather).c_str(), g(m.total).c_str(), "GiB",
                  m.total <= r.device.memory_bytes ? "yes" : "NO");
    o += row;
  }
  if (l.memory.activations_known) {
    const ActivationVariants& v = l.memory.activation_variants;
    line(o, "activations", "no recompute " + gib(v.plain) + ", + flash " + gib(v.flash) + ", recompute " +
                               gib(v.recompute) + ", recompute + flash " + gib(v.recompute_flash));
  }
  line(o, "fits", (l.fits ? "yes: " : "NO: ") + gib(l.memory.total) + " of " + gib(r.device.memory_bytes));

  o += "\nbatch\n";
  line(o, "global batch", std::to_string(in.global_batch) + " sequences = " + si(static_cast<double>(in.global_batch * in.seq_len)) +
                              " tokens");
  line(o, "split", "micro-batch " + std::to_string(l.micro_batch) + " x accumulation " + std::to_string(l.grad_accum) +
                       " x DP " + std::to_string(l.dp));

  o += "\nparallelism (ranked: fits first, then estimated step time)\n";
  std::snprintf(hdr, sizeof hdr, "  %-4s %4s %4s %4s %6s %8s %8s %10s %12s  %s\n", "rank", "TP", "PP", "DP", "accum",
                "bubble", "step x", "step s", "mem/device", "fits");
  o += hdr;
  int rank = 0;
  for (const Layout& x : r.search.ranked) {
    if (++rank > 12) {
      o += "  ... " + std::to_string(r.search.ranked.size() - 12) + " more (--json lists all)\n";
      break;
    }
    char row[200];
    std::snprintf(row, sizeof row, "  %-4d %4lld %4lld %4lld %6lld %7.1f%% %8.3f %10.3g %12s  %s\n", rank,
                  static_cast<long long>(x.tp), static_cast<long long>(x.pp), static_cast<long long>(x.dp),
                  static_cast<long long>(x.grad_accum), x.bubble * 100, x.step_factor, x.step_seconds,
                  gib(x.memory.total).c_str(), x.fits ? "yes" : "NO");
    o += row;
  }
  if (!r.search.rejected.empty()) {
    o += "  rejected:\n";
    size_t shown = 0;
    for (const RejectedLayout& x : r.search.rejected) {
      if (++shown > 12) {
        o += "    ... " + std::to_string(r.search.rejected.size() - 12) + " more (--json lists all)\n";
        break;
      }
      o += "    TP " + std::to_string(x.tp) + ", PP " + std::to_string(x.pp) + ": " + x.reason + "\n";
    }
  }
  o += "\nstep-time model (docs/PLAN.md): compute at " + f("%.0f%%", r.step_efficiency * 100) + " of peak (" +
       r.step_efficiency_source + ")\n";
  o += "  links: intra-node " + r.links.intra.name + f(" %.3g GB/s", r.links.intra.bytes_per_s / 1e9) +
       f(" %.3g us", r.links.intra.latency_s * 1e6) + "; inter-node " + r.links.inter.name +
       f(" %.3g GB/s", r.links.inter.bytes_per_s / 1e9) + f(" %.3g us", r.links.inter.latency_s * 1e6) + "\n";
  std::snprintf(hdr, sizeof hdr, "  %-16s %9s %9s %9s %9s %9s %10s %11s %12s\n", "layout", "compute s", "TP s", "PP s",
                "bubble s", "DP s", "step s", "tokens/s", "mem/device");
  o += hdr;
  for (const StepScenario& sc : r.step_scenarios) {
    char row[240];
    std::snprintf(row, sizeof row, "  %-16s %9.4g %9.4g %9.4g %9.4g %9.4g %10.4g %11.4g %12s%s\n", sc.name.c_str(),
                  sc.time.compute, sc.time.tp_comm, sc.time.pp_comm, sc.time.bubble, sc.time.dp_comm, sc.time.step,
                  sc.time.tokens_per_s, gib(sc.memory_per_device).c_str(), sc.layout.fits ? "" : " (does not fit)");
    o += row;
  }
  if (!r.warnings.empty()) {
    o += "\nwarnings\n";
    for (const auto& w : r.warnings) o += "  - " + w + "\n";
  }
  return o;
}

}  // namespace lmt::plan
