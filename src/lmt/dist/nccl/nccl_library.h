// NCCL, loaded at run time: dlopen of $LMT_NCCL_LIBRARY, else libnccl.so.2 from the loader's search
// path (LD_LIBRARY_PATH, ldconfig; the CUDA toolkit's lib64 or the nvidia-nccl wheel). lmtrain does
// not link NCCL, so a machine without it still runs everything but multi-GPU training, and the
// binaries carry no 200 MB dependency (scripts/gpu_check.sh --pack copies what ldd lists).
// nccl.h provides the types and signatures only.
#pragma once

#include <nccl.h>

#include <string>

#include "lmt/base/status.h"

namespace lmt::dist::nccl {

struct Library {
  decltype(&::ncclGetVersion) get_version;
  decltype(&::ncclGetUniqueId) get_unique_id;
  decltype(&::ncclCommInitRank) comm_init_rank;
  decltype(&::ncclCommDestroy) comm_destroy;
  decltype(&::ncclCommAbort) comm_abort;
  decltype(&::ncclCommGetAsyncError) comm_get_async_error;
  decltype(&::ncclGetErrorString) get_error_string;
  decltype(&::ncclAllReduce) all_reduce;
  decltype(&::ncclReduceScatter) reduce_scatter;
  decltype(&::ncclAllGather) all_gather;
  decltype(&::ncclBroadcast) broadcast;
  decltype(&::ncclReduce) reduce;
  decltype(&::ncclSend) send;
  decltype(&::ncclRecv) recv;
  decltype(&::ncclGroupStart) group_start;
  decltype(&::ncclGroupEnd) group_end;
  int version = 0;  // ncclGetVersion's code, e.g. 22805 for 2.28.5
};

// The library, loaded once per process (thread-safe) from $LMT_NCCL_LIBRARY or libnccl.so.2;
// FailedPrecondition naming the file (or the missing symbol) with a hint when it cannot be loaded.
StatusOr<const Library*> library();

// `file` loaded now (dlopen's search rules), every symbol bound; the handle stays open.
StatusOr<Library> load_library(const std::string& file);

// "2.28.5" from a version code.
std::string version_string(int code);

}  // namespace lmt::dist::nccl
