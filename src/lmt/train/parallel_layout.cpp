#include "lmt/train/parallel_layout.h"

#include "lmt/model/pipeline_split.h"
#include "lmt/model/tensor_parallel.h"

namespace lmt::train {
namespace {

std::string str(int64_t v) { return std::to_string(v); }

}  // namespace

Status check_parallel_layout(const ParallelLayout& p, const model::ModelConfig& m, int64_t seq_len,
                             const std::string& where) {
  const std::string at = where.empty() ? "" : where + ": ";
  const std::string tp = "parallel.tp = " + str(p.tp);
  const std::string hint_tp = "choose parallel.tp dividing n_heads, n_kv_heads, ffn_hidden and the padded vocabulary "
                              "(`lmtrain plan --preset ... --devices N` lists the valid layouts)";
  if (m.n_heads % p.tp != 0)
    return InvalidArgument(at + tp + " does not divide model.n_heads = " + str(m.n_heads) +
                               ": tensor parallelism splits the attention heads across its ranks", hint_tp);
  if (m.n_kv_heads % p.tp != 0)
    return InvalidArgument(at + tp + " does not divide the KV heads (model.n_kv_heads = " + str(m.n_kv_heads) +
                               "): each tensor-parallel rank holds whole KV heads (replication is not supported)",
                           hint_tp);
  if (m.moe_layer_count() < m.n_layers && m.ffn_hidden % p.tp != 0)  // some layer has the dense FFN
    return InvalidArgument(at + tp + " does not divide model.ffn_hidden = " + str(m.ffn_hidden) +
                               ": the MLP is split column/row-parallel",
                           hint_tp);
  if (m.moe.enabled() && m.moe.expert_ffn % p.tp != 0)
    return InvalidArgument(at + tp + " does not divide model.moe.expert_ffn = " + str(m.moe.expert_ffn) +
                               ": every expert's FFN is split column/row-parallel like the dense one",
                           "choose parallel.tp dividing model.moe.expert_ffn");
  if (m.padded_vocab() % p.tp != 0)
    return InvalidArgument(at + tp + " does not divide the padded vocabulary " + str(m.padded_vocab()) +
                               " (model.vocab_size " + str(m.vocab_size) + " padded to a multiple of " +
                               str(m.vocab_pad_to) + "): the embedding and LM head are split by vocabulary rows",
                           hint_tp + ", or raise the model's vocab_pad_to to a multiple of parallel.tp");
  if (p.pp > m.n_layers)
    return InvalidArgument(at + "parallel.pp = " + str(p.pp) + " is more than model.n_layers = " + str(m.n_layers) +
                               ": every pipeline stage needs at least one layer",
                           "use parallel.pp <= " + str(m.n_layers));
  if (p.sp && p.tp == 1)
    return InvalidArgument(at + "parallel.sp = true needs parallel.tp > 1: sequence parallelism shards the sequence "
                                "across the tensor-parallel ranks",
                           "set parallel.tp >= 2, or parallel.sp = false");
  if (p.sp && seq_len % p.tp != 0)
    return InvalidArgument(at + "parallel.sp = true: train.seq_len = " + str(seq_len) + " is not divisible by " + tp +
                               " (each tensor-parallel rank holds seq_len / tp positions)",
                           "choose train.seq_len as a multiple of parallel.tp");
  if (p.ep > 1) {
    const std::string ep = "parallel.ep = " + str(p.ep);
    if (!m.moe.enabled())
      return InvalidArgument(at + ep + " needs a mixture-of-experts model (model.moe.num_experts > 0): expert "
                                  "parallelism splits the routed experts",
                             "set parallel.ep = 1 for a dense model");
    if (m.moe.num_experts % p.ep != 0)
      return InvalidArgument(at + ep + " does not divide model.moe.num_experts = " + str(m.moe.num_experts) +
                                 ": each expert-parallel rank computes E / ep experts",
                             "choose parallel.ep dividing model.moe.num_experts and the data-parallel size");
    if (p.dp > 0 && p.dp % p.ep != 0)
      return InvalidArgument(at + ep + " does not divide parallel.dp = " + str(p.dp) +
                                 ": expert-parallel groups are carved out of the data-parallel ranks",
                             "choose parallel.ep dividing parallel.dp");
  }
  if (!p.pp_layers.empty()) {
    int64_t sum = 0;
    for (int64_t n : p.pp_layers) sum += n;
    if (static_cast<int64_t>(p.pp_layers.size()) != p.pp || sum != m.n_layers)
      return InvalidArgument(at + "parallel.pp_layers lists " + str(static_cast<int64_t>(p.pp_layers.size())) +
                                 " stages of " + str(sum) + " blocks in all; parallel.pp = " + str(p.pp) +
                                 " stages of model.n_layers = " + str(m.n_layers) + " blocks are needed",
                             "give one whole number >= 1 per stage, summing to the layer count, or leave it empty "
                             "(balanced by FLOPs)");
  }
  {  // what the model's blocks cannot split (MoE layers, qk_norm_full, nope_every)
    Status split = model::tensor_parallel_supported(m, static_cast<int>(p.tp));
    if (split.ok() && p.pp <= m.n_layers) split = model::pipeline_supported(m, static_cast<int>(p.pp));
    if (!split.ok()) return split.WithContext(where);
  }
  if (p.dp > 0 && p.dp * p.tp * p.pp > (int64_t{1} << 24))
    return InvalidArgument(at + "parallel.dp · parallel.tp · parallel.pp = " + str(p.dp * p.tp * p.pp) +
                               " ranks is more than the limit of 2^24",
                           "lower parallel.dp, parallel.tp or parallel.pp");
  return Status::Ok();
}

StatusOr<dist::ParallelSizes> resolve_parallel_layout(const ParallelLayout& p, int world) {
  // What cannot run at all is said first, whatever the world.
  const int64_t w = world;
  const int64_t model_ranks = p.tp * p.pp;
  int64_t dp = p.dp;
  if (dp == 0) {
    if (w % model_ranks != 0)
      return InvalidArgument("parallel.tp · parallel.pp = " + str(p.tp) + " · " + str(p.pp) + " = " + str(model_ranks) +
                                 " does not divide the world size " + str(w) + " (parallel.dp = 0 means world / (tp · pp))",
                             "run with a multiple of " + str(model_ranks) + " ranks (mpirun -np), or change parallel.tp / parallel.pp");
    dp = w / model_ranks;
  }
  if (dp * model_ranks != w)
    return InvalidArgument("parallel.dp · parallel.tp · parallel.pp = " + str(dp) + " · " + str(p.tp) + " · " + str(p.pp) +
                               " = " + str(dp * model_ranks) + " is not the world size " + str(w) +
                               (w == 1 ? " (a single process; under mpirun -np N the world is N)" : " (the ranks under mpirun)"),
                           "set parallel.dp = 0 (auto: world / (tp · pp)), or run mpirun -np " + str(dp * model_ranks));
  if (dp % p.ep != 0)
    return InvalidArgument("parallel.ep = " + str(p.ep) + " does not divide the data-parallel size " + str(dp) +
                               " (world " + str(w) + " / (tp · pp)): expert-parallel groups are carved out of the "
                               "data-parallel ranks",
                           "run with a multiple of parallel.ep data-parallel ranks (mpirun -np), or lower parallel.ep");
  dist::ParallelSizes s;
  s.dp = static_cast<int>(dp);
  s.tp = static_cast<int>(p.tp);
  s.pp = static_cast<int>(p.pp);
  LMT_RETURN_IF_ERROR(dist::validate_sizes(s, world));
  return s;
}

}  // namespace lmt::train
