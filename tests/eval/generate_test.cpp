// Generation: KV-cache decoding against the full-sequence forward, greedy decoding of the real
// stories260K model against its float64 reference, sampling filters, UTF-8 streaming, and the
// `lmtrain generate` CLI.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../model/model_test_util.h"
#include "lmt/eval/decode.h"
#include "lmt/eval/generate.h"
#include "lmt/eval/model_dir.h"
#include "lmt/kernels/cpu/cpu_backend.h"
#include "lmt/kernels/registry.h"

#include "common/lmtrain_cli.h"

namespace lmt::eval {
namespace {

const std::string kStories = std::string(LMT_SHARED_DATA) + "/models/stories260K";

// ---- KV cache == full sequence ---------------------------------------------------------------------

// Logits of every position from the training forward path (the oracle).
std::vector<float> full_logits(model::Transformer& m, const std::vector<int32_t>& tokens) {
  const int64_t T = static_cast<int64_t>(tokens.size()), V = m.config().vocab_size;
  model::RunOptions o;
  o.compute = DType::kF32;
  m.prepare(1, T, o);
  Tensor out({T, V}, DType::kF32);
  m.logits(tokens.data(), nullptr, out);
  return std::vector<float>(out.as<float>(), out.as<float>() + T * V);
}

double max_abs_diff(const float* a, const float* b, int64_t n) {
  double d = 0;
  for (int64_t i = 0; i < n; ++i) d = std::max(d, std::abs(static_cast<double>(a[i]) - b[i]));
  return d;
}

// One decoder case: a model variant on a backend, with the largest difference allowed between the
// cached logits and the full forward's (the two differ only in the attention kernel: attention_decode
// over the cache vs attention_forward over the row).
struct DecodeCase {
  std::string name;
  model::ModelConfig config;
  const char* backend;
  double tolerance;
};
void PrintTo(const DecodeCase& c, std::ostream* os) { *os << c.name; }

// The tiny variants on cpu (GQA, MQA, QK-norm, partial RoPE, NoPE, learned positions).
std::vector<DecodeCase> tiny_cpu_cases() {
  std::vector<DecodeCase> cases;
  for (const auto& v : model::testing::tiny_variants()) cases.push_back({v.name, v.config, "cpu", 1e-4});
  return cases;
}

// The tiny variants on the ref oracle (tighter: its kernels accumulate in f64); and, on both backends,
// the two families the decoder and the trainer share blocks for at a width where the cpu kernels
// take their vector paths (HD = 32, NH·HD != C where the family allows, 40 tokens > 32-token chunks): QK-norm + SwiGLU +
// RoPE, and LayerNorm + learned positions + GELU MLP.
std::vector<DecodeCase> ref_and_wide_cases() {
  auto widen = [](model::ModelConfig c, const char* name) {
    c.name = name;
    c.vocab_size = 301;
    c.max_seq_len = 40;
    c.d_model = 96;
    c.n_heads = 4;
    c.head_dim = 32;
    c.ffn_hidden = 160;
    return c;
  };
  std::vector<DecodeCase> cases;
  for (const auto& v : model::testing::tiny_variants()) {
    cases.push_back({v.name + "_ref", v.config, "ref", 1e-5});
    if (v.name == "qwen3_qknorm_untied" || v.name == "gpt2_style") {
      model::ModelConfig c = widen(v.config, v.config.qk_norm ? "wide_qknorm_swiglu_rope" : "wide_layernorm_learned_gelu");
      c.n_kv_heads = c.qk_norm ? 2 : c.n_heads;
      if (!c.qk_norm) c.d_model = c.n_heads * c.head_dim;  // the gpt2 family has NH·HD = C
      cases.push_back({c.name + "_cpu", c, "cpu", 1e-4});
      cases.push_back({c.name + "_ref", c, "ref", 1e-5});
    }
  }
  return cases;
}

kernels::Backend& backend_named(const std::string& name) {
  return name == "ref" ? kernels::ref_backend() : kernels::cpu_backend();
}

class DecodeVsFull : public ::testing::TestWithParam<DecodeCase> {};

// Token by token, prompt-then-tokens, and a prompt longer than the prefill chunk must all give the
// full-sequence logits (Transformer::logits, the training forward) at every position.
TEST_P(DecodeVsFull, EveryPositionMatchesTransformerLogits) {
  const model::ModelConfig& c = GetParam().config;
  const double tolerance = GetParam().tolerance;
  model::Transformer m(c, backend_named(GetParam().backend));
  m.init(7);
  const int64_t T = c.max_seq_len, V = c.vocab_size;
  Rng rng(3);
  std::vector<int32_t> tokens(T);
  for (auto& t : tokens) t = static_cast<int32_t>(rng.below(V));
  const std::vector<float> want = full_logits(m, tokens);

  struct Mode { const char* name; int64_t prompt, chunk; };
  for (Mode mode : {Mode{"one_by_one", 1, 64}, Mode{"prompt5_then_steps", 5, 64}, Mode{"prompt11_chunk3", 11, 3},
                    Mode{"whole_prompt_chunk32", T, 32}}) {
    SCOPED_TRACE(mode.name);
    Decoder d(m, T, mode.chunk);
    std::vector<float> got(T * V);
    d.forward(std::span<const int32_t>(tokens.data(), mode.prompt), got.data());
    for (int64_t t = mode.prompt; t < T; ++t) {
      std::span<const float> last = d.forward(std::span<const int32_t>(&tokens[t], 1));
      std::copy(last.begin(), last.end(), got.begin() + t * V);
    }
    EXPECT_EQ(d.length(), T);
    for (int64_t t = 0; t < T; ++t)
      ASSERT_LE(max_abs_diff(&got[t * V], &want[t * V], V), tolerance) << "position " << t;
    // reset() starts over: the first token's logits again.
    d.reset();
    std::span<const float> first = d.forward(std::span<const int32_t>(tokens.data(), 1));
    EXPECT_LE(max_abs_diff(first.data(), want.data(), V), tolerance);
  }
}

INSTANTIATE_TEST_SUITE_P(TinyVariants, DecodeVsFull, ::testing::ValuesIn(tiny_cpu_cases()),
                         [](const auto& info) { return info.param.name; });
INSTANTIATE_TEST_SUITE_P(RefAndWide, DecodeVsFull, ::testing::ValuesIn(ref_and_wide_cases()),
                         [](const auto& info) { return info.param.name; });

// ---- stories260K greedy reference --------------------------------------------------------------------

nlohmann::json stories_reference() {
  std::ifstream in(kStories + "/reference.json");
  return nlohmann::json::parse(in);
}

TEST(Stories260K, GreedyFromBosReproducesReference) {
  if (!std::filesystem::exists(kStories + "/hf/model.safetensors"))
    GTEST_SKIP() << "shared test data missing: " << kStories << " (see ../shared/data/README.md)";
  auto loaded = load_model_dir(kStories + "/hf", kernels::cpu_backend());
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  const std::vector<int32_t> want = stories_reference()["greedy_from_bos"].get<std::vector<int32_t>>();
  ASSERT_EQ(want.size(), 256u);
  ASSERT_EQ(want[0], 1);  // BOS, the prompt
  Decoder d(*loaded->model, 256);
  GenerateOptions o;
  o.max_tokens = 255;
  o.sampling.temperature = 0.0f;
  std::vector<int32_t> streamed;
  auto r = generate(d, std::vector<int32_t>{1}, o, [&](int32_t id) { streamed.push_back(id); });
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->stop_reason, "max_tokens");
  EXPECT_EQ(r->tokens, streamed);
  std::vector<int32_t> got = {1};
  got.insert(got.end(), r->tokens.begin(), r->tokens.end());
  EXPECT_EQ(got, want);
}

// The cached path on real weights agrees with the float64 reference logits of the 32-token input.
TEST(Stories260K, PrefillLogitsMatchFloat64Reference) {
  if (!std::filesystem::exists(kStories + "/hf/model.safetensors"))
    GTEST_SKIP() << "shared test data missing: " << kStories;
  auto loaded = load_model_dir(kStories + "/hf", kernels::cpu_backend());
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  const nlohmann::json ref = stories_reference();
  const auto ids = ref["input_ids"].get<std::vector<int32_t>>();
  const auto logits = ref["logits"].get<std::vector<std::vector<float>>>();
  const int64_t T = static_cast<int64_t>(ids.size()), V = 512;
  Decoder d(*loaded->model, T, /*prefill_chunk=*/8);
  std::vector<float> got(T * V);
  d.forward(ids, got.data());
  for (int64_t t = 0; t < T; ++t) ASSERT_LE(max_abs_diff(&got[t * V], logits[t].data(), V), 1e-3) << "position " << t;
}

// What shared-prefix scoring relies on: forward_segments runs independent continuations of a cached
// prefix in one chunk, each seeing the prefix and itself only; the LM head only at the asked rows.
// A garbage segment first, then the real continuation: its logits must equal the float64
// reference, and the prefix must still be the cache's content afterwards.
TEST(Stories260K, ForwardSegmentsMatchTheReference) {
  if (!std::filesystem::exists(kStories + "/hf/model.safetensors"))
    GTEST_SKIP() << "shared test data missing: " << kStories;
  auto loaded = load_model_dir(kStories + "/hf", kernels::cpu_backend());
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  const nlohmann::json ref = stories_reference();
  const auto ids = ref["input_ids"].get<std::vector<int32_t>>();
  const auto logits = ref["logits"].get<std::vector<std::vector<float>>>();
  const int64_t T = static_cast<int64_t>(ids.size()), V = 512, P = 10, garbage = 7, from = 13;
  Decoder d(*loaded->model, T + garbage, /*prefill_chunk=*/T + garbage);
  d.forward(std::span<const int32_t>(ids.data(), P));
  std::vector<int32_t> tokens(garbage, 3);
  tokens.insert(tokens.end(), ids.begin() + P, ids.end());
  const std::vector<int64_t> sizes = {garbage, T - P}, starts = {garbage - 2, from};
  std::vector<float> got((2 + T - P - from) * V);
  d.forward_segments(tokens, sizes, starts, got.data());
  EXPECT_EQ(d.length(), P);
  for (int64_t r = 0; r < T - P - from; ++r)
    ASSERT_LE(max_abs_diff(&got[(2 + r) * V], logits[P + from + r].data(), V), 1e-3) << "position " << P + from + r;
  // The prefix is intact: running the real continuation the ordinary way gives the same logits.
  std::vector<float> again((T - P) * V);
  d.forward(std::span<const int32_t>(ids.data() + P, T - P), again.data());
  // Other row counts: on AVX2 other GEMM kernels too, so ~10 ulps of logits up to ~22 (one ulp 1.9e-6).
  EXPECT_LE(max_abs_diff(&again[from * V], &got[2 * V], (T - P - from) * V),
            kernels::cpu_gemm_rows_independent() ? 1e-5 : 2e-5);
}

// ---- sampling ---------------------------------------------------------------------------------------

TEST(Sampling, GreedyIsArgmaxWithLowestIdOnTies) {
  const std::vector<float> l = {0.5f, 2.0f, -1.0f, 2.0f};
  EXPECT_EQ(argmax(l), 1);
  SamplingOptions o;
  o.temperature = 0;
  EXPECT_EQ(sampling_probs(l, o), (std::vector<double>{0, 1, 0, 0}));
  EXPECT_EQ(Sampler(o).sample(l), 1);
}

TEST(Sampling, DeterministicForASeedAndDifferentAcrossSeeds) {
  std::vector<float> l(50);
  for (size_t i = 0; i < l.size(); ++i) l[i] = static_cast<float>(std::sin(i * 1.7));
  auto draw = [&](uint64_t seed) {
    SamplingOptions o;
    o.seed = seed;
    Sampler s(o);
    std::vector<int32_t> ids;
    for (int i = 0; i < 64; ++i) ids.push_back(s.sample(l));
    return ids;
  };
  EXPECT_EQ(draw(5), draw(5));
  EXPECT_NE(draw(5), draw(6));
}

TEST(Sampling, TopKOneEqualsGreedy) {
  std::vector<float> l(100);
  Rng rng(1);
  for (auto& x : l) x = static_cast<float>(rng.normal());
  SamplingOptions o;
  o.top_k = 1;
  o.temperature = 1.5f;
  Sampler s(o);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(s.sample(l), argmax(l));
}

TEST(Sampling, TopKKeepsTheKMostProbable) {
  const std::vector<float> l = {1.0f, 3.0f, 2.0f, 0.0f};
  SamplingOptions o;
  o.top_k = 2;
  const std::vector<double> p = sampling_probs(l, o);
  EXPECT_EQ(p[0], 0.0);
  EXPECT_EQ(p[3], 0.0);
  EXPECT_NEAR(p[1], std::exp(1.0) / (std::exp(1.0) + 1.0), 1e-12);
  EXPECT_NEAR(p[1] + p[2], 1.0, 1e-12);
}

TEST(Sampling, TopPKeepsTheSmallestSetWithMassAtLeastP) {
  // Probabilities 0.5, 0.25, 0.15, 0.1 (logits are their logs).
  const std::vector<float> l = {std::log(0.25f), std::log(0.1f), std::log(0.5f), std::log(0.15f)};
  auto kept = [&](float top_p) {
    SamplingOptions o;
    o.top_p = top_p;
    std::vector<int> ids;
    const std::vector<double> p = sampling_probs(l, o);
    for (int i = 0; i < 4; ++i)
      if (p[i] > 0) ids.push_back(i);
    return ids;
  };
  EXPECT_EQ(kept(0.5f), (std::vector<int>{2}));       // 0.5 alone reaches 0.5
  EXPECT_EQ(kept(0.6f), (std::vector<int>{0, 2}));    // 0.75
  EXPECT_EQ(kept(0.75f), (std::vector<int>{0, 2}));   // exactly 0.75 (within f32 logs)
  EXPECT_EQ(kept(0.8f), (std::vector<int>{0, 2, 3})); // 0.9
  EXPECT_EQ(kept(1.0f), (std::vector<int>{0, 1, 2, 3}));
  SamplingOptions o;
  o.top_p = 0.6f;
  const std::vector<double> p = sampling_probs(l, o);
  EXPECT_NEAR(p[2], 0.5 / 0.75, 1e-6);  // renormalised over the kept set
}

TEST(Sampling, TemperatureScalesLogits) {
  const std::vector<float> l = {0.0f, 1.0f};
  for (float t : {0.5f, 1.0f, 2.0f}) {
    SamplingOptions o;
    o.temperature = t;
    const std::vector<double> p = sampling_probs(l, o);
    EXPECT_NEAR(p[1] / p[0], std::exp(1.0 / t), 1e-9) << "temperature " << t;
  }
  // Empirical frequencies follow the distribution.
  SamplingOptions o;
  o.temperature = 2.0f;
  Sampler s(o);
  int ones = 0;
  for (int i = 0; i < 20000; ++i) ones += s.sample(l);
  EXPECT_NEAR(ones / 20000.0, std::exp(0.5) / (1 + std::exp(0.5)), 0.015);
}

TEST(Sampling, InvalidOptionsNameTheFlag) {
  SamplingOptions o;
  o.top_p = 0.0f;
  Status s = validate(o);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.ToString().find("--top-p"), std::string::npos);
  o = SamplingOptions{};
  o.temperature = -1.0f;
  EXPECT_NE(validate(o).ToString().find("--temperature"), std::string::npos);
}

TEST(Generate, StopsAtEosAndAtTheContext) {
  model::ModelConfig c = model::testing::tiny_variants()[1].config;
  model::Transformer m(c, kernels::cpu_backend());
  m.init(1);
  Decoder d(m, c.max_seq_len);
  GenerateOptions o;
  o.sampling.temperature = 0.0f;
  o.max_tokens = 100;
  auto r = generate(d, std::vector<int32_t>{1, 2, 3}, o, nullptr);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->stop_reason, "context");
  EXPECT_EQ(static_cast<int64_t>(r->tokens.size()), c.max_seq_len - 3 + 1);  // the last one needs no cache slot
  o.eos_id = r->tokens[2];
  auto e = generate(d, std::vector<int32_t>{1, 2, 3}, o, nullptr);
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->stop_reason, "eos");
  EXPECT_EQ(e->tokens.back(), *o.eos_id);
  EXPECT_LE(e->tokens.size(), 3u);
  EXPECT_FALSE(generate(d, std::vector<int32_t>{}, o, nullptr).ok());
  EXPECT_FALSE(generate(d, std::vector<int32_t>{999}, o, nullptr).ok());
}

// ---- UTF-8 streaming --------------------------------------------------------------------------------

TEST(Utf8Stream, HoldsBackSplitSequences) {
  Utf8Stream s;
  const std::string euro = "\xE2\x82\xAC", smile = "\xF0\x9F\x98\x80";
  EXPECT_EQ(s.push("a" + euro.substr(0, 1)), "a");
  EXPECT_EQ(s.push(euro.substr(1, 1)), "");
  EXPECT_EQ(s.push(euro.substr(2) + smile.substr(0, 2)), euro);
  EXPECT_EQ(s.push(smile.substr(2) + "b"), smile + "b");
  EXPECT_EQ(s.push("\x80x"), "\x80x");  // a stray continuation byte passes through
  EXPECT_EQ(s.push("\xC3"), "");
  EXPECT_EQ(s.flush(), "\xC3");         // an unfinished tail comes out at the end
}

// ---- CLI ----------------------------------------------------------------------------------------

using CliRun = lmt::test::CliResult;

CliRun run_cli(const std::string& args, bool with_stderr = false) { return lmt::test::run_lmtrain(args, with_stderr); }

TEST(GenerateCli, PromptIdsGreedyPrintsReferenceIds) {
  if (!std::filesystem::exists(kStories + "/hf/model.safetensors")) GTEST_SKIP() << "shared test data missing";
  CliRun r = run_cli("generate --checkpoint " + kStories + "/hf --prompt-ids 1 --max-tokens 255 --temperature 0");
  ASSERT_EQ(r.code, 0) << r.out;
  std::istringstream in(r.out);
  std::vector<int32_t> got;
  for (int32_t id; in >> id;) got.push_back(id);
  EXPECT_EQ(got, stories_reference()["greedy_from_bos"].get<std::vector<int32_t>>());
}

TEST(GenerateCli, JsonReportsIdsAndSpeedsAndSeedIsReproducible) {
  if (!std::filesystem::exists(kStories + "/hf/model.safetensors")) GTEST_SKIP() << "shared test data missing";
  const std::string args = "generate --checkpoint " + kStories +
                           "/hf --prompt-ids 1,403,407 --max-tokens 20 --temperature 0.9 --top-k 40 --top-p 0.95 "
                           "--seed 11 --json";
  CliRun a = run_cli(args), b = run_cli(args);
  ASSERT_EQ(a.code, 0) << a.out;
  auto ja = nlohmann::json::parse(a.out), jb = nlohmann::json::parse(b.out);
  EXPECT_EQ(ja["ids"], jb["ids"]);
  EXPECT_EQ(ja["ids"].size(), 20u);
  EXPECT_EQ(ja["prompt_ids"], (std::vector<int>{1, 403, 407}));
  EXPECT_GT(ja["decode_tokens_per_s"].get<double>(), 0.0);
}

// --sequences 3 with bf16 decode weights: row r is exactly the single run with --seed 11 + r.
TEST(GenerateCli, BatchRowsEqualSingleRunsWithTheirSeeds) {
  if (!std::filesystem::exists(kStories + "/hf/model.safetensors")) GTEST_SKIP() << "shared test data missing";
  const std::string base = "generate --checkpoint " + kStories +
                           "/hf --prompt-ids 1,403,407 --max-tokens 12 --temperature 0.9 --decode-dtype bf16 --json";
  CliRun batch = run_cli(base + " --seed 11 --sequences 3");
  ASSERT_EQ(batch.code, 0) << batch.out;
  auto jb = nlohmann::json::parse(batch.out);
  ASSERT_EQ(jb["rows"].size(), 3u);
  EXPECT_EQ(jb["sequences"], 3);
  EXPECT_EQ(jb["decode_dtype"], "bf16");
  EXPECT_GT(jb["decode_tokens_per_s"].get<double>(), 0.0);
  for (int r = 0; r < 3; ++r) {
    CliRun one = run_cli(base + " --seed " + std::to_string(11 + r));
    ASSERT_EQ(one.code, 0) << one.out;
    EXPECT_EQ(jb["rows"][r]["ids"], nlohmann::json::parse(one.out)["ids"]) << "row " << r;
  }
  CliRun bad = run_cli("generate --preset tiny --prompt-ids 1 --decode-dtype fp16", true);
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.out.find("--decode-dtype 'fp16'"), std::string::npos) << bad.out;
  CliRun zero = run_cli("generate --preset tiny --prompt-ids 1 --sequences 0", true);
  EXPECT_EQ(zero.code, 1);
  EXPECT_NE(zero.out.find("--sequences"), std::string::npos) << zero.out;
}

TEST(GenerateCli, TextPromptWithoutTokenizerAsksForOne) {
  if (!std::filesystem::exists(kStories + "/hf/model.safetensors")) GTEST_SKIP() << "shared test data missing";
  CliRun r = run_cli("generate --checkpoint " + kStories + "/hf --prompt hello", true);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find("--tokenizer"), std::string::npos) << r.out;
}

TEST(GenerateCli, BadOptionsAndMissingDirectoryFailWithHints) {
  CliRun bad = run_cli("generate --preset tiny --prompt-ids 1 --top-p 1.5", true);
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.out.find("--top-p"), std::string::npos) << bad.out;
  CliRun missing = run_cli("generate --checkpoint /nonexistent/dir --prompt-ids 1", true);
  EXPECT_EQ(missing.code, 1);
  EXPECT_NE(missing.out.find("hint:"), std::string::npos) << missing.out;
  CliRun neither = run_cli("generate --prompt-ids 1", true);
  EXPECT_NE(neither.code, 0);
}

}  // namespace
}  // namespace lmt::eval
