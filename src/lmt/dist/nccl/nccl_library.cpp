#include "lmt/dist/nccl/nccl_library.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <string>

namespace lmt::dist::nccl {
StatusOr<Library> load_library(const std::string& file) {
  void* h = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    const char* why = dlerror();
    return FailedPrecondition("NCCL could not be loaded (" + file + ": " + (why ? why : "?") + ")",
                              "install NCCL (the CUDA toolkit's libnccl.so.2, Debian's libnccl2, or the "
                              "nvidia-nccl-cu* wheel) and put it on LD_LIBRARY_PATH, or set LMT_NCCL_LIBRARY "
                              "to the file (docs/CUDA.md)");
  }
  Library lib{};
  std::string missing;
  auto bind = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(h, name));
    if (fn == nullptr && missing.empty()) missing = name;
  };
  bind(lib.get_version, "ncclGetVersion");
  bind(lib.get_unique_id, "ncclGetUniqueId");
  bind(lib.comm_init_rank, "ncclCommInitRank");
  bind(lib.comm_destroy, "ncclCommDestroy");
  bind(lib.comm_abort, "ncclCommAbort");
  bind(lib.comm_get_async_error, "ncclCommGetAsyncError");
  bind(lib.get_error_string, "ncclGetErrorString");
  bind(lib.all_reduce, "ncclAllReduce");
  bind(lib.reduce_scatter, "ncclReduceScatter");
  bind(lib.all_gather, "ncclAllGather");
  bind(lib.broadcast, "ncclBroadcast");
  bind(lib.reduce, "ncclReduce");
  bind(lib.send, "ncclSend");
  bind(lib.recv, "ncclRecv");
  bind(lib.group_start, "ncclGroupStart");
  bind(lib.group_end, "ncclGroupEnd");
  if (!missing.empty()) {
    dlclose(h);
    return FailedPrecondition(file + " lacks " + missing + " (NCCL older than 2.7?)",
                              "install NCCL 2.7 or newer, or set LMT_NCCL_LIBRARY to such a libnccl.so");
  }
  if (lib.get_version(&lib.version) != ncclSuccess) lib.version = 0;
  return lib;  // the handle stays open for the process's life
}

StatusOr<const Library*> library() {
  static std::once_flag once;
  static StatusOr<Library> loaded = FailedPrecondition("NCCL not loaded", "");
  std::call_once(once, [] {
    const char* env = std::getenv("LMT_NCCL_LIBRARY");
    loaded = load_library(env != nullptr && *env != '\0' ? env : "libnccl.so.2");
  });
  if (!loaded.ok()) return loaded.status();
  return &*loaded;
}

std::string version_string(int code) {
  // NCCL >= 2.9 encodes major·10000 + minor·100 + patch; older ones major·1000 + minor·100 + patch.
  const int major = code >= 10000 ? code / 10000 : code / 1000;
  const int rest = code >= 10000 ? code % 10000 : code % 1000;
  return std::to_string(major) + "." + std::to_string(rest / 100) + "." + std::to_string(rest % 100);
}

}  // namespace lmt::dist::nccl
