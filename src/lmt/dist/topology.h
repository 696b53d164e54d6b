// Topology: how the ranks of a job are arranged into data-, tensor- and pipeline-parallel groups,
// this rank's coordinates in that grid, and one communicator per group.
//
// Layout (Megatron-LM's order, tp fastest): world rank = (pp · dp_size + dp) · tp_size + tp, so the
// ranks of one tensor-parallel group are adjacent (on one node when tp_size divides the ranks per
// node), then the data-parallel replicas, then the pipeline stages.
//   dp group of a rank: the ranks with its (tp, pp): dp_size ranks, ranked by dp coordinate;
//   tp group: the ranks with its (dp, pp): tp_size ranks, ranked by tp;
//   pp group: the ranks with its (dp, tp): pp_size ranks, ranked by pp.
// dp_size · tp_size · pp_size = world. Today every run is tp = pp = 1 (dp = world); other sizes are
// validated and their groups built, so tensor and pipeline parallelism land as users of this class.
//
// What asks which: "data-parallel rank/size" (the loader's slice, the loss scale 1/(accum · dp),
// the token count, ZeRO shards) is dp_rank()/dp_size() and dp(); "all devices" (MFU's peak, the
// world record, agreeing on a stop, rank 0 writing files) is world().
//
// Ownership: create() borrows the world communicator (it must outlive the Topology) and owns the
// three group communicators. Threading: the thread that owns the world communicator.
#pragma once

#include <memory>

#include "lmt/base/status.h"
#include "lmt/dist/communicator.h"

namespace lmt::dist {

struct ParallelSizes {
  int dp = 1, tp = 1, pp = 1;
};

struct Coordinates {
  int dp = 0, tp = 0, pp = 0;
  bool operator==(const Coordinates&) const = default;
};

enum class ParallelAxis { kData, kTensor, kPipeline };

// Ok when every size is >= 1 and dp · tp · pp = world; else InvalidArgument naming the sizes and
// the world, with a hint.
Status validate_sizes(const ParallelSizes& s, int world);
// The sizes for tp and pp with dp = world / (tp · pp); InvalidArgument when that does not divide.
StatusOr<ParallelSizes> sizes_for_world(int world, int tp = 1, int pp = 1);

// The grid position of world rank `rank` in [0, dp·tp·pp), and back (sizes must be valid).
Coordinates coordinates_of(int rank, const ParallelSizes& s);
int rank_of(const Coordinates& c, const ParallelSizes& s);

// The split() arguments that build `axis`'s groups: ranks with equal color share a group, ranked by
// key (the coordinate along the axis). Colors are in [0, world / size of the axis).
struct GroupColor {
  int color, key;
};
GroupColor group_color(int rank, const ParallelSizes& s, ParallelAxis axis);

class Topology {
 public:
  // Collective over `world` (three split() calls on every rank). Errors: validate_sizes(), or a
  // failed split.
  static StatusOr<std::unique_ptr<Topology>> create(Communicator& world, const ParallelSizes& sizes);

  const ParallelSizes& sizes() const { return sizes_; }
  const Coordinates& coordinates() const { return coords_; }
  int world_size() const { return world_.world(); }
  int world_rank() const { return world_.rank(); }
  int dp_size() const { return sizes_.dp; }
  int dp_rank() const { return coords_.dp; }
  int tp_size() const { return sizes_.tp; }
  int tp_rank() const { return coords_.tp; }
  int pp_size() const { return sizes_.pp; }
  int pp_rank() const { return coords_.pp; }

  Communicator& world() { return world_; }
  Communicator& dp() { return *dp_; }
  Communicator& tp() { return *tp_; }
  Communicator& pp() { return *pp_; }
  Communicator& group(ParallelAxis axis);

 private:
  Topology(Communicator& world, const ParallelSizes& sizes)
      : world_(world), sizes_(sizes), coords_(coordinates_of(world.rank(), sizes)) {}

  Communicator& world_;
  ParallelSizes sizes_;
  Coordinates coords_;
  std::unique_ptr<Communicator> dp_, tp_, pp_;
};

}  // namespace lmt::dist
