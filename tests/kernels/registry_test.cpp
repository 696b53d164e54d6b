// The backend registry (kernels/registry.h): built-in names, one instance per name, the error for an
// unknown name, thread-safe first use, and a backend that registers itself from a static library.
#include "lmt/kernels/registry.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "lmt/kernels/ref/ref_backend.h"

namespace lmt::kernels {
namespace {

bool has_name(const std::vector<std::string>& names, const std::string& n) {
  return std::find(names.begin(), names.end(), n) != names.end();
}

TEST(BackendRegistry, NamesContainTheBuiltinsSorted) {
  const std::vector<std::string> names = backend_names();
  EXPECT_TRUE(has_name(names, "cpu"));
  EXPECT_TRUE(has_name(names, "ref"));
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
  EXPECT_NE(backend_names_text().find("cpu, "), std::string::npos) << backend_names_text();
}

TEST(BackendRegistry, BuiltinsAreTheBackendsTheirNamesSay) {
  EXPECT_EQ(backend("cpu").name(), "cpu");
  EXPECT_EQ(backend("ref").name(), "ref");
  EXPECT_TRUE(backend("cpu").has_flash_attention());
  EXPECT_FALSE(backend("ref").has_flash_attention());
}

TEST(BackendRegistry, RepeatedLookupsGiveTheSameInstance) {
  auto first = find_backend("cpu");
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  auto second = find_backend("cpu");
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(*first, *second);
  EXPECT_EQ(*first, &backend("cpu"));
  EXPECT_EQ(&cpu_backend(), &backend("cpu"));
  EXPECT_EQ(&ref_backend(), &backend("ref"));
  EXPECT_NE(&backend("cpu"), &backend("ref"));
}

TEST(BackendRegistry, UnknownNameIsInvalidArgumentListingTheRegisteredNames) {
  auto r = find_backend("cdua");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  const std::string& m = r.status().message();
  EXPECT_NE(m.find("'cdua'"), std::string::npos) << m;
  for (const auto& name : backend_names()) EXPECT_NE(m.find(name), std::string::npos) << name << " missing from: " << m;
  EXPECT_NE(r.status().hint().find("--backend"), std::string::npos) << r.status().hint();
  EXPECT_FALSE(find_backend("").ok());
  EXPECT_FALSE(find_backend("CPU").ok());  // names are exact
}

TEST(BackendRegistry, UnknownNameInBackendIsAProgrammingError) {
  EXPECT_DEATH(backend("no_such_backend"), "backend 'no_such_backend' is not registered .*cpu");
}

TEST(BackendRegistry, RegisteringANameTwiceIsAProgrammingError) {
  EXPECT_DEATH(register_backend("cpu", [] { return std::make_unique<RefBackend>(); }), "'cpu' is registered twice");
  EXPECT_DEATH(register_backend("Bad Name", [] { return std::make_unique<RefBackend>(); }), "backend name 'Bad Name'");
}

TEST(BackendRegistry, ConcurrentFirstUseCreatesOneInstance) {
  static int made = 0;
  static const bool registered = [] {  // once per process, also under --gtest_repeat
    register_backend("concurrent_test", [] {
      ++made;  // the registry serialises creation: no data race
      return std::make_unique<RefBackend>();
    });
    return true;
  }();
  ASSERT_TRUE(registered);
  std::vector<Backend*> seen(8, nullptr);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < seen.size(); ++i) threads.emplace_back([&seen, i] { seen[i] = &backend("concurrent_test"); });
  for (auto& t : threads) t.join();
  EXPECT_EQ(made, 1);
  for (Backend* b : seen) EXPECT_EQ(b, seen[0]);
  EXPECT_TRUE(has_name(backend_names(), "concurrent_test"));
}

TEST(BackendRegistry, ABackendInAStaticLibraryRegistersItselfBeforeMain) {
  // tests/kernels/registrar_backend.cpp, linked whole into this test (registry.h explains why).
  ASSERT_TRUE(has_name(backend_names(), "registrar_test")) << backend_names_text();
  auto b = find_backend("registrar_test");
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_NE(*b, &backend("ref"));  // its own instance, although it is a RefBackend
  EXPECT_EQ(*b, &backend("registrar_test"));
}

}  // namespace
}  // namespace lmt::kernels
