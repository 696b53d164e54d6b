// The CUDA backend's per-process state: the device, the compute stream, the cuBLASLt handle and a
// grow-on-demand scratch buffer, shared by every kernel file of kernels/cuda.
//
// Ordering: every kernel, GEMM and copy of the backend runs on `stream`, in call order, so a kernel
// may use what an earlier one wrote without synchronising; only snapshots (checkpoint copies out)
// run on `copy_stream`, ordered with `stream` by events. Host code sees results only after a
// synchronising call (a copy to the host, a reduction returning a value, Backend::synchronize()).
//
// Scratch: scratch(bytes) returns device memory valid until the next scratch() call on this context;
// an op takes all the scratch it needs in one call (carving it up itself) and must not keep it
// across ops. Growing frees the old buffer after a stream synchronise, so memory in use by queued
// kernels is never freed under them. Its size plateaus after the first step.
//
// Threading: one thread at a time (kernels/backend.h).
#pragma once

#include <cstddef>
#include <cstdint>

// Only the opaque handle types, so plain C++ files (the backend class, tests) need no CUDA headers.
typedef struct CUstream_st* cudaStream_t;
typedef struct cublasLtContext* cublasLtHandle_t;
typedef struct CUevent_st* cudaEvent_t;

namespace lmt::kernels::cuda {

struct Context {
  int device = 0;
  int sm_count = 0;
  int cc_major = 0, cc_minor = 0;
  cudaStream_t stream = nullptr;
  cublasLtHandle_t lt = nullptr;
  void* lt_workspace = nullptr;  // cuBLASLt's workspace (kLtWorkspaceBytes)
  void* scratch_ptr = nullptr;
  size_t scratch_bytes = 0;
  void* host_pinned = nullptr;  // small pinned buffer for reductions read back by the host
  size_t host_pinned_bytes = 0;

  // Pinned host buffers for queued host-to-device copies (copy_async): a batch's token ids are
  // copied into one, and the GPU reads them from there while the host goes on. Used in turn; a slot
  // is reused once the copy that read it has run (its event).
  struct UploadSlot {
    void* ptr = nullptr;
    size_t bytes = 0;
    cudaEvent_t read = nullptr;  // recorded after the copy that reads ptr
    bool in_use = false;         // `read` was recorded
  };
  static constexpr int kUploadSlots = 8;
  static constexpr size_t kUploadSlotMaxBytes = size_t{16} << 20;  // larger uploads are copied before returning
  UploadSlot uploads[kUploadSlots];
  int next_upload = 0;

  // Snapshots (Backend::snapshot_async): copies out on a stream of their own, created at the first
  // one. Each waits for the compute stream at its call (before_snapshot); join_snapshots() makes
  // the compute stream wait for the copy stream (after_snapshot). snapshots_pending: issued since
  // the last join.
  cudaStream_t copy_stream = nullptr;
  cudaEvent_t before_snapshot = nullptr, after_snapshot = nullptr;
  bool snapshots_pending = false;

  static constexpr size_t kLtWorkspaceBytes = size_t{64} << 20;
  void* scratch(size_t bytes);
  // Pinned host memory of at least `bytes` (reductions copy their result here), same lifetime rules.
  void* pinned(size_t bytes);
  // The next upload slot, holding at least `bytes` (<= kUploadSlotMaxBytes), its previous copy done.
  UploadSlot& upload_slot(size_t bytes);
  // Waits for the compute stream and, where there is one, the copy stream.
  void sync();
};

// The number of CUDA devices visible to this process (0 when there is no driver or no GPU), and a
// message saying why when there are none.
int visible_device_count(const char** why = nullptr);

}  // namespace lmt::kernels::cuda
