// Per-device training memory: model states under ZeRO 0-3 with tensor (TP) and pipeline (PP)
// parallelism, activations with and without activation checkpointing and flash attention, and
// allowances for the runtime and allocator fragmentation.
//
// Model states (ZeRO paper, Rajbhandari et al. 2020, mixed-precision Adam, K = 12):
//   bf16/fp8 training: weights 2 B (bf16) + grads 2 B (bf16) + fp32 master 4 B + Adam m 4 B + v 4 B
//   = 16 B/param. fp32/tf32 training: weights 4 (they are the master) + grads 4 + m 4 + v 4 = 16 B.
//   fp8 keeps this bf16 layout (fp8 copies are transient casts, as in Transformer Engine).
//   ZeRO-1 shards master+m+v over DP, ZeRO-2 also grads, ZeRO-3 also weights (plus a transient
//   all-gather of two layers' weights: the one computing and the one prefetched).
//   Parameters a device holds before ZeRO: its pipeline stage's layers divided by TP; the first
//   stage adds the (vocab-parallel) embedding, the last the final norm and the LM head (a tied head
//   is a second copy on the last stage when PP > 1, as Megatron does). Norm weights are counted as
//   split by TP although TP replicates them (< 0.01% of a layer).
//
// Activations (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer
// Models", 16-bit activations): per layer and micro-batch sbh(34 + 5as/h) bytes for the GPT block
// with dropout. This file counts the same tensors for any ModelConfig (GQA, SwiGLU, no dropout):
//   norm inputs 2·e·sbh, QKV input e·sbh, Q and K e·sb(q+kv), V e·sb·kv, out-proj input e·sb·q,
//   FFN input e·sbh, FFN hidden 3·e·sbH (GLU: gate, up, act) or 2·e·sbH (MLP),
//   attention probabilities e·a·s²b (+ a·s²b mask + e·a·s²b output with dropout), dropout masks sbh×2
// (e = element bytes: 2, or 4 in fp32), which is exactly sbh(34 + 5as/h) for GPT-2 shapes with
// dropout (pinned by a test). Flash attention stores no s² tensor: only an fp32 log-sum-exp (4·a·sb).
// TP > 1 is assumed to use sequence parallelism, so everything divides by t (Korthikanti eq. 5);
// without it, 10sbh of the 34 would stay replicated. Full recompute (activation checkpointing) keeps
// only each layer's input e·sbh/t, plus one layer's full working set while it is recomputed.
// Under 1F1B the first pipeline stage holds min(p, m) micro-batches in flight for its L/p layers
// (so its stash equals L layers' worth when m ≥ p); the last stage holds one plus the fp32 logits
// 4·sb·V/t for the (vocab-parallel) cross-entropy. The device total is the larger of the two.
//
// Mixture-of-Experts (docs/MOE.md): model states count EVERY expert (param_count(): all routed
// experts, the routers and the shared experts). Expert parallelism (ep > 1) is assumed carved out of
// the data-parallel group, as in Megatron-Core and torchtitan: the routed experts of each MoE layer
// are split over ep ranks (each holds num_experts/ep of them), and each expert shard is replicated
// over dp/ep ranks; everything else (attention, routers, shared experts, embeddings) is replicated
// over DP as for a dense model. ZeRO shards the routed experts' states over those dp/ep replicas,
// the rest over DP. Pipeline stages get an equal share of the routed experts. Activations of an MoE
// layer: the FFN hidden tensors of the (top_k + shared_experts) experts each token runs (capacity
// padding and the all-to-all buffers are not counted), top_k permuted copies of the FFN input and
// the fp32 router probabilities [s·b, E]; with moe.every > 1 the per-layer figure is the average of
// the dense and the MoE layers.
#pragma once

#include <cstdint>
#include <optional>

#include "lmt/metrics/device_peaks.h"
#include "lmt/model/config.h"

namespace lmt::plan {

struct MemoryInputs {
  std::optional<model::ModelConfig> config;  // full shape: exact per-stage params and activations
  double params = 0;                         // without a config: parameter count; activations unknown
  int64_t seq_len = 2048;
  int64_t micro_batch = 1;
  int64_t micro_batches_per_step = 1;  // m: gradient-accumulation micro-batches per DP rank and step
  int zero_stage = 0;                  // 0..3
  int64_t tp = 1, pp = 1, dp = 1;
  int64_t ep = 1;                      // expert parallelism within DP: divides dp and moe.num_experts
  bool recompute = false;              // full activation checkpointing (per layer)
  bool flash_attention = true;
  bool dropout = false;                // Llama-style pre-training uses none
  metrics::Precision precision = metrics::Precision::kBf16;
  double runtime_overhead_bytes = 0;   // DeviceSpec::runtime_overhead_bytes
  double fragmentation = 0.05;         // allocator fragmentation allowance, fraction of states+activations
};

// Activation bytes per device for one setting, in the four (recompute × flash) variants.
struct ActivationVariants {
  double plain = 0;              // no recompute, no flash attention
  double flash = 0;              // no recompute, flash attention
  double recompute = 0;          // full recompute, no flash (the recomputed layer materialises s²)
  double recompute_flash = 0;    // full recompute, flash attention
};

struct MemoryBreakdown {
  double stage_params = 0;  // parameters this device's model-parallel shard holds (before ZeRO; routed
                            // experts divided by ep)
  double expert_params = 0; // of which routed experts (0 for dense models)
  int64_t stage = 0;        // pipeline stage the figures are for (the larger of first and last)
  double weights = 0, grads = 0, master = 0, adam_m = 0, adam_v = 0;
  double zero3_gather = 0;  // ZeRO-3's gathered units: two layers' weights, and the ends (embeddings,
                            // final norm, LM head) with their full gradient before its reduce-scatter;
                            // over several ranks the vocabulary tensors stream through the layers'
                            // buffers instead (one layer's gradient slot, the other ends)
  bool activations_known = false;  // false with a bare parameter count
  double activations = 0;          // the variant the inputs select (0 when unknown)
  ActivationVariants activation_variants;
  double runtime_overhead = 0;
  double fragmentation = 0;
  double total = 0;

  double model_states() const { return weights + grads + master + adam_m + adam_v; }
};

// Bytes per parameter of each model state (before ZeRO) at `p`; the five sum to 16.
struct StateBytes {
  double weights, grads, master, adam_m, adam_v;
};
StateBytes state_bytes_per_param(metrics::Precision p);

// Routed-expert parameters of the whole model: MoE layers × num_experts × one expert (0 if dense).
double routed_expert_params(const model::ModelConfig& c);

// Activation bytes of one transformer layer for one micro-batch, before TP (no recompute); for MoE
// models the average over the layers (see above).
double layer_activation_bytes(const model::ModelConfig& c, int64_t seq_len, int64_t micro_batch, bool flash,
                              bool dropout, double element_bytes);

// The per-device breakdown. Inputs are assumed valid (parallelism.h checks divisibility).
MemoryBreakdown estimate_memory(const MemoryInputs& in);

// ZeRO-3 over several ranks streams the token embedding and the LM head in chunks of about one
// layer's parameters (train/zero3.h): the LM head runs over this many chunks of vocabulary rows,
// all but the last of them twice (their logits are recomputed for the gradients).
int64_t zero3_head_chunks(const model::ModelConfig& c);

}  // namespace lmt::plan
