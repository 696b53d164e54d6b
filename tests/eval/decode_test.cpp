// The decoder's batched step and its bf16 weights:
//  - Decoder::step over R rows (each at its own length, one sitting a step out) gives, per row, the
//    logits a one-row decoder gives for the same tokens: f32 weights within 1e-4 on cpu (the GEMMs
//    run at M = R instead of M = 1, another summation order) and 1e-6 on ref (f64 accumulation);
//    bf16 weights bit for bit (the cpu weight-only-bf16 kernel sums each row in the same order at
//    any M, and attention, norms and the rest are per row).
//  - bf16 decode weights are exactly "the f32 model with its GEMM weights rounded to bf16": on a
//    model whose master is already bf16-representable the bf16 and f32 decoders agree within the
//    GEMM summation order (1e-4 cpu, 1e-6 ref).
//  - On the real stories260K model, bf16 against f32 weights: the logits of a 32-token input stay
//    within 1% of the largest |logit| of the f32 ones (bf16 keeps 8 bits of mantissa: a relative
//    rounding of at most 2^-9 per weight, compounded over 5 layers and the LM head), and the greedy
//    continuation of 32 tokens is the same.
//  - generate_batch: every row equals generate() on its own with its seed (bf16 weights: exact).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "../model/model_test_util.h"
#include "lmt/base/bf16.h"
#include "lmt/eval/decode.h"
#include "lmt/eval/generate.h"
#include "lmt/eval/model_dir.h"
#include "lmt/kernels/registry.h"

namespace lmt::eval {
namespace {

const std::string kStories = std::string(LMT_SHARED_DATA) + "/models/stories260K";

double max_abs_diff(const float* a, const float* b, int64_t n) {
  double d = 0;
  for (int64_t i = 0; i < n; ++i) d = std::max(d, std::abs(static_cast<double>(a[i]) - b[i]));
  return d;
}

kernels::Backend& backend_named(const std::string& name) {
  return name == "ref" ? kernels::ref_backend() : kernels::cpu_backend();
}

struct BatchCase {
  std::string name;
  model::ModelConfig config;
  std::string backend;
  DType weights;
  double tolerance;
};
void PrintTo(const BatchCase& c, std::ostream* os) { *os << c.name; }

std::vector<BatchCase> batch_cases() {
  std::vector<BatchCase> out;
  for (const auto& v : model::testing::tiny_variants()) {
    out.push_back({v.name + "_cpu_f32", v.config, "cpu", DType::kF32, 1e-4});
    out.push_back({v.name + "_cpu_bf16", v.config, "cpu", DType::kBF16, 0.0});
    out.push_back({v.name + "_ref_f32", v.config, "ref", DType::kF32, 1e-6});
  }
  return out;
}

class BatchStep : public ::testing::TestWithParam<BatchCase> {};

// Three rows with prompts of 1, 4 and 7 tokens, then 6 steps (row 1 sits out step 2); every row's
// logits against a one-row decoder fed the same tokens.
TEST_P(BatchStep, EveryRowMatchesTheOneRowDecoder) {
  const BatchCase& bc = GetParam();
  model::Transformer m(bc.config, backend_named(bc.backend));
  m.init(11);
  const int64_t V = bc.config.vocab_size, R = 3, steps = 6, S = 7 + steps;
  ASSERT_LE(S, bc.config.max_seq_len);
  Rng rng(5);
  auto id = [&] { return static_cast<int32_t>(rng.below(static_cast<uint64_t>(V))); };
  Decoder batch(m, S, /*prefill_chunk=*/64, bc.weights, R);
  std::vector<std::unique_ptr<Decoder>> single;
  std::vector<float> logits(R * V);
  for (int64_t r = 0; r < R; ++r) {
    single.push_back(std::make_unique<Decoder>(m, S, 64, bc.weights));
    std::vector<int32_t> prompt(1 + 3 * r);
    for (auto& t : prompt) t = id();
    const std::span<const float> a = batch.forward(prompt, nullptr, r);
    const std::span<const float> b = single[r]->forward(prompt);
    ASSERT_LE(max_abs_diff(a.data(), b.data(), V), bc.tolerance) << "prefill of row " << r;
  }
  for (int64_t s = 0; s < steps; ++s) {
    std::vector<int32_t> next(R);
    for (auto& t : next) t = id();
    if (s == 2) next[1] = -1;
    batch.step(next, logits.data());
    for (int64_t r = 0; r < R; ++r) {
      if (next[r] < 0) {
        EXPECT_EQ(batch.length(r), single[r]->length()) << "a row that sat out must not advance";
        continue;
      }
      const std::span<const float> want = single[r]->forward(std::span<const int32_t>(&next[r], 1));
      EXPECT_EQ(batch.length(r), single[r]->length());
      ASSERT_LE(max_abs_diff(&logits[r * V], want.data(), V), bc.tolerance) << "step " << s << " row " << r;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(TinyVariants, BatchStep, ::testing::ValuesIn(batch_cases()),
                         [](const auto& info) { return info.param.name; });

// forward_segments over several rows (batched shared-prefix scoring): prefixes of 3 rows in one
// pass (advance), then 2 continuations of each row's prefix in one pass, against one-row decoders
// that run prefix then continuation the ordinary way. cpu within 1e-4 (GEMMs at another M).
TEST(SegmentsOverRows, EqualOneRowDecodersPerContinuation) {
  for (const auto& v : model::testing::tiny_variants()) {
    SCOPED_TRACE(v.name);
    model::Transformer m(v.config, kernels::cpu_backend());
    m.init(4);
    const int64_t V = v.config.vocab_size, R = 3;
    Rng rng(2);
    auto ids = [&](int64_t n) {
      std::vector<int32_t> t(n);
      for (auto& x : t) x = static_cast<int32_t>(rng.below(static_cast<uint64_t>(V)));
      return t;
    };
    const std::vector<int64_t> P = {5, 1, 8};
    std::vector<std::vector<int32_t>> prefix, cont[2];
    Decoder d(m, 16, 64, DType::kF32, R);
    std::vector<int32_t> tokens;
    std::vector<Decoder::Segment> segs;
    for (int64_t r = 0; r < R; ++r) {
      prefix.push_back(ids(P[r]));
      tokens.insert(tokens.end(), prefix[r].begin(), prefix[r].end());
      segs.push_back({r, 0, P[r], P[r] - 1});
    }
    std::vector<float> last(R * V);
    d.forward_segments(tokens, segs, last.data(), /*advance=*/true);
    tokens.clear();
    segs.clear();
    for (int64_t r = 0; r < R; ++r) {
      EXPECT_EQ(d.length(r), P[r]);
      for (int c = 0; c < 2; ++c) {
        cont[c].push_back(ids(2 + c + r));
        tokens.insert(tokens.end(), cont[c][r].begin(), cont[c][r].end());
        segs.push_back({r, P[r], static_cast<int64_t>(cont[c][r].size()), c});  // from: skip c rows of logits
      }
    }
    int64_t rows_out = 0;
    for (const auto& sg : segs) rows_out += sg.size - sg.from;
    std::vector<float> got(rows_out * V);
    d.forward_segments(tokens, segs, got.data(), /*advance=*/false);
    const float* g = got.data();
    for (int64_t r = 0; r < R; ++r) {
      for (int c = 0; c < 2; ++c) {
        Decoder one(m, 16, 64);
        const std::span<const float> pl = one.forward(prefix[r]);
        EXPECT_LE(max_abs_diff(&last[r * V], pl.data(), V), 1e-4) << "prefix of row " << r;
        const int64_t n = static_cast<int64_t>(cont[c][r].size());
        std::vector<float> want(n * V);
        one.forward(cont[c][r], want.data());
        for (int64_t i = c; i < n; ++i, g += V)
          ASSERT_LE(max_abs_diff(g, &want[i * V], V), 1e-4) << "row " << r << " continuation " << c << " token " << i;
      }
      EXPECT_EQ(d.length(r), P[r]) << "continuations are not kept";
    }
  }
}

// bf16 decode weights == the f32 decoder on a master rounded to bf16 first.
TEST(Bf16DecodeWeights, EqualTheF32ModelWithBf16RoundedWeights) {
  for (const char* be : {"cpu", "ref"})
    for (const auto& v : model::testing::tiny_variants()) {
      SCOPED_TRACE(std::string(be) + " " + v.name);
      model::Transformer m(v.config, backend_named(be));
      m.init(3);
      float* p = m.params().as<float>();
      for (int64_t i = 0; i < m.params().numel(); ++i) p[i] = static_cast<float>(bf16(p[i]));
      const int64_t T = v.config.max_seq_len, V = v.config.vocab_size;
      Rng rng(9);
      std::vector<int32_t> tokens(T);
      for (auto& t : tokens) t = static_cast<int32_t>(rng.below(static_cast<uint64_t>(V)));
      Decoder f32(m, T, 5, DType::kF32), b16(m, T, 5, DType::kBF16);
      std::vector<float> a(T * V), b(T * V);
      f32.forward(tokens, a.data());
      b16.forward(tokens, b.data());
      EXPECT_LE(max_abs_diff(a.data(), b.data(), T * V), std::string(be) == "ref" ? 1e-6 : 1e-4);
    }
}

// On real weights: bf16 against f32 decode weights, prefill logits and greedy continuation.
TEST(Bf16DecodeWeights, Stories260KStaysCloseToF32) {
  if (!std::filesystem::exists(kStories + "/hf/model.safetensors"))
    GTEST_SKIP() << "shared test data missing: " << kStories << " (see ../shared/data/README.md)";
  auto loaded = load_model_dir(kStories + "/hf", kernels::cpu_backend());
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  model::Transformer& m = *loaded->model;
  const int64_t T = 32, V = m.config().vocab_size;
  Rng rng(1);
  std::vector<int32_t> tokens(T);
  for (auto& t : tokens) t = static_cast<int32_t>(rng.below(static_cast<uint64_t>(V)));
  Decoder f32(m, 2 * T, 64, DType::kF32), b16(m, 2 * T, 64, DType::kBF16);
  EXPECT_EQ(b16.weights().bytes_per_token() * 2 - f32.weights().bytes_per_token(),
            m.config().d_model * 4 * (m.config().positions == model::PositionKind::kLearned ? 2 : 1))
      << "bf16 weights must read half the GEMM bytes (the embedding rows stay f32)";
  std::vector<float> a(T * V), b(T * V);
  f32.forward(tokens, a.data());
  b16.forward(tokens, b.data());
  const double diff = max_abs_diff(a.data(), b.data(), T * V);
  double largest = 0;
  for (float x : a) largest = std::max(largest, std::abs(static_cast<double>(x)));
  EXPECT_GT(diff, 0.0) << "the bf16 path must actually read rounded weights";
  EXPECT_LE(diff, 0.01 * largest) << "largest |logit| " << largest;
  GenerateOptions o;
  o.max_tokens = T;
  o.sampling.temperature = 0;
  auto ga = generate(f32, std::vector<int32_t>{1}, o, {});
  auto gb = generate(b16, std::vector<int32_t>{1}, o, {});
  ASSERT_TRUE(ga.ok() && gb.ok());
  EXPECT_EQ(ga->tokens, gb->tokens);
  std::printf("stories260K bf16 vs f32 decode weights: max |logit diff| %.4g over %lld positions (largest |logit| %.3g)\n",
              diff, static_cast<long long>(T), largest);
}

// generate_batch == generate() per row, each row with seed + r (sampling, temperature 1, top-k 0):
// bf16 weights make every row's logits bit-identical to the one-row decoder's, so the draws are too.
TEST(GenerateBatch, EveryRowEqualsGenerateWithItsSeed) {
  if (!std::filesystem::exists(kStories + "/hf/model.safetensors"))
    GTEST_SKIP() << "shared test data missing: " << kStories;
  auto loaded = load_model_dir(kStories + "/hf", kernels::cpu_backend());
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  model::Transformer& m = *loaded->model;
  const std::vector<std::vector<int32_t>> prompts = {{1}, {1, 403, 407}, {1, 9, 17, 33, 65}, {1}};
  GenerateOptions o;
  o.max_tokens = 24;
  o.sampling.temperature = 1.0f;
  o.sampling.seed = 42;
  o.eos_id = 2;
  const int64_t R = static_cast<int64_t>(prompts.size()), S = 5 + o.max_tokens;
  Decoder batch(m, S, 64, DType::kBF16, R);
  auto got = generate_batch(batch, prompts, o, {});
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  ASSERT_EQ(static_cast<int64_t>(got->rows.size()), R);
  for (int64_t r = 0; r < R; ++r) {
    Decoder one(m, S, 64, DType::kBF16);
    GenerateOptions orow = o;
    orow.sampling.seed = o.sampling.seed + static_cast<uint64_t>(r);
    auto want = generate(one, prompts[r], orow, {});
    ASSERT_TRUE(want.ok());
    EXPECT_EQ(got->rows[r].tokens, want->tokens) << "row " << r;
    EXPECT_EQ(got->rows[r].stop_reason, want->stop_reason) << "row " << r;
  }
  EXPECT_NE(got->rows[0].tokens, got->rows[3].tokens) << "same prompt, different seeds: different samples";
  // Mismatched rows are an error, not a crash.
  auto bad = generate_batch(batch, {{1}}, o, {});
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace lmt::eval
