// The parallel layout of a run (recipe keys parallel.dp, .tp, .pp, .sp; the ZeRO stage stays in
// Recipe::zero, which train.zero or its alias parallel.zero sets) and its validation.
//
// Two checks, at two moments:
//   check_parallel_layout: when the recipe is built (no world yet) — what the model and the batch
//     decide: n_heads and n_kv_heads divisible by tp, ffn_hidden and the padded vocabulary
//     divisible by tp (column/row-parallel matmuls, vocabulary-parallel embedding), n_layers >= pp,
//     tp > 1 needs a model whose blocks split (model::shard_config: no MoE layers, no qk_norm_full),
//     pp > 1 one whose layers do not differ by index (model::pipeline_supported: no MoE, no nope_every),
//     ep > 1 needs an MoE model whose moe.num_experts it divides (and divides dp when dp is given),
//     sp needs tp > 1 and train.seq_len divisible by tp (sequence shards), and dp · tp · pp within
//     the limits when dp is given.
//   resolve_parallel_layout: when the world is known (`lmtrain train` start, under mpirun) —
//     
//     dp · tp · pp must equal the world size, with dp = 0 meaning world / (tp · pp).
// Every error names the key(s) and carries a hint.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lmt/base/status.h"
#include "lmt/dist/topology.h"
#include "lmt/model/config.h"

namespace lmt::train {

struct ParallelLayout {
  int64_t dp = 0;  // 0: auto (world / (tp · pp))
  int64_t tp = 1, pp = 1;
  int64_t ep = 1;  // expert parallelism: groups of ep consecutive dp ranks (docs/MOE.md)
  bool sp = false;
  std::vector<int64_t> pp_layers;  // blocks per pipeline stage; empty: balanced by FLOPs (model::pipeline_cuts)
};

// The model/batch checks (see above). `where` prefixes messages (the recipe file or flag that set
// the parallel.* keys).
Status check_parallel_layout(const ParallelLayout& p, const model::ModelConfig& m, int64_t seq_len,
                             const std::string& where);

// The sizes for a world of `world` ranks; errors as described above. dp = 0 resolves to
// world / (tp · pp).
StatusOr<dist::ParallelSizes> resolve_parallel_layout(const ParallelLayout& p, int world);

}  // namespace lmt::train
