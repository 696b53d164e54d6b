// Continuation scoring: the stories260K log-probs against an independent PyTorch computation, the
// accuracy arithmetic on scores we control, batching determinism, truncation and the suite's
// promise to leave a training plan as it found it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "lmt/eval/model_dir.h"
#include "lmt/eval/scoring.h"
#include "lmt/eval/suite.h"
#include "lmt/kernels/cpu/cpu_backend.h"
#include "lmt/kernels/registry.h"

namespace lmt::eval {
namespace {

const std::string kShared = LMT_SHARED_DATA;

// stories260K (HF form) through load_model_dir, every reference pair within 1e-4: the full path at
// batch 8 and 1, and shared-prefix scoring.
TEST(Scoring, Stories260KMatchesPyTorchReference) {
  const std::string dir = kShared + "/models/stories260K/hf";
  if (!std::filesystem::exists(dir + "/model.safetensors")) GTEST_SKIP() << "shared model not found at " << dir;
  std::ifstream in(std::string(LMT_EVAL_GOLDEN_DIR) + "/logprob_reference.json");
  ASSERT_TRUE(in.good()) << "tests/eval/golden/logprob_reference.json is missing (make_logprob_reference.py writes it)";
  const nlohmann::json ref = nlohmann::json::parse(in);
  auto loaded = load_model_dir(dir, kernels::cpu_backend());
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  int checked = 0;
  double worst = 0;
  for (const auto& [batch, scoring] : {std::pair{8, Scoring::kFull}, std::pair{1, Scoring::kFull}, std::pair{1, Scoring::kSharedPrefix}}) {
    for (const auto& pair : ref["pairs"]) {
      const auto context = pair["context"].get<std::vector<int32_t>>();
      const auto conts = pair["continuations"].get<std::vector<std::vector<int32_t>>>();
      ScoreOptions o;
      o.batch = batch;
      o.scoring = scoring;
      auto got = score_continuations(*loaded->model, context, conts, o);
      ASSERT_TRUE(got.ok()) << got.status().ToString();
      for (size_t i = 0; i < conts.size(); ++i) {
        EXPECT_NEAR((*got)[i].logprob, pair["logprobs"][i].get<double>(), 1e-4) << scoring_name(scoring) << " batch " << batch << ", context of "
                                                                                << context.size() << " ids, choice " << i;
        EXPECT_EQ((*got)[i].tokens, static_cast<int64_t>(conts[i].size()));
        worst = std::max(worst, std::abs((*got)[i].logprob - pair["logprobs"][i].get<double>()));
        ++checked;
      }
    }
  }
  EXPECT_GE(checked, 30);
  std::printf("stories260K: %d log-probs, max |lmtrain - PyTorch f64| = %.3g\n", checked, worst);
}

// Accuracy arithmetic on hand-made scores where the three normalisations disagree.
TEST(Scoring, AccuracyNormalisations) {
  std::vector<ItemScores> s(3);
  // Item 0: sum picks 0 (-4 > -6); per token picks 1 (-6/6 = -1 > -4/2 = -2); per char picks 0 (-4/8 > -6/10).
  s[0] = {{-4.0, -6.0}, {2, 6}, {8, 10}, 1};
  // Item 1: every rule picks 2 (the gold).
  s[1] = {{-9.0, -8.0, -1.0}, {3, 3, 3}, {9, 9, 9}, 2};
  // Item 2: a tie goes to the lowest index (numpy argmax); gold 1 loses everywhere.
  s[2] = {{-2.0, -2.0}, {1, 1}, {1, 1}, 1};
  TaskResult r = accuracy_of("hand", s);
  EXPECT_EQ(r.items, 3);
  EXPECT_DOUBLE_EQ(r.acc, 1.0 / 3);             // items 1
  EXPECT_DOUBLE_EQ(r.acc_norm_token, 2.0 / 3);  // items 0, 1
  EXPECT_DOUBLE_EQ(r.acc_norm_char, 1.0 / 3);   // item 1
}

// A tiny random model with the GPT-2 vocabulary, for text-level tests.
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
  c.init_std = 0.5f;  // random but peaked logits, so the choices get different scores
  auto m = std::make_unique<model::Transformer>(c, kernels::cpu_backend());
  m->init(7);
  return m;
}

std::vector<McItem> hand_items() {
  std::vector<McItem> items;
  items.push_back({"Question: What do cats chase?\nAnswer:", {" mice", " the moon and all the stars above", " cars"}, 0, {}, 1});
  items.push_back({"The sky is", {" blue.", " green, mostly, on Tuesdays.", " made of cheese."}, 0, {}, 2});
  items.push_back({"", {"A context-free choice", "Another one"}, 1, {}, 3});  // empty context: EOS stands in
  items.push_back({"", {" had a dog.", " had a dog."}, 1, {"Sarah, unlike Maria,", "Maria, unlike Sarah,"}, 4});
  for (int i = 0; i < 9; ++i)
    items.push_back({"Item " + std::to_string(i) + " asks something longer, " + std::string(static_cast<size_t>(i) * 7, 'x'),
                     {" yes", " no", " maybe so"}, i % 3, {}, 5 + i});
  return items;
}

TEST(Scoring, BatchSizeDoesNotChangeResults) {
  const std::string tok_dir = kShared + "/tokenizers/gpt2";
  if (!std::filesystem::exists(tok_dir + "/encoder.json")) GTEST_SKIP() << "GPT-2 tokenizer not found at " << tok_dir;
  auto tok = data::load_tokenizer(tok_dir);
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  auto m = tiny_gpt2_vocab_model();
  const auto items = hand_items();
  ScoreOptions b1, b8;
  b1.batch = 1;
  b8.batch = 8;
  auto r1 = evaluate_multiple_choice(*m, **tok, items, 0, b1, "hand");
  auto r8 = evaluate_multiple_choice(*m, **tok, items, 0, b8, "hand");
  auto r8again = evaluate_multiple_choice(*m, **tok, items, 0, b8, "hand");
  ASSERT_TRUE(r1.ok() && r8.ok() && r8again.ok()) << r1.status().ToString() << r8.status().ToString();
  ASSERT_EQ(r1->items, static_cast<int64_t>(items.size()));
  for (size_t i = 0; i < items.size(); ++i) {
    for (size_t c = 0; c < items[i].choices.size(); ++c) {
      const double a = r1->scores[i].logprob[c], b = r8->scores[i].logprob[c];
      EXPECT_NEAR(a, b, 1e-5 * std::max(1.0, std::abs(a))) << "item " << i << " choice " << c;
      EXPECT_EQ(b, r8again->scores[i].logprob[c]) << "same options must give the same bits";
      EXPECT_EQ(r1->scores[i].tokens[c], r8->scores[i].tokens[c]);
    }
  }
  EXPECT_EQ(r1->acc, r8->acc);
  EXPECT_EQ(r1->acc_norm_token, r8->acc_norm_token);
  EXPECT_EQ(r1->acc_norm_char, r8->acc_norm_char);
  // Winogrande-style partial scoring: the shared continuation is scored under different contexts.
  EXPECT_NE(r8->scores[3].logprob[0], r8->scores[3].logprob[1]);
  EXPECT_EQ(r8->scores[3].chars[0], 10);  // "had a dog.": the separator is not counted, as the harness's len(choice)
  // --limit
  auto r3 = evaluate_multiple_choice(*m, **tok, items, 3, b8, "hand");
  ASSERT_TRUE(r3.ok());
  EXPECT_EQ(r3->items, 3);
  // Item 1's batch-mates differ (items 0-2 against 0-7): the same bits where the GEMMs compute each
  // row alone (AVX-512), float rounding on AVX2, where oneDNN's kernels depend on the row count.
  const double a3 = r3->scores[1].logprob[2], a8 = r8->scores[1].logprob[2];
  if (kernels::cpu_gemm_rows_independent())
    EXPECT_EQ(a3, a8);
  else
    EXPECT_NEAR(a3, a8, 1e-5 * std::max(1.0, std::abs(a8)));
}

TEST(Scoring, EncodingMovesTrailingSpaceAndKeepsBoundary) {
  const std::string tok_dir = kShared + "/tokenizers/gpt2";
  if (!std::filesystem::exists(tok_dir + "/encoder.json")) GTEST_SKIP() << "GPT-2 tokenizer not found at " << tok_dir;
  auto tok = data::load_tokenizer(tok_dir);
  ASSERT_TRUE(tok.ok());
  McItem item{"The answer is ", {"yes", "no"}, 0, {}, 1};
  auto e = encode_item(**tok, item);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  // "The answer is" + " yes": the space goes with the continuation, as a GPT-2 word token.
  EXPECT_EQ((*tok)->decode(e->requests[0].context), "The answer is");
  EXPECT_EQ((*tok)->decode(e->requests[0].continuation), " yes");
  EXPECT_EQ(e->requests[0].continuation.size(), 1u);
  EXPECT_EQ(e->chars[0], 3);  // len("yes"): the harness divides by the choice text's length
}

// A context longer than max_seq is left-truncated: the score equals that of the truncated request.
TEST(Scoring, LeftTruncationAndErrors) {
  auto m = tiny_gpt2_vocab_model();
  std::vector<int32_t> ctx;
  for (int i = 0; i < 60; ++i) ctx.push_back(100 + i);
  const std::vector<int32_t> cont = {7, 8, 9};
  ScoreOptions o;
  o.max_seq = 32;
  auto cut = score_requests(*m, {{ctx, cont}}, o);
  ASSERT_TRUE(cut.ok()) << cut.status().ToString();
  EXPECT_EQ((*cut)[0].context_dropped, 60 + 3 - 33);
  const std::vector<int32_t> tail(ctx.end() - 30, ctx.end());
  auto same = score_requests(*m, {{tail, cont}}, o);
  ASSERT_TRUE(same.ok());
  EXPECT_NEAR((*cut)[0].logprob, (*same)[0].logprob, 1e-6);
  EXPECT_EQ((*same)[0].context_dropped, 0);

  std::vector<int32_t> long_cont(40, 5);
  auto too_long = score_requests(*m, {{ctx, cont}, {ctx, long_cont}}, o);
  ASSERT_FALSE(too_long.ok());
  EXPECT_NE(too_long.status().message().find("request 1"), std::string::npos) << too_long.status().message();
  auto empty = score_requests(*m, {{{}, cont}}, o);
  ASSERT_FALSE(empty.ok());
  auto bad_id = score_requests(*m, {{{1}, {60000}}}, o);
  ASSERT_FALSE(bad_id.ok());
  EXPECT_NE(bad_id.status().message().find("60000"), std::string::npos);
}

// Shared-prefix vs full on one choice's log-prob: 1e-4 absolute where the GEMMs compute each row
// alone (AVX-512); on AVX2, where the two paths' GEMMs of other row counts round differently, 1e-5
// relative, the batching test's bound (this random model's log-probs reach ~-100 nats).
double shared_prefix_tolerance(double logprob) {
  return kernels::cpu_gemm_rows_independent() ? 1e-4 : 1e-5 * std::max(1.0, std::abs(logprob));
}

// Shared-prefix vs full on items whose choices do not share the whole context (Winogrande-style
// partial scoring, an empty context): per choice within shared_prefix_tolerance, the same
// accuracies. And the reference pairs through score_continuations (one group) agree with the full
// path too.
TEST(Scoring, SharedPrefixEqualsFullOnHandItems) {
  const std::string tok_dir = kShared + "/tokenizers/gpt2";
  if (!std::filesystem::exists(tok_dir + "/encoder.json")) GTEST_SKIP() << "GPT-2 tokenizer not found at " << tok_dir;
  auto tok = data::load_tokenizer(tok_dir);
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  auto m = tiny_gpt2_vocab_model();
  const auto items = hand_items();
  ScoreOptions full, shared;
  full.scoring = Scoring::kFull;
  shared.scoring = Scoring::kSharedPrefix;
  auto a = evaluate_multiple_choice(*m, **tok, items, 0, full, "hand");
  auto b = evaluate_multiple_choice(*m, **tok, items, 0, shared, "hand");
  ASSERT_TRUE(a.ok() && b.ok()) << a.status().ToString() << b.status().ToString();
  for (size_t i = 0; i < items.size(); ++i)
    for (size_t c = 0; c < items[i].choices.size(); ++c) {
      EXPECT_NEAR(a->scores[i].logprob[c], b->scores[i].logprob[c], shared_prefix_tolerance(a->scores[i].logprob[c]))
          << "item " << i << " choice " << c;
      EXPECT_EQ(a->scores[i].tokens[c], b->scores[i].tokens[c]);
    }
  EXPECT_EQ(a->acc, b->acc);
  EXPECT_EQ(a->acc_norm_token, b->acc_norm_token);
  EXPECT_EQ(a->acc_norm_char, b->acc_norm_char);
  EXPECT_NE(b->scores[3].logprob[0], b->scores[3].logprob[1]);  // different contexts, same choice text

  // bf16 is the full path's alone: a clear Unimplemented, not a silent fallback.
  ScoreOptions bf16 = shared;
  bf16.compute = DType::kBF16;
  auto refused = evaluate_multiple_choice(*m, **tok, items, 0, bf16, "hand");
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kUnimplemented);
  EXPECT_NE(refused.status().ToString().find("--scoring full"), std::string::npos) << refused.status().ToString();
  EXPECT_FALSE(parse_scoring("fast").ok());
  EXPECT_EQ(*parse_scoring(scoring_name(Scoring::kFull)), Scoring::kFull);
  EXPECT_EQ(*parse_scoring(scoring_name(Scoring::kSharedPrefix)), Scoring::kSharedPrefix);
}

// A group whose rows need left-truncation goes through the full path unchanged (same bits, same
// context_dropped), while the other groups share their prefix; errors name the request as before.
TEST(Scoring, SharedPrefixFallsBackForTruncatedRows) {
  auto m = tiny_gpt2_vocab_model();
  std::vector<int32_t> long_ctx, short_ctx = {11, 12, 13, 14};
  for (int i = 0; i < 60; ++i) long_ctx.push_back(100 + i);
  const std::vector<std::vector<int32_t>> conts = {{7, 8, 9}, {7, 30}, {40}};
  ScoreOptions full, shared;
  full.max_seq = shared.max_seq = 32;
  full.scoring = Scoring::kFull;
  auto ref_long = score_continuations(*m, long_ctx, conts, full);
  auto ref_short = score_continuations(*m, short_ctx, conts, full);
  auto got_long = score_continuations(*m, long_ctx, conts, shared);
  auto got_short = score_continuations(*m, short_ctx, conts, shared);
  ASSERT_TRUE(ref_long.ok() && ref_short.ok() && got_long.ok() && got_short.ok()) << got_long.status().ToString();
  for (size_t c = 0; c < conts.size(); ++c) {
    EXPECT_EQ((*got_long)[c].logprob, (*ref_long)[c].logprob) << "truncated rows: the full path itself";
    EXPECT_EQ((*got_long)[c].context_dropped, (*ref_long)[c].context_dropped);
    EXPECT_GT((*got_long)[c].context_dropped, 0);
    EXPECT_NEAR((*got_short)[c].logprob, (*ref_short)[c].logprob, shared_prefix_tolerance((*ref_short)[c].logprob))
        << "choice " << c;
    EXPECT_EQ((*got_short)[c].context_dropped, 0);
  }
  std::vector<std::vector<int32_t>> bad = conts;
  bad.push_back(std::vector<int32_t>(40, 5));
  auto too_long = score_continuations(*m, short_ctx, bad, shared);
  ASSERT_FALSE(too_long.ok());
  EXPECT_NE(too_long.status().message().find("request 3"), std::string::npos) << too_long.status().message();
}

// The periodic evaluation restores the caller's plan (B, T, compute) so training continues.
TEST(Scoring, SuiteRestoresTheTrainingPlan) {
  const std::string tok_dir = kShared + "/tokenizers/gpt2", piqa = kShared + "/eval/piqa/valid.jsonl";
  if (!std::filesystem::exists(tok_dir + "/encoder.json") || !std::filesystem::exists(piqa)) GTEST_SKIP() << "shared data not found";
  auto tok = data::load_tokenizer(tok_dir);
  ASSERT_TRUE(tok.ok());
  auto suite = TaskSuite::load({{"piqa", piqa, 5}}, **tok);
  ASSERT_TRUE(suite.ok()) << suite.status().ToString();
  auto m = tiny_gpt2_vocab_model();
  model::RunOptions train;
  train.compute = DType::kBF16;
  m->prepare(3, 24, train);
  auto results = suite->run(*m);
  ASSERT_TRUE(results.ok()) << results.status().ToString();
  EXPECT_EQ(m->plan().B, 3);
  EXPECT_EQ(m->plan().T, 24);
  EXPECT_EQ(m->plan().options.compute, DType::kBF16);
  ASSERT_EQ(results->size(), 1u);
  EXPECT_EQ((*results)[0].items, 5);
  const nlohmann::json rec = TaskSuite::metrics_record(*results, 100, 12345);
  EXPECT_EQ(rec["type"], "eval");  // a metrics.jsonl record (docs/FORMATS.md)
  EXPECT_EQ(rec["step"], 100);
  EXPECT_TRUE(rec.contains("eval_piqa_acc_norm_char"));
  EXPECT_EQ(rec["eval_piqa_items"], 5);
}

}  // namespace
}  // namespace lmt::eval
