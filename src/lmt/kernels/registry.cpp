// The backend registry (registry.h): names → factories, and the process-wide instances.
#include "lmt/kernels/registry.h"

#include <functional>
#include <map>
#include <mutex>
#include <utility>

#include "lmt/base/check.h"
#include "lmt/kernels/cpu/cpu_backend.h"
#include "lmt/kernels/ref/ref_backend.h"

namespace lmt::kernels {
namespace {

struct Entry {
  BackendFactory factory;
  std::once_flag created;
  std::unique_ptr<Backend> instance;  // set once, under `created`
};

bool valid_name(std::string_view name) {
  if (name.empty()) return false;
  for (char c : name)
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-')) return false;
  return true;
}

// Entries are never removed, so an Entry* stays valid after the lock is released.
class Registry {
 public:
  // The built-ins go straight into the map: calling register_backend() from here would re-enter
  // registry() while its static is being initialised.
  Registry() {
    add("cpu", [] { return std::make_unique<CpuBackend>(); });
    add("ref", [] { return std::make_unique<RefBackend>(); });
  }

  void add(std::string name, BackendFactory factory) {
    LMT_CHECK(valid_name(name)) << "backend name '" << name << "' must be non-empty lower-case letters, digits, '_' or '-'";
    LMT_CHECK(factory) << "backend '" << name << "' registered without a factory";
    std::lock_guard<std::mutex> lock(mu_);
    auto entry = std::make_unique<Entry>();
    entry->factory = std::move(factory);
    const bool inserted = entries_.emplace(name, std::move(entry)).second;
    LMT_CHECK(inserted) << "backend '" << name << "' is registered twice";
  }

  Entry* find(std::string_view name) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = entries_.find(name);
    return it == entries_.end() ? nullptr : it->second.get();
  }

  std::vector<std::string> names() {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<std::string> out;
    out.reserve(entries_.size());
    for (const auto& [name, entry] : entries_) out.push_back(name);  // std::map: sorted
    return out;
  }

 private:
  std::mutex mu_;
  std::map<std::string, std::unique_ptr<Entry>, std::less<>> entries_;
};

// Created on first use, so registrars in other files may run in any static-initialisation order.
Registry& registry() {
  static Registry r;
  return r;
}

Backend& instance(std::string_view name, Entry& e) {
  std::call_once(e.created, [&] {
    e.instance = e.factory();
    LMT_CHECK(e.instance != nullptr) << "the factory of backend '" << name << "' returned no backend";
  });
  return *e.instance;
}

}  // namespace

void register_backend(std::string name, BackendFactory factory) { registry().add(std::move(name), std::move(factory)); }

StatusOr<Backend*> find_backend(std::string_view name) {
  Entry* e = registry().find(name);
  if (e == nullptr)
    return InvalidArgument("unknown backend '" + std::string(name) + "' (registered backends: " + backend_names_text() + ")",
                           "use one of the registered names, e.g. --backend cpu (or runtime.backend = \"cpu\" in a recipe)");
  Backend* b = &instance(name, *e);
  LMT_RETURN_IF_ERROR(b->available());
  return b;
}

Backend& backend(std::string_view name) {
  Entry* e = registry().find(name);
  LMT_CHECK(e != nullptr) << "backend '" << name << "' is not registered (registered backends: " << backend_names_text() << ")";
  return instance(name, *e);
}

std::vector<std::string> backend_names() { return registry().names(); }

std::string backend_names_text() {
  std::string out;
  for (const auto& n : backend_names()) out += (out.empty() ? "" : ", ") + n;
  return out;
}

Backend& ref_backend() { return backend("ref"); }
Backend& cpu_backend() { return backend("cpu"); }

}  // namespace lmt::kernels
