#include "lmt/plan/step_time.h"

#include <cmath>
#include <fstream>

#include <nlohmann/json.hpp>

#include "lmt/plan/memory.h"

namespace lmt::plan {
namespace {

constexpr double kGB = 1e9;
constexpr double kUs = 1e-6;

// Bandwidths are per device and per direction (what one GPU can send while it receives as much),
// from the vendors' datasheets; they are upper bounds (NCCL's bus bandwidth reaches roughly
// 70-90% of them). Latencies are per ring step, an order-of-magnitude planning figure (a few µs
// for NVLink/PCIe hops, ~5 µs for an InfiniBand hop including the NIC), not a measurement.
//   NVLink 2 (V100 SXM2): 300 GB/s total → 150 GB/s per direction   (NVIDIA V100 datasheet)
//   NVLink 3 (A100 SXM4): 600 GB/s total → 300 GB/s per direction   (NVIDIA A100 datasheet)
//   NVLink 4 (H100/H200 SXM): 900 GB/s total → 450 GB/s per direction (NVIDIA H100 datasheet)
//   NVLink 5 (B200): 1.8 TB/s total → 900 GB/s per direction        (NVIDIA Blackwell datasheet)
//   PCIe 4.0 x16: 32 GB/s per direction; PCIe 5.0 x16: 64 GB/s        (PCI-SIG, 16 GT/s / 32 GT/s)
//   InfiniBand EDR 100 Gb/s = 12.5 GB/s, HDR 200 Gb/s = 25 GB/s, NDR 400 Gb/s = 50 GB/s per NIC,
//   one NIC per GPU (DGX A100: 8 x HDR; DGX H100/B200: 8 x ConnectX-7 NDR)
Link nvlink(const char* name, double gbps, const char* source) { return {name, gbps * kGB, 3 * kUs, true, source}; }
Link pcie(const char* name, double gbps) { return {name, gbps * kGB, 5 * kUs, true, "PCI-SIG x16 per direction"}; }
Link ib(const char* name, double gbps) {
  return {name, gbps * kGB, 5 * kUs, true, "InfiniBand line rate, one NIC per GPU"};
}

}  // namespace

StatusOr<Links> tabulated_links(const metrics::DeviceSpec& d) {
  const std::string& n = d.name;
  if (n == "v100") return Links{nvlink("nvlink2", 150, "NVIDIA V100 SXM2 datasheet: 300 GB/s NVLink total"), ib("ib-edr100", 12.5)};
  if (n == "a100-40gb" || n == "a100-80gb")
    return Links{nvlink("nvlink3", 300, "NVIDIA A100 datasheet: 600 GB/s NVLink total"), ib("ib-hdr200", 25)};
  if (n == "a6000") return Links{pcie("pcie4", 32), ib("ib-hdr200", 25)};
  if (n == "h100-sxm" || n == "h200")
    return Links{nvlink("nvlink4", 450, "NVIDIA H100 datasheet: 900 GB/s NVLink total"), ib("ib-ndr400", 50)};
  if (n == "h100-pcie") return Links{pcie("pcie5", 64), ib("ib-ndr400", 50)};
  if (n == "b200") return Links{nvlink("nvlink5", 900, "NVIDIA Blackwell datasheet: 1.8 TB/s NVLink total"), ib("ib-ndr400", 50)};
  if (d.is_cpu) {
    // This machine: ranks on one node reduce through shared memory (dist/symmetric_buffer.h).
    // `lmtrain bench collectives` under mpirun -np 2, 475 MiB of f32 (docs/PERFORMANCE.md,
    // 2026-11-22): all-reduce 57.6 ms → 2·(1/2)·498 MB / 57.6 ms = 8.6 GB/s; reduce-scatter
    // 29.0 ms → 8.6 GB/s; all-gather 28.1 ms → 8.9 GB/s: one bandwidth fits all three.
    // Latency 20 µs per ring step: an assumption (a barrier between the ranks), unmeasured.
    // The cores that compute also move the bytes: nothing overlaps.
    Link shm{"cpu-shm", 8.6 * kGB, 20 * kUs, false,
             "lmtrain bench collectives, shared-memory all-reduce, 2 ranks (docs/PERFORMANCE.md)"};
    // Between machines: MPI over 10 Gb/s Ethernet, a tabulated assumption (1.25 GB/s, 50 µs).
    Link eth{"ethernet-10g", 1.25 * kGB, 50 * kUs, false, "10 Gb/s Ethernet line rate (assumed)"};
    return Links{shm, eth};
  }
  return NotFound("no interconnect is tabulated for device '" + n + "'", "see lmt/plan/step_time.cpp");
}

StatusOr<Link> link_from_collectives_json(const std::string& path) {
  const std::string hint = "save the output of: mpirun -np 2 lmtrain bench collectives --json > FILE";
  std::ifstream f(path);
  if (!f) return NotFound("--collectives " + path + ": cannot read the file", hint);
  nlohmann::json j = nlohmann::json::parse(f, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return InvalidArgument("--collectives " + path + ": not a JSON object", hint);
  if (j.value("bench", "") != "collectives")
    return InvalidArgument("--collectives " + path + ": not the output of lmtrain bench collectives (\"bench\" is not \"collectives\")", hint);
  const auto* mb = j.contains("mb") && j["mb"].is_number() ? &j["mb"] : nullptr;
  const auto* ranks = j.contains("ranks") && j["ranks"].is_number_integer() ? &j["ranks"] : nullptr;
  const bool has_t = j.contains("seconds") && j["seconds"].is_object() && j["seconds"].contains("shm_allreduce") &&
                     j["seconds"]["shm_allreduce"].is_number();
  if (!mb || !ranks || !has_t)
    return InvalidArgument("--collectives " + path + ": needs \"mb\", \"ranks\" and \"seconds\".\"shm_allreduce\"", hint);
  const double bytes = mb->get<double>() * (1 << 20);
  const int64_t n = ranks->get<int64_t>();
  const double t = j["seconds"]["shm_allreduce"].get<double>();
  if (!(bytes > 0) || n < 2 || !(t > 0) || !std::isfinite(t))
    return InvalidArgument("--collectives " + path + ": mb, ranks (>= 2) and the all-reduce time must be positive", hint);
  Link l;
  l.name = "cpu-shm (measured)";
  l.bytes_per_s = 2.0 * static_cast<double>(n - 1) / static_cast<double>(n) * bytes / t;
  l.latency_s = 20 * kUs;
  l.overlaps = false;
  l.source = path + ": shared-memory all-reduce of " + std::to_string(mb->get<double>()) + " MiB on " + std::to_string(n) + " ranks";
  return l;
}

double all_reduce_seconds(double bytes, int64_t n, const Link& l) {
  if (n <= 1) return 0;
  const double k = static_cast<double>(n - 1);
  return 2 * k / static_cast<double>(n) * bytes / l.bytes_per_s + 2 * k * l.latency_s;
}
double reduce_scatter_seconds(double bytes, int64_t n, const Link& l) {
  if (n <= 1) return 0;
  const double k = static_cast<double>(n - 1);
  return k / static_cast<double>(n) * bytes / l.bytes_per_s + k * l.latency_s;
}
double all_gather_seconds(double bytes, int64_t n, const Link& l) { return reduce_scatter_seconds(bytes, n, l); }
double p2p_seconds(double bytes, const Link& l) { return bytes / l.bytes_per_s + l.latency_s; }

StatusOr<StepTime> predict_step_time(const StepTimeInputs& in) {
  if (in.tp < 1 || in.pp < 1 || in.dp < 1 || in.tp * in.pp * in.dp != in.devices)
    return InvalidArgument("step-time model: TP " + std::to_string(in.tp) + " x PP " + std::to_string(in.pp) + " x DP " +
                               std::to_string(in.dp) + " is not the " + std::to_string(in.devices) + " devices",
                           "dp · tp · pp must equal the device count");
  if (in.micro_batch < 1 || in.global_batch % (in.micro_batch * in.dp) != 0)
    return InvalidArgument("step-time model: global batch " + std::to_string(in.global_batch) +
                               " is not a multiple of micro-batch × DP",
                           "choose --global-batch as a multiple of --micro-batch × DP");
  if (!(in.peak_flops_per_device > 0) || !(in.efficiency > 0) || !(in.links.intra.bytes_per_s > 0) ||
      !(in.links.inter.bytes_per_s > 0))
    return InvalidArgument("step-time model: the peak, the efficiency and the link bandwidths must be positive");
  StepTime t;
  const int64_t m = in.global_batch / (in.micro_batch * in.dp);
  t.micro_batches = m;
  const double tokens = static_cast<double>(in.global_batch) * static_cast<double>(in.seq_len);
  double flops = in.flops_per_token * tokens * (in.recompute ? 4.0 / 3.0 : 1.0);
  if (in.zero_stage >= 3 && in.dp > 1 && in.model) {  // the streamed LM head's recomputed logits
    const double k = static_cast<double>(zero3_head_chunks(*in.model));
    flops += 2 * tokens * static_cast<double>(in.model->d_model) * static_cast<double>(in.model->vocab_size) * (k - 1) / k;
  }
  t.compute = flops / (static_cast<double>(in.devices) * in.peak_flops_per_device * in.efficiency);

  // Activations crossing TP and PP boundaries: b·s·C elements per micro-batch.
  const double act = in.model ? static_cast<double>(in.micro_batch) * static_cast<double>(in.seq_len) *
                                    static_cast<double>(in.model->d_model) * in.act_bytes
                              : 0;
  const double layers_here = in.model ? static_cast<double>(in.model->n_layers) / static_cast<double>(in.pp) : 0;
  const double tp_collectives_per_block = in.recompute ? 6 : 4;
  t.tp_comm = static_cast<double>(m) * layers_here * tp_collectives_per_block * all_reduce_seconds(act, in.tp, in.links.intra);

  const bool pp_across_nodes = in.tp * in.pp > in.devices_per_node;
  const Link& pp_link = pp_across_nodes ? in.links.inter : in.links.intra;
  t.pp_link = in.pp > 1 ? pp_link.name : "";
  t.pp_comm = in.pp > 1 ? static_cast<double>(m) * 2 * p2p_seconds(act, pp_link) : 0;

  const double busy = t.compute + t.tp_comm + t.pp_comm;
  t.bubble = in.pp > 1 ? busy * static_cast<double>(in.pp - 1) / static_cast<double>(m) : 0;

  const bool dp_across_nodes = in.dp > 1 && in.devices > in.devices_per_node;
  const Link& dp_link = dp_across_nodes ? in.links.inter : in.links.intra;
  t.dp_link = in.dp > 1 ? dp_link.name : "";
  const double shard_params = in.params / static_cast<double>(in.tp * in.pp);
  const double grads = shard_params * in.grad_bytes, weights = shard_params * in.act_bytes;
  double hideable = 0;  // compute the DP collectives may run beside
  if (in.zero_stage == 0) {
    t.dp_comm_total = all_reduce_seconds(grads, in.dp, dp_link);
    hideable = t.compute * 2.0 / 3.0;
  } else if (in.zero_stage <= 2) {
    t.dp_comm_total = reduce_scatter_seconds(grads, in.dp, dp_link) + all_gather_seconds(weights, in.dp, dp_link);
    hideable = t.compute * 2.0 / 3.0;
  } else {
    const double gathered = shard_params * in.zero3_gather_bytes;
    t.dp_comm_total = static_cast<double>(m) * (reduce_scatter_seconds(grads, in.dp, dp_link) +
                                                2 * all_gather_seconds(gathered, in.dp, dp_link));
    hideable = t.compute;
  }
  t.dp_comm = dp_link.overlaps ? std::max(0.0, t.dp_comm_total - hideable) : t.dp_comm_total;
  t.step = busy + t.bubble + t.dp_comm;
  t.tokens_per_s = t.step > 0 ? tokens / t.step : 0;
  return t;
}

}  // namespace lmt::plan
