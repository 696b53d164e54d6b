#include "lmt/dist/device_communicator.h"

#include <map>
#include <mutex>

namespace lmt::dist {
namespace {

struct Registry {
  std::mutex mu;
  std::map<std::string, DeviceCommunicatorFactory> factories;
};

Registry& registry() {
  static Registry r;  // constructed on first use, so static initialisers of other files may register
  return r;
}

}  // namespace

bool register_device_communicator(const std::string& backend, DeviceCommunicatorFactory factory) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.factories.emplace(backend, factory);
  return true;
}

StatusOr<std::unique_ptr<Communicator>> make_device_communicator(const std::string& backend, Communicator& host) {
  DeviceCommunicatorFactory factory = nullptr;
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mu);
    auto it = r.factories.find(backend);
    if (it != r.factories.end()) factory = it->second;
  }
  if (factory == nullptr)
    return Unimplemented("data parallelism on the '" + backend + "' backend over " + std::to_string(host.world()) +
                             " processes needs a communicator for its device memory, and this build has none",
                         backend == "cuda" ? "the NCCL communicator is built where CMake finds the CUDA toolkit and "
                                             "NCCL's nccl.h (install NCCL's headers, then reconfigure; docs/CUDA.md), "
                                             "or run one process"
                                           : "run one process, or use --backend cpu under mpirun");
  return factory(host);
}

}  // namespace lmt::dist
