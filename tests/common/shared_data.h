// The shared test data (../shared/data beside the checkout: corpora, tokenizers, models, eval sets;
// ../shared/data/README.md). A test that needs a file of it skips, naming what is missing, where it
// is absent (a clone elsewhere), instead of failing:
//
//   LMT_SKIP_WITHOUT_SHARED("corpora/tinyshakespeare.txt");
//
// Works in a TEST body and in a fixture's SetUp (GTEST_SKIP returns from the function).
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

namespace lmt::test {

inline std::string shared_data(const std::string& rel) { return std::string(LMT_SHARED_DATA) + "/" + rel; }

}  // namespace lmt::test

#define LMT_SKIP_WITHOUT_SHARED(rel)                                                                     \
  do {                                                                                                 \
    const std::string lmt_shared_path_ = ::lmt::test::shared_data(rel);                                \
    if (!std::filesystem::exists(lmt_shared_path_))                                                    \
      GTEST_SKIP() << "shared test data not found: " << lmt_shared_path_ << " (../shared/data is absent)"; \
  } while (0)
