// `lmtrain eval`'s progress (apps/lmtrain/eval_progress.h): scoring in chunks, one progress update
// per chunk, gives the result of one evaluate_multiple_choice call over all the items, and draws
// items done/total with the running accuracy.
#include "eval_progress.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "lmt/kernels/registry.h"

namespace lmt::cli {
namespace {

const std::string kShared = LMT_SHARED_DATA;

std::unique_ptr<model::Transformer> tiny_gpt2_vocab_model() {
  model::ModelConfig c = *model::preset("tiny");
  c.vocab_size = 50257;
  c.max_seq_len = 128;
  c.n_layers = 2;
  c.d_model = 32;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 8;
  c.ffn_hidden = 64;
  c.init_std = 0.5f;
  auto m = std::make_unique<model::Transformer>(c, kernels::cpu_backend());
  m->init(11);
  return m;
}

// 80 items: two chunks, 64 and 16, at batch 1 or 8.
std::vector<eval::McItem> items() {
  std::vector<eval::McItem> out;
  for (int i = 0; i < 80; ++i)
    out.push_back({"Item " + std::to_string(i) + " asks " + std::string(static_cast<size_t>(i % 13), 'x'),
                   {" yes", " no", i % 2 ? " maybe so" : " never"}, i % 3, {}, i + 1});
  return out;
}

void expect_same(const eval::TaskResult& whole, const eval::TaskResult& chunked, bool exact) {
  ASSERT_EQ(chunked.items, whole.items);
  ASSERT_EQ(chunked.scores.size(), whole.scores.size());
  for (size_t i = 0; i < whole.scores.size(); ++i)
    for (size_t c = 0; c < whole.scores[i].logprob.size(); ++c) {
      const double a = whole.scores[i].logprob[c], b = chunked.scores[i].logprob[c];
      if (exact) EXPECT_EQ(a, b) << "item " << i << " choice " << c;
      else EXPECT_NEAR(a, b, 1e-5 * std::max(1.0, std::abs(a))) << "item " << i << " choice " << c;
      EXPECT_EQ(whole.scores[i].tokens[c], chunked.scores[i].tokens[c]);
    }
  EXPECT_EQ(chunked.acc, whole.acc);
  EXPECT_EQ(chunked.acc_norm_token, whole.acc_norm_token);
  EXPECT_EQ(chunked.acc_norm_char, whole.acc_norm_char);
  EXPECT_EQ(chunked.rows, whole.rows);
  EXPECT_EQ(chunked.truncated_rows, whole.truncated_rows);
  EXPECT_EQ(chunked.task, "hand");
  EXPECT_GT(chunked.items_per_s, 0);
}

TEST(EvalProgress, ChunkedScoringEqualsOneCall) {
  const std::string tok_dir = kShared + "/tokenizers/gpt2";
  if (!std::filesystem::exists(tok_dir + "/encoder.json")) GTEST_SKIP() << "GPT-2 tokenizer not found at " << tok_dir;
  auto tok = data::load_tokenizer(tok_dir);
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  auto m = tiny_gpt2_vocab_model();
  const auto its = items();
  for (int batch : {1, 8}) {
    eval::ScoreOptions o;
    o.batch = batch;
    auto whole = eval::evaluate_multiple_choice(*m, **tok, its, 0, o, "hand");
    auto chunked = score_with_progress(*m, **tok, its, 0, o, "hand");
    ASSERT_TRUE(whole.ok() && chunked.ok()) << whole.status().ToString() << chunked.status().ToString();
    // One row per forward pass at batch 1: chunking cannot change a bit. At batch 8 the rows at the
    // chunk boundaries share passes with other rows: within the batching tolerance of scoring_test.
    expect_same(*whole, *chunked, /*exact=*/batch == 1);
  }
  eval::ScoreOptions o;
  auto limited = score_with_progress(*m, **tok, its, 66, o, "hand");  // --limit across a chunk boundary
  ASSERT_TRUE(limited.ok());
  EXPECT_EQ(limited->items, 66);
}

}  // namespace
}  // namespace lmt::cli
