// The communicator a run's data parallelism uses on its backend. A host backend (cpu, ref) or one
// process: the world communicator itself. A device backend (cuda) over several processes: the
// device communicator over the same ranks (dist/device_communicator.h: NCCL for cuda), which
// reduces the gradients where they live and passes host buffers to `world`.
// Device backends run data parallelism (ZeRO 0-2), tensor parallelism (the groups' sums, gathers
// and reduce-scatters of activations in device memory; the loss's per-row statistics combined on the
// host), pipeline parallelism (activations sent as send/receive pairs in device memory) and expert
// parallelism (the MoE rows exchanged by the device communicator's all_to_all_v); ZeRO 3 is refused
// by Zero3::supports.
#pragma once

#include <memory>

#include "lmt/base/status.h"
#include "lmt/dist/communicator.h"
#include "lmt/kernels/backend.h"

namespace lmt::train {

// `world` or, for a device backend over several processes, a new device communicator held by
// `*owned` (which must outlive every use of the result; `world` must outlive `*owned`). Collective.
StatusOr<dist::Communicator*> world_for_backend(kernels::Backend& backend, dist::Communicator& world,
                                                std::unique_ptr<dist::Communicator>* owned);

}  // namespace lmt::train
