// Shared-prefix scoring against the full path on the real stories260K model and real task files
// (PIQA, HellaSwag, ARC-Easy from the shared data): every choice's log-likelihood within
// 1e-4 + 1e-6 per continuation token (absolute; the second term is the f32 rounding of each token's
// loss, which matters only for the longest PIQA solutions: ~300 tokens, ~-6000 nats, under this
// 512-token tokenizer) and the three accuracies identical. stories260K has a 512-id vocabulary and no
// tokenizer lmtrain reads, so the items are encoded with a real 512-id byte-level BPE that
// train_bpe learns from tinyshakespeare here (the ids are real text tokens, <|endoftext|> = 511
// stands in for an empty context); encode_item is the same for both paths, so the comparison is of
// the scoring alone. The shared-prefix path with bf16 decode weights must give the same accuracies.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>

#include "common/files.h"
#include "lmt/data/tokenizer/bpe_trainer.h"
#include "lmt/eval/model_dir.h"
#include "lmt/eval/prefix_scoring.h"
#include "lmt/eval/scoring.h"
#include "lmt/kernels/registry.h"

namespace lmt::eval {
namespace {

const std::string kShared = LMT_SHARED_DATA;

class SharedPrefix : public test::ScratchDirTest {};

TEST_F(SharedPrefix, Stories260KRealTasksMatchTheFullPath) {
  const std::string model_dir = kShared + "/models/stories260K/hf", corpus = kShared + "/corpora/tinyshakespeare.txt";
  if (!std::filesystem::exists(model_dir + "/model.safetensors") || !std::filesystem::exists(corpus))
    GTEST_SKIP() << "shared model or corpus not found under " << kShared;
  auto loaded = load_model_dir(model_dir, kernels::cpu_backend());
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  model::Transformer& m = *loaded->model;
  ASSERT_EQ(m.config().vocab_size, 512);

  data::BpeTrainerOptions bo;
  bo.inputs = {corpus};
  bo.vocab_size = 512;
  bo.threads = 1;
  auto bpe = data::train_bpe(bo);
  ASSERT_TRUE(bpe.ok()) << bpe.status().ToString();
  test::write_bytes(path("tokenizer.json"), data::bpe_tokenizer_json(*bpe));
  auto tok = data::load_tokenizer(path("tokenizer.json"));
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  ASSERT_LE((*tok)->vocab_size(), 512);

  struct Task {
    std::string name, file;
    int64_t limit;
  };
  // Enough items for the accuracies to mean something while the test stays short.
  const std::vector<Task> tasks = {{"piqa", "/eval/piqa/valid.jsonl", 60},
                                   {"hellaswag", "/eval/hellaswag/hellaswag_val.llamacpp.jsonl", 30},
                                   {"arc_easy", "/eval/arc/arc_easy.llmfoundry.jsonl", 100}};
  for (const Task& t : tasks) {
    if (!std::filesystem::exists(kShared + t.file)) GTEST_SKIP() << "task file not found: " << kShared + t.file;
    auto items = parse_task(t.name, kShared + t.file);
    ASSERT_TRUE(items.ok()) << items.status().ToString();
    ScoreOptions full, shared;
    full.scoring = Scoring::kFull;
    shared.scoring = Scoring::kSharedPrefix;
    auto a = evaluate_multiple_choice(m, **tok, *items, t.limit, full, t.name);
    auto b = evaluate_multiple_choice(m, **tok, *items, t.limit, shared, t.name);
    ASSERT_TRUE(a.ok() && b.ok()) << a.status().ToString() << " | " << b.status().ToString();
    ASSERT_EQ(a->items, t.limit) << t.name;
    ASSERT_EQ(b->items, a->items);
    ASSERT_EQ(a->truncated_rows, 0) << t.name << ": the comparison is meant for untruncated rows";
    double worst = 0;
    int64_t choices = 0, above_1e4 = 0;
    for (int64_t i = 0; i < a->items; ++i) {
      ASSERT_EQ(a->scores[i].logprob.size(), b->scores[i].logprob.size());
      for (size_t c = 0; c < a->scores[i].logprob.size(); ++c, ++choices) {
        const double x = a->scores[i].logprob[c], y = b->scores[i].logprob[c];
        const double tol = 1e-4 + 1e-6 * static_cast<double>(a->scores[i].tokens[c]);
        EXPECT_NEAR(x, y, tol) << t.name << " item " << i << " choice " << c << " (" << a->scores[i].tokens[c] << " tokens)";
        EXPECT_EQ(a->scores[i].tokens[c], b->scores[i].tokens[c]);
        worst = std::max(worst, std::abs(x - y));
        above_1e4 += std::abs(x - y) > 1e-4;
      }
      EXPECT_EQ(a->scores[i].chars, b->scores[i].chars);
    }
    EXPECT_EQ(a->acc, b->acc) << t.name;
    EXPECT_EQ(a->acc_norm_token, b->acc_norm_token) << t.name;
    EXPECT_EQ(a->acc_norm_char, b->acc_norm_char) << t.name;
    // A model that scores like chance everywhere would make "identical accuracies" vacuous: the
    // choices must actually be told apart (the log-likelihoods differ within items).
    int64_t distinct = 0;
    for (const ItemScores& s : b->scores) distinct += s.logprob[0] != s.logprob[1];
    EXPECT_GT(distinct, a->items / 2) << t.name;
    std::printf("%-9s %4lld items, %5lld choices: acc %.4f, acc_norm_token %.4f, acc_norm_char %.4f; max |full - shared| = %.3g (%lld above 1e-4)\n",
                t.name.c_str(), static_cast<long long>(a->items), static_cast<long long>(choices), a->acc, a->acc_norm_token,
                a->acc_norm_char, worst, static_cast<long long>(above_1e4));

    // bf16 decode weights (f32 activations): the same accuracies on these items; the
    // log-likelihoods move by the weights' rounding only (bounded per token, see the message).
    ScoreOptions shared16 = shared;
    shared16.decode_weights = DType::kBF16;
    auto c = evaluate_multiple_choice(m, **tok, *items, t.limit, shared16, t.name);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    double worst16 = 0, worst16_per_token = 0;
    for (int64_t i = 0; i < c->items; ++i)
      for (size_t k = 0; k < c->scores[i].logprob.size(); ++k) {
        const double d = std::abs(c->scores[i].logprob[k] - b->scores[i].logprob[k]);
        worst16 = std::max(worst16, d);
        worst16_per_token = std::max(worst16_per_token, d / static_cast<double>(b->scores[i].tokens[k]));
      }
    EXPECT_GT(worst16, 0.0) << t.name << ": the bf16 decoder must read rounded weights";
    // Measured: at most 0.017 (PIQA, HellaSwag) and 0.032 (ARC-Easy, short continuations) nats per token.
    EXPECT_LE(worst16_per_token, 0.05) << t.name << ": bf16 weights moved a log-likelihood by more than 0.05 nats per token";
    EXPECT_EQ(c->acc, b->acc) << t.name << " (bf16 decode weights)";
    EXPECT_EQ(c->acc_norm_token, b->acc_norm_token) << t.name << " (bf16 decode weights)";
    EXPECT_EQ(c->acc_norm_char, b->acc_norm_char) << t.name << " (bf16 decode weights)";
    std::printf("%-9s bf16 decode weights: acc %.4f, acc_norm_token %.4f, acc_norm_char %.4f; max |f32 - bf16| = %.3g "
                "(%.3g per token)\n",
                t.name.c_str(), c->acc, c->acc_norm_token, c->acc_norm_char, worst16, worst16_per_token);
  }
}

}  // namespace
}  // namespace lmt::eval
