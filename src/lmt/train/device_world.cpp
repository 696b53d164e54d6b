#include "lmt/train/device_world.h"

#include <string>

#include "lmt/dist/device_communicator.h"

namespace lmt::train {

StatusOr<dist::Communicator*> world_for_backend(kernels::Backend& backend, dist::Communicator& world,
                                                const dist::ParallelSizes& sizes,
                                                std::unique_ptr<dist::Communicator>* owned) {
  if (backend.device().is_host() || world.world() == 1) return &world;
  const std::string name(backend.name());
  if (sizes.tp > 1)
    return Unimplemented("tensor parallelism on the '" + name + "' backend (tp " + std::to_string(sizes.tp) +
                             "): its sums and the vocabulary-parallel loss work in host memory",
                         "use data, pipeline and expert parallelism (parallel.tp = 1) with --backend " + name +
                             ", or --backend cpu (docs/CUDA.md, Known limits)");
  if (world.device_buffers()) return &world;
  LMT_ASSIGN_OR_RETURN(*owned, dist::make_device_communicator(name, world));
  return owned->get();
}

}  // namespace lmt::train
