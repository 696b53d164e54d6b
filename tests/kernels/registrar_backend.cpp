// A backend that registers itself the way a backend in its own target does (kernels/registry.h):
// a static registrar in a static library that nothing references. registry_test links this library
// whole ($<LINK_LIBRARY:WHOLE_ARCHIVE,...>) and checks that the name arrives in the registry before
// main(); without the whole-archive link the linker would drop this file and the test would fail.
// The instance is a second RefBackend (so it implements every op without a copy of the interface).
#include <memory>

#include "lmt/kernels/ref/ref_backend.h"
#include "lmt/kernels/registry.h"

LMT_REGISTER_BACKEND(registrar_test, [] { return std::make_unique<lmt::kernels::RefBackend>(); });
