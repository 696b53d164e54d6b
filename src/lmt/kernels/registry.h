// Backends by name: the process-wide registry of kernel backends ("cpu", "ref", later "cuda", ...).
//
// Code that computes picks its backend by the name a user gave (`runtime.backend` in a recipe,
// `--backend NAME` on the command line) and never names a concrete backend class:
//
//   LMT_ASSIGN_OR_RETURN(kernels::Backend* be, kernels::find_backend(recipe.backend));  // user input
//   kernels::Backend& ref = kernels::backend("ref");                                      // known name
//
// Instances: one per registered name per process, made by the name's factory on its first lookup and
// kept until the process exits (callers hold plain references; nobody owns or deletes them). Lookups
// and first-use creation are thread-safe: concurrent first lookups of a name create one instance.
// Using an instance is not (backend.h: one thread at a time).
//
// Built-ins: "cpu" (kernels/cpu) and "ref" (kernels/ref). The registry registers them itself, from
// registry.cpp, before it answers its first question, so they never depend on a static initialiser
// surviving the link of the lmt_kernels static library.
//
// A backend in its own target (e.g. lmt_kernels_cuda) registers itself from one of its .cpp files
// with a static registrar object:
//
//   LMT_REGISTER_BACKEND(cuda, [] { return std::make_unique<CudaBackend>(); });
//
// The registrar runs during static initialisation, before main(), in any order relative to other
// registrars (the registry is created on first use, so that order does not matter). A linker copies
// an object file out of a static library only when something else references a symbol in it, and
// nothing references a registrar, so such a target must be linked whole:
//
//   add_library(lmt_kernels_cuda OBJECT ...)                                   # or STATIC, plus:
//   target_link_libraries(lmtrain PRIVATE "$<LINK_LIBRARY:WHOLE_ARCHIVE,lmt_kernels_cuda>")
//
// (tests/kernels/CMakeLists.txt does exactly this for registry_test's registrar_backend.cpp, which
// checks the pattern). A target that cannot be linked whole can instead export a function
// (`void register_cuda_backend()`) that calls register_backend() and have main() call it.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "lmt/base/status.h"
#include "lmt/kernels/backend.h"

namespace lmt::kernels {

// Makes the instance of one backend; called at most once per process, on the first lookup.
using BackendFactory = std::function<std::unique_ptr<Backend>()>;

// Adds `name` (non-empty: lower-case letters, digits, '_' or '-') with the factory that makes its
// instance. Registering a name twice, or an empty factory, is a programming error (LMT_CHECK).
// Thread-safe; may run during static initialisation.
void register_backend(std::string name, BackendFactory factory);

// The instance registered as `name`, created on first use. An unknown name is InvalidArgument whose
// message names it and lists the registered names, with a hint; callers add where the name came
// from (the flag or recipe key) with Status::WithContext.
StatusOr<Backend*> find_backend(std::string_view name);

// The instance of a name known to be registered (a built-in, or one find_backend accepted); an
// unknown name is a programming error (LMT_CHECK naming it and the registered names).
Backend& backend(std::string_view name);

// Every registered name, sorted (built-ins included).
std::vector<std::string> backend_names();

// "cpu, ref": the registered names for messages and help texts.
std::string backend_names_text();

// Shorthands for backend("ref") and backend("cpu"), kept for tests. Product code selects backends by
// name (runtime.backend / --backend) and does not call these.
Backend& ref_backend();
Backend& cpu_backend();

namespace detail {
// Registers a backend when constructed: the static object LMT_REGISTER_BACKEND defines.
struct BackendRegistrar {
  BackendRegistrar(const char* name, BackendFactory factory) { register_backend(name, std::move(factory)); }
};
}  // namespace detail

}  // namespace lmt::kernels

// LMT_REGISTER_BACKEND(name, factory): registers backend `name` (an identifier-like token, e.g. cuda)
// from a static object in this file. See the top of this header for how to link its target.
#define LMT_REGISTER_BACKEND(name, factory)                                                             \
  static const ::lmt::kernels::detail::BackendRegistrar lmt_backend_registrar_##name(#name, factory)
