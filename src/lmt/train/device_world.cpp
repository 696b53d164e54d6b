#include "lmt/train/device_world.h"

#include <string>

#include "lmt/dist/device_communicator.h"

namespace lmt::train {

StatusOr<dist::Communicator*> world_for_backend(kernels::Backend& backend, dist::Communicator& world,
                                                std::unique_ptr<dist::Communicator>* owned) {
  if (backend.device().is_host() || world.world() == 1) return &world;
  if (world.device_buffers()) return &world;
  LMT_ASSIGN_OR_RETURN(*owned, dist::make_device_communicator(std::string(backend.name()), world));
  return owned->get();
}

}  // namespace lmt::train
