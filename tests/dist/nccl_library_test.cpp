// NCCL loaded at run time (dist/nccl/nccl_library.h), on any machine: no GPU is needed to load the
// library and bind its symbols. Skips, saying why, where no libnccl.so.2 is found (the CUDA toolkit
// of these machines has one in /usr/local/cuda/lib64).
#include "lmt/dist/nccl/nccl_library.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

namespace lmt::dist::nccl {
namespace {

// $LMT_NCCL_LIBRARY, the loader's libnccl.so.2, or the toolkit's copy: the first that loads.
std::string toolkit_nccl() {
  const char* env = std::getenv("LMT_NCCL_LIBRARY");
  for (const char* f : {env != nullptr ? env : "", "libnccl.so.2", "/usr/local/cuda/lib64/libnccl.so.2"})
    if (*f != '\0' && load_library(f).ok()) return f;
  return "";
}

TEST(NcclLibrary, LoadsAndBindsEverySymbol) {
  const std::string file = toolkit_nccl();
  if (file.empty())
    GTEST_SKIP() << "no libnccl.so.2 on this machine: " << load_library("libnccl.so.2").status().ToString();
  auto lib = load_library(file);
  ASSERT_TRUE(lib.ok()) << lib.status().ToString();
  EXPECT_GE(lib->version, 20700) << "NCCL older than 2.7";
  int v = 0;
  ASSERT_EQ(lib->get_version(&v), ncclSuccess);  // a real call into the library
  EXPECT_EQ(v, lib->version);
  EXPECT_NE(std::string(lib->get_error_string(ncclInvalidArgument)), "");
}

TEST(NcclLibrary, AMissingFileIsAnErrorWithAHint) {
  auto lib = load_library("/nonexistent/libnccl.so.2");
  ASSERT_FALSE(lib.ok());
  EXPECT_EQ(lib.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(lib.status().message().find("/nonexistent/libnccl.so.2"), std::string::npos) << lib.status().ToString();
  EXPECT_NE(lib.status().hint().find("LMT_NCCL_LIBRARY"), std::string::npos) << lib.status().ToString();
}

TEST(NcclLibrary, ALibraryWithoutNcclSymbolsIsRefusedNamingTheFirstMissing) {
  auto lib = load_library("libm.so.6");
  ASSERT_FALSE(lib.ok());
  EXPECT_NE(lib.status().message().find("libm.so.6 lacks ncclGetVersion"), std::string::npos)
      << lib.status().ToString();
}

TEST(NcclLibrary, VersionStrings) {
  EXPECT_EQ(version_string(22805), "2.28.5");
  EXPECT_EQ(version_string(21903), "2.19.3");
  EXPECT_EQ(version_string(2804), "2.8.4");  // before 2.9: major·1000 + minor·100 + patch
}

}  // namespace
}  // namespace lmt::dist::nccl
