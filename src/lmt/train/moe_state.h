// The trainer's MoE bookkeeping across ranks (docs/MOE.md): the step record's routing statistics
// and the router selection bias in checkpoints, for any layout. A rank's model may be a pipeline
// stage (its block l is the whole model's block config().moe.first_layer + l) or a tensor-parallel
// part (the same layers and experts, identical statistics and bias on every rank of the group).
//
// Collective functions take the groups they sum over; every rank of them calls in the same order.
// Threading: the Trainer's thread.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "lmt/base/status.h"
#include "lmt/dist/communicator.h"
#include "lmt/io/checkpoint_dir.h"
#include "lmt/model/config.h"
#include "lmt/model/transformer.h"
#include "lmt/tensor/tensor.h"

namespace lmt::train {

// Checkpoint name of the router bias: f32 [whole n_layers, E], saved beside the optimizer state.
inline constexpr const char* kRouterBiasState = io::kCheckpointRouterBias;

// Collective over `dp` (size world): every rank routes its own tokens; the loads (and dropped
// counts, aux and z-loss values) of m.moe_stats() are replaced by their sums over the ranks (aux
// and z averaged), so that every rank applies the same router bias update. No-op for world 1.
Status sum_moe_stats_over_ranks(dist::Communicator& dp, int world, model::Transformer& m);

// Collective over `pp` (nullptr: none): the whole model's statistics ([whole.n_layers], empty for
// dense layers and for layers of no stage), each stage contributing its layers.
StatusOr<std::vector<model::MoeStepStats>> whole_moe_stats(const model::Transformer& m, const model::ModelConfig& whole,
                                                           dist::Communicator* pp);

// The MoE part of a step record: per MoE layer of `whole` the expert loads (routed top-k slots
// summed over the step's micro-batches), max/mean imbalance, dropped slots and the aux / z-loss
// values (mean over micro-batches), and their sums over layers.
nlohmann::json moe_record(const model::ModelConfig& whole, const std::vector<model::MoeStepStats>& stats);

// Collective over `pp` (nullptr: none): the whole model's router bias [whole.n_layers, E] f32, or
// an absent Tensor when the model has none (balance other than kBiasUpdate).
StatusOr<Tensor> whole_router_bias(const model::Transformer& m, const model::ModelConfig& whole, dist::Communicator* pp);

// A zeroed whole-model buffer for loading the bias (absent without one).
Tensor whole_router_bias_buffer(const model::Transformer& m, const model::ModelConfig& whole);

// Copies this model's rows [first_layer, first_layer + n_layers) of `whole` into its bias.
void set_router_bias(model::Transformer& m, const TensorView& whole);

// The model's own bias as [n_layers, E] (the whole model's when the model is whole), or absent.
TensorView own_router_bias(const model::Transformer& m);

// Appends (kRouterBiasState, bias) to `state` when `bias` is present.
void add_router_bias(const TensorView& bias, std::vector<std::pair<std::string, TensorView>>& state);

}  // namespace lmt::train
