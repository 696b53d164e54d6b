#include "lmt/kernels/cpu/cpu_backend.h"

#include "lmt/tensor/tensor.h"

namespace lmt::kernels {

void CpuBackend::FreeWorkspace::operator()(void* p) const { aligned_free(p); }

void* CpuBackend::workspace(size_t bytes) {
  if (bytes > workspace_size_) {
    workspace_.reset();  // free first so peak memory is not old + new
    workspace_.reset(aligned_alloc_bytes(bytes, 64));
    workspace_size_ = bytes;
  }
  return workspace_.get();
}

void cpu_require_f32(const char* op, const TensorView& t) {
  LMT_CHECK(!t.present() || t.dtype() == DType::kF32)
      << "kernel '" << op << "': the cpu backend does not support " << t.to_string()
      << " here (f32 only; f64 is for the ref backend)";
}

}  // namespace lmt::kernels
