// A small learnable dataset for trainer tests: documents that follow a fixed random successor
// table 90% of the time, so a tiny model's loss falls within a few steps. Every tenth document goes
// to the validation split (none with with_val = false). Written through the real DatasetWriter; fails the test on error.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "lmt/base/rng.h"
#include "lmt/data/dataset_writer.h"

namespace lmt::test {

inline void write_markov_dataset(const std::string& dir, int64_t vocab, const std::string& generator,
                                 bool with_val = true) {
  data::DatasetSpec spec;
  spec.tokenizer_path = "synthetic";
  spec.tokenizer_fingerprint = "synthetic-v1";
  spec.vocab_size = vocab;
  spec.eos_id = static_cast<int32_t>(vocab - 1);
  spec.shard_tokens = 4096;
  auto w = data::DatasetWriter::create(dir, spec);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  Rng rng(1);
  std::vector<int32_t> next(vocab - 1);
  for (auto& n : next) n = static_cast<int32_t>(rng.below(vocab - 1));
  for (int d = 0; d < 240; ++d) {
    std::vector<int32_t> doc;
    int32_t t = static_cast<int32_t>(rng.below(vocab - 1));
    const int64_t len = 20 + static_cast<int64_t>(rng.below(80));
    for (int64_t i = 0; i < len; ++i) {
      doc.push_back(t);
      t = rng.uniform() < 0.9 ? next[t] : static_cast<int32_t>(rng.below(vocab - 1));
    }
    ASSERT_TRUE((*w)->add_document(with_val && d % 10 == 0 ? data::Split::kVal : data::Split::kTrain, doc).ok());
  }
  ASSERT_TRUE((*w)->commit({{"generator", generator}}).ok());
}

}  // namespace lmt::test

namespace lmt::test {

// A dataset whose manifest names GPT-2's real tokenizer (from the shared data, `shared`), so that
// multiple-choice task text can be encoded during training: 40 documents of 200 random ids below
// 1000, every tenth in the validation split. Fails the test on error.
inline void write_gpt2_dataset(const std::string& dir, const std::string& shared) {
  data::DatasetSpec spec;
  spec.tokenizer_path = shared + "/tokenizers/gpt2";
  spec.tokenizer_fingerprint = "gpt2";
  spec.vocab_size = 50257;
  spec.eos_id = 50256;
  auto w = data::DatasetWriter::create(dir, spec);
  ASSERT_TRUE(w.ok()) << w.status().ToString();
  Rng rng(2);
  for (int d = 0; d < 40; ++d) {
    std::vector<int32_t> doc(200);
    for (auto& t : doc) t = static_cast<int32_t>(rng.below(1000));
    ASSERT_TRUE((*w)->add_document(d % 10 == 0 ? data::Split::kVal : data::Split::kTrain, doc).ok());
  }
  ASSERT_TRUE((*w)->commit({}).ok());
}

// The [model] and [data] sections of a recipe for a 2-layer, 20k-parameter Llama on a dataset
// written by write_markov_dataset (vocabulary 64): milliseconds per step, for CLI-level tests.
inline std::string tiny_recipe_head(const std::string& data_dir) {
  return "[model]\npreset = 'tiny'\nn_layers = 2\nd_model = 32\nn_heads = 4\nn_kv_heads = 2\nhead_dim = 8\n"
         "ffn_hidden = 64\nmax_seq_len = 64\n[data]\npath = '" + data_dir + "'\n";
}

}  // namespace lmt::test
