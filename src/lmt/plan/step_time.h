// The step-time model of `lmtrain plan`: a checkable prediction of one optimizer step's wall time
// for a (TP, PP, DP, ZeRO) layout, as a sum of named terms (docs/PLAN.md, "Step-time model"):
//
//   step = compute + tp_comm + pp_comm + bubble + dp_comm (exposed)
//
//   compute  = F / (devices · peak · efficiency), F = training FLOPs of the step
//              (flops_per_token · global_batch · seq_len; × 4/3 with recompute: one more forward;
//              ZeRO-3 over several ranks adds the streamed LM head's recomputed logits, 2·C·V·(K−1)/K
//              per token for K chunks: plan/memory.h zero3_head_chunks).
//   tp_comm  = per micro-batch and per block on this stage: 4 all-reduces (2 forward, 2 backward;
//              6 with recompute) of the activations b·s·C·act_bytes over the TP group, on the
//              intra-node link; never overlapped (they sit between the matmuls).
//   pp_comm  = per micro-batch, one activation send and one gradient send of b·s·C·act_bytes to
//              the neighbouring stage (point to point), on the intra- or inter-node link.
//   bubble   = the 1F1B pipeline bubble: busy · (p−1)/m, where busy = compute + tp_comm + pp_comm
//              (the pipeline's time is busy · (m+p−1)/m; Narayanan et al. 2021).
//   dp_comm  = the gradient collectives over the DP group, fp32 gradients (4 B) of this rank's
//              model shard N/(tp·pp):  ZeRO-0: one all-reduce per step; ZeRO-1/2: a reduce-scatter
//              of the gradients and an all-gather of the updated parameters (act_bytes) per step;
//              ZeRO-3: per micro-batch, a reduce-scatter of the gradients and two all-gathers of
//              the parameters (forward and backward; zero3_gather_bytes each: lmtrain's ZeRO-3
//              gathers the f32 master, 4 B). Exposed: all of it where the devices compute
//              and communicate with the same cores (the CPU: Link::overlaps = false); on GPUs the
//              part longer than the backward pass (2/3 of compute; ZeRO-3 gathers: all of compute),
//              since DP collectives run beside compute (Megatron's --overlap-grad-reduce, FSDP
//              prefetch).
// Collectives use the ring (alpha-beta) cost over n ranks of a message of S bytes:
//   all-reduce 2(n−1)/n · S/B + 2(n−1)·α;  reduce-scatter, all-gather (n−1)/n · S/B + (n−1)·α;
//   point to point S/B + α.  B is the link's bandwidth per device and direction (bytes/s).
// Not modelled: the vocabulary-parallel embedding/LM-head collectives, interleaved schedules,
// contention between TP, PP and DP traffic, kernel efficiency changing with the TP-split shapes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "lmt/base/status.h"
#include "lmt/metrics/device_peaks.h"
#include "lmt/model/config.h"

namespace lmt::plan {

// One interconnect: bandwidth per device and direction, latency per ring step, and its source.
struct Link {
  std::string name;       // "nvlink4", "ib-ndr400", "pcie5", "cpu-shm", ...
  double bytes_per_s = 0;
  double latency_s = 0;
  bool overlaps = true;   // collectives run beside compute (GPUs); false on the CPU
  std::string source;     // datasheet, or the measurement it came from
};

struct Links {
  Link intra;  // inside a node (TP always; DP/PP while their groups stay in a node)
  Link inter;  // between nodes
};

// The tabulated links of a device of metrics::device_names() (sources in step_time.cpp); for
// "cpu", this machine's shared-memory collectives as last measured in docs/PERFORMANCE.md.
StatusOr<Links> tabulated_links(const metrics::DeviceSpec& device);

// The intra-node link measured by `lmtrain bench collectives --json` (its output, saved to a
// file): bandwidth from the shared-memory all-reduce, B = 2(n−1)/n · bytes / seconds. Errors name
// the file and what is missing.
StatusOr<Link> link_from_collectives_json(const std::string& path);

// Ring collectives (see above). n <= 1 costs nothing.
double all_reduce_seconds(double bytes, int64_t n, const Link& l);
double reduce_scatter_seconds(double bytes, int64_t n, const Link& l);  // bytes: the full (unsharded) buffer
double all_gather_seconds(double bytes, int64_t n, const Link& l);      // bytes: the full (gathered) buffer
double p2p_seconds(double bytes, const Link& l);

struct StepTimeInputs {
  std::optional<model::ModelConfig> model;  // absent (--params): no activation shape, no TP/PP terms
  double params = 0;
  double flops_per_token = 0;  // training (forward + backward)
  int64_t seq_len = 0, micro_batch = 1, global_batch = 1;
  int64_t devices = 1, devices_per_node = 1;
  int64_t tp = 1, pp = 1, dp = 1;
  int zero_stage = 0;
  bool recompute = false;
  double act_bytes = 2;            // bytes per activation/parameter element sent (bf16: 2, fp32: 4)
  double grad_bytes = 4;           // gradients are reduced in fp32
  double zero3_gather_bytes = 4;   // ZeRO-3 parameter gathers: lmtrain gathers the f32 master (docs/DIST.md)
  double peak_flops_per_device = 0;
  double efficiency = 0.4;         // achieved fraction of the peak in compute (see docs/PLAN.md)
  Links links;
};

struct StepTime {
  double compute = 0, tp_comm = 0, pp_comm = 0, bubble = 0, dp_comm = 0, dp_comm_total = 0;
  double step = 0;
  double tokens_per_s = 0;
  int64_t micro_batches = 1;  // m = global_batch / (micro_batch · dp)
  std::string dp_link, pp_link;  // which link those terms used
};

// The model's step time; InvalidArgument when the layout's numbers cannot make a step (dp·tp·pp
// not the devices, the batch not divisible, a zero peak).
StatusOr<StepTime> predict_step_time(const StepTimeInputs& in);

}  // namespace lmt::plan
