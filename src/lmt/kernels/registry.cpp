// The process-wide backend instances.
#include "lmt/kernels/cpu/cpu_backend.h"
#include "lmt/kernels/ref/ref_backend.h"

namespace lmt::kernels {

Backend& ref_backend() {
  static RefBackend backend;
  return backend;
}

Backend& cpu_backend() {
  static CpuBackend backend;
  return backend;
}

}  // namespace lmt::kernels
