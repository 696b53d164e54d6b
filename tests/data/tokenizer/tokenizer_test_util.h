// Shared helpers for the tokenizer tests: the shared test data folder and its golden files.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lmt/data/tokenizer/loaders.h"

namespace lmt::data::testing {

inline std::string tokenizers_dir() { return std::string(LMT_SHARED_DATA) + "/tokenizers"; }
inline bool have_tokenizer_data() { return std::filesystem::exists(tokenizers_dir() + "/golden/inputs.jsonl"); }

#define LMT_SKIP_WITHOUT_TOKENIZER_DATA()                                                        \
  if (!::lmt::data::testing::have_tokenizer_data())                                              \
  GTEST_SKIP() << "shared test data not found at " << ::lmt::data::testing::tokenizers_dir()      \
               << " (see ../shared/data/README.md)"

inline std::vector<nlohmann::json> read_jsonl(const std::string& path) {
  std::ifstream in(path);
  std::vector<nlohmann::json> rows;
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) rows.push_back(nlohmann::json::parse(line));
  return rows;
}

inline std::vector<std::string> golden_inputs() {
  std::vector<std::string> texts;
  for (const auto& row : read_jsonl(tokenizers_dir() + "/golden/inputs.jsonl")) texts.push_back(row.at("text").get<std::string>());
  return texts;
}

inline std::vector<std::vector<int32_t>> golden_ids(const std::string& name) {
  std::vector<std::vector<int32_t>> ids;
  for (const auto& row : read_jsonl(tokenizers_dir() + "/golden/" + name + ".jsonl")) {
    const size_t i = row.at("i").get<size_t>();
    if (ids.size() <= i) ids.resize(i + 1);
    ids[i] = row.at("ids").get<std::vector<int32_t>>();
  }
  return ids;
}

// A tokenizer from the shared folder (`rel` relative to tokenizers/), loaded once per test binary
// and kept (the Qwen3 tokenizer.json takes about a second to load).
inline const BpeTokenizer& shared_tokenizer(const std::string& rel, const std::string& encoding = "") {
  static std::map<std::string, std::unique_ptr<BpeTokenizer>> cache;
  auto& slot = cache[rel + "|" + encoding];
  if (!slot) {
    auto t = load_tokenizer(tokenizers_dir() + "/" + rel, encoding);
    if (!t.ok()) {
      ADD_FAILURE() << t.status().ToString();
      std::abort();
    }
    slot.reset(static_cast<BpeTokenizer*>(t->release()));
  }
  return *slot;
}

// A scratch directory per test, removed afterwards.
class ScratchDir : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::temp_directory_path() /
           ("lmt_tok_" + std::string(info->test_suite_name()) + "_" + info->name() + "_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  std::string write(const std::string& name, const std::string& bytes) const {
    std::ofstream(path(name), std::ios::binary) << bytes;
    return path(name);
  }
  std::filesystem::path dir_;
};

}  // namespace lmt::data::testing
