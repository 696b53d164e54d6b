// Communicators whose collectives also take device memory: a kernel backend whose buffers live on a
// device (backend "cuda": GPU memory) needs one to run data parallelism over several processes.
// The device's own library registers a factory for its backend's name (dist/nccl registers "cuda"
// in CUDA builds, from a static initialiser, linked whole like the backend itself); the trainer asks
// for one by the backend's name when it runs on a device with more than one process.
//
// The result wraps `host` (the MPI communicator of the same ranks, which must outlive it): buffers
// in device memory go through the device library's collectives, host buffers (scalars, metrics,
// checkpoint gathers) through `host`, so callers pass either kind to the same Communicator API
// (Communicator::device_buffers() is true for it). Collective over `host`: every rank calls it.
#pragma once

#include <memory>
#include <string>

#include "lmt/base/status.h"
#include "lmt/dist/communicator.h"

namespace lmt::dist {

using DeviceCommunicatorFactory = StatusOr<std::unique_ptr<Communicator>> (*)(Communicator& host);

// Registers `factory` for backend `backend` (first registration wins); returns true so a static
// initialiser can call it.
bool register_device_communicator(const std::string& backend, DeviceCommunicatorFactory factory);

// The device communicator for `backend` over `host`. kUnimplemented (with a hint naming the build)
// when this build registered none for it.
StatusOr<std::unique_ptr<Communicator>> make_device_communicator(const std::string& backend, Communicator& host);

}  // namespace lmt::dist
