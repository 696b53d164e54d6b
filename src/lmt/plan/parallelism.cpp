#include "lmt/plan/parallelism.h"

#include <algorithm>
#include <cmath>

namespace lmt::plan {
namespace {

std::string str(int64_t v) { return std::to_string(v); }

std::string batch_problem(const ParallelismInputs& in, int64_t dp) {
  const int64_t mb = in.memory.micro_batch;
  if (in.global_batch % (mb * dp) != 0)
    return "global batch " + str(in.global_batch) + " is not a multiple of micro-batch " + str(mb) + " × DP " +
           str(dp) + " = " + str(mb * dp);
  return "";
}

}  // namespace

double pipeline_bubble(int64_t p, int64_t m) {
  if (p <= 1) return 0;
  return static_cast<double>(p - 1) / static_cast<double>(m + p - 1);
}

std::string layout_problem(const ParallelismInputs& in, int64_t tp, int64_t pp) {
  if (tp < 1 || pp < 1) return "TP and PP must be at least 1";
  if (in.devices % (tp * pp) != 0)
    return "TP " + str(tp) + " × PP " + str(pp) + " = " + str(tp * pp) + " does not divide the " + str(in.devices) +
           " devices";
  if (tp > in.devices_per_node)
    return "TP " + str(tp) + " spans nodes (" + str(in.devices_per_node) +
           " devices per node): TP all-reduces need the intra-node interconnect";
  if (in.devices_per_node % tp != 0)
    return "TP " + str(tp) + " does not divide the " + str(in.devices_per_node) + " devices per node";
  if (in.memory.config) {
    const model::ModelConfig& c = *in.memory.config;
    if (c.n_heads % tp != 0) return "TP " + str(tp) + " does not divide n_heads = " + str(c.n_heads);
    if (c.n_kv_heads % tp != 0) return "TP " + str(tp) + " does not divide n_kv_heads = " + str(c.n_kv_heads);
    if (c.ffn_hidden % tp != 0 && c.moe_layer_count() < c.n_layers)
      return "TP " + str(tp) + " does not divide ffn_hidden = " + str(c.ffn_hidden);
    if (c.moe.enabled() && c.moe.expert_ffn % tp != 0)
      return "TP " + str(tp) + " does not divide moe.expert_ffn = " + str(c.moe.expert_ffn);
    if (c.n_layers % pp != 0) return "PP " + str(pp) + " does not divide n_layers = " + str(c.n_layers);
  }
  const int64_t ep = in.memory.ep, dp = in.devices / (tp * pp);
  if (ep > 1 && dp % ep != 0)
    return "EP " + str(ep) + " does not divide DP " + str(dp) + " (expert parallelism is carved out of data parallelism)";
  return "";
}

StatusOr<Layout> evaluate_layout(const ParallelismInputs& in, int64_t tp, int64_t pp) {
  const std::string problem = layout_problem(in, tp, pp);
  if (!problem.empty())
    return InvalidArgument("layout TP " + str(tp) + ", PP " + str(pp) + " is impossible: " + problem,
                           "TP must divide the devices per node and the head counts; PP must divide the layers; "
                           "the search table (lmtrain plan without --tp/--pp) lists the valid layouts");
  Layout l;
  l.tp = tp;
  l.pp = pp;
  l.dp = in.devices / (tp * pp);
  l.micro_batch = in.memory.micro_batch;
  const std::string batch = batch_problem(in, l.dp);
  if (!batch.empty())
    return InvalidArgument("layout TP " + str(tp) + ", PP " + str(pp) + ", DP " + str(l.dp) + ": " + batch,
                           "choose --global-batch as a multiple of micro-batch × DP, or another --micro-batch");
  l.grad_accum = in.global_batch / (l.micro_batch * l.dp);
  l.bubble = pipeline_bubble(pp, l.grad_accum);
  l.step_factor = (1 + l.bubble) * (1 + 0.03 * std::log2(static_cast<double>(tp)));
  l.step_seconds = in.ideal_step_seconds * l.step_factor;
  MemoryInputs m = in.memory;
  m.tp = tp;
  m.pp = pp;
  m.dp = l.dp;
  m.micro_batches_per_step = l.grad_accum;
  l.memory = estimate_memory(m);
  l.fits = l.memory.total <= in.device_memory_bytes;
  return l;
}

std::vector<int64_t> divisors(int64_t n) {
  std::vector<int64_t> low, high;
  for (int64_t d = 1; d <= n / d; ++d) {
    if (n % d != 0) continue;
    low.push_back(d);
    if (d != n / d) high.push_back(n / d);
  }
  low.insert(low.end(), high.rbegin(), high.rend());
  return low;
}

ParallelismSearch search_layouts(const ParallelismInputs& in) {
  ParallelismSearch out;
  if (in.devices < 1) return out;
  // Only divisors are candidates: sqrt(devices) steps to find them once, then one evaluation per
  // (TP, PP) pair, so even 10^12 devices are searched in a moment.
  const std::vector<int64_t> all = divisors(in.devices);
  for (int64_t tp : all) {
    for (int64_t pp : all) {  // the divisors of devices / tp are divisors of devices
      if (pp > in.devices / tp) break;
      if ((in.devices / tp) % pp != 0) continue;
      auto layout = evaluate_layout(in, tp, pp);
      if (layout.ok()) {
        out.ranked.push_back(*layout);
      } else {
        // The message without its "layout TP x, PP y is impossible: " prefix.
        std::string reason = layout.status().message();
        const size_t colon = reason.find(": ");
        out.rejected.push_back({tp, pp, colon == std::string::npos ? reason : reason.substr(colon + 2)});
      }
    }
  }
  std::stable_sort(out.ranked.begin(), out.ranked.end(), [](const Layout& a, const Layout& b) {
    if (a.fits != b.fits) return a.fits;
    if (std::abs(a.step_factor - b.step_factor) > 1e-12) return a.step_factor < b.step_factor;
    return a.memory.total < b.memory.total;
  });
  return out;
}

}  // namespace lmt::plan
