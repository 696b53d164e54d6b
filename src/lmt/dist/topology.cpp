#include "lmt/dist/topology.h"

#include <string>

#include "lmt/base/check.h"

namespace lmt::dist {
namespace {

std::string sizes_text(const ParallelSizes& s) {
  return "dp " + std::to_string(s.dp) + " × tp " + std::to_string(s.tp) + " × pp " + std::to_string(s.pp);
}

}  // namespace

Status validate_sizes(const ParallelSizes& s, int world) {
  if (s.dp < 1 || s.tp < 1 || s.pp < 1)
    return InvalidArgument("parallel sizes " + sizes_text(s) + ": every size must be at least 1",
                           "use 1 for a kind of parallelism that is not used");
  if (static_cast<int64_t>(s.dp) * s.tp * s.pp != world)
    return InvalidArgument("parallel sizes " + sizes_text(s) + " = " +
                               std::to_string(static_cast<int64_t>(s.dp) * s.tp * s.pp) + " ranks, but the job has " +
                               std::to_string(world),
                           "start dp · tp · pp ranks (mpirun -np), or choose sizes whose product is the number of ranks");
  return Status::Ok();
}

StatusOr<ParallelSizes> sizes_for_world(int world, int tp, int pp) {
  if (tp < 1 || pp < 1 || world % (static_cast<int64_t>(tp) * pp) != 0)
    return InvalidArgument("tp " + std::to_string(tp) + " × pp " + std::to_string(pp) + " does not divide the " +
                               std::to_string(world) + " ranks of the job",
                           "start a multiple of tp · pp ranks, or lower tp or pp");
  ParallelSizes s{world / (tp * pp), tp, pp};
  LMT_RETURN_IF_ERROR(validate_sizes(s, world));
  return s;
}

Coordinates coordinates_of(int rank, const ParallelSizes& s) {
  LMT_CHECK(rank >= 0 && rank < s.dp * s.tp * s.pp) << "rank " << rank << " outside " << sizes_text(s);
  Coordinates c;
  c.tp = rank % s.tp;
  c.dp = (rank / s.tp) % s.dp;
  c.pp = rank / (s.tp * s.dp);
  return c;
}

int rank_of(const Coordinates& c, const ParallelSizes& s) {
  LMT_CHECK(c.dp >= 0 && c.dp < s.dp && c.tp >= 0 && c.tp < s.tp && c.pp >= 0 && c.pp < s.pp)
      << "coordinates (dp " << c.dp << ", tp " << c.tp << ", pp " << c.pp << ") outside " << sizes_text(s);
  return (c.pp * s.dp + c.dp) * s.tp + c.tp;
}

GroupColor group_color(int rank, const ParallelSizes& s, ParallelAxis axis) {
  const Coordinates c = coordinates_of(rank, s);
  switch (axis) {
    case ParallelAxis::kData:  // same (tp, pp)
      return {c.pp * s.tp + c.tp, c.dp};
    case ParallelAxis::kTensor:  // same (dp, pp)
      return {c.pp * s.dp + c.dp, c.tp};
    case ParallelAxis::kPipeline:  // same (dp, tp)
      return {c.dp * s.tp + c.tp, c.pp};
  }
  LMT_CHECK(false) << "unknown parallel axis";
  return {0, 0};
}

StatusOr<std::unique_ptr<Topology>> Topology::create(Communicator& world, const ParallelSizes& sizes) {
  LMT_RETURN_IF_ERROR(validate_sizes(sizes, world.world()));
  std::unique_ptr<Topology> t(new Topology(world, sizes));
  // Every rank makes the three splits in the same order (they are collective over the world).
  for (ParallelAxis axis : {ParallelAxis::kData, ParallelAxis::kTensor, ParallelAxis::kPipeline}) {
    const GroupColor g = group_color(world.rank(), sizes, axis);
    auto made = world.split(g.color, g.key);
    if (!made.ok()) return made.status().WithContext("building the parallel groups (" + sizes_text(sizes) + ")");
    std::unique_ptr<Communicator>& slot = axis == ParallelAxis::kData ? t->dp_ : axis == ParallelAxis::kTensor ? t->tp_ : t->pp_;
    slot = std::move(*made);
  }
  LMT_CHECK(t->dp_->world() == sizes.dp && t->dp_->rank() == t->coords_.dp) << "dp group mismatch";
  LMT_CHECK(t->tp_->world() == sizes.tp && t->tp_->rank() == t->coords_.tp) << "tp group mismatch";
  LMT_CHECK(t->pp_->world() == sizes.pp && t->pp_->rank() == t->coords_.pp) << "pp group mismatch";
  return t;
}

Communicator& Topology::group(ParallelAxis axis) {
  switch (axis) {
    case ParallelAxis::kData:
      return *dp_;
    case ParallelAxis::kTensor:
      return *tp_;
    case ParallelAxis::kPipeline:
      return *pp_;
  }
  LMT_CHECK(false) << "unknown parallel axis";
  return *dp_;
}

}  // namespace lmt::dist
