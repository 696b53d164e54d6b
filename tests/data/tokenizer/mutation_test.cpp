// Seeded random byte edits of small valid tokenizer.json files pushed through the loader and, when
// they still load, through encode/decode: the poor man's fuzzer that runs in every build (the
// libFuzzer target, tests/fuzz/tokenizer_json_fuzz.cpp, needs clang). Nothing may crash; every id
// must be valid.
#include <gtest/gtest.h>

#include <chrono>
#include <random>

#include "lmt/data/tokenizer/loaders.h"
#include "small_tokenizers.h"

namespace lmt::data {
namespace {

std::string mutate(const std::string& seed, std::mt19937_64& rng) {
  std::string b = seed;
  auto pick = [&](size_t n) { return n == 0 ? size_t{0} : static_cast<size_t>(rng() % n); };
  for (int edits = 1 + static_cast<int>(pick(3)); edits > 0 && !b.empty(); --edits) {
    switch (pick(5)) {
      case 0:  // flip a bit
        b[pick(b.size())] ^= static_cast<char>(1u << pick(8));
        break;
      case 1:  // a JSON-significant byte
        b[pick(b.size())] = "{}[]\",:-0123456789e. \\"[pick(22)];
        break;
      case 2:  // delete a run
        b.erase(pick(b.size()), 1 + pick(16));
        break;
      case 3:  // truncate
        b.resize(pick(b.size()));
        break;
      default: {  // duplicate a run somewhere else
        const size_t from = pick(b.size());
        b.insert(pick(b.size()), b.substr(from, 1 + pick(32)));
      }
    }
  }
  return b;
}

TEST(TokenizerMutation, RandomEditsNeverCrash) {
  const auto start = std::chrono::steady_clock::now();
  const std::string seeds[] = {testing::small_byte_level_json().dump(), testing::small_sentencepiece_json().dump()};
  std::mt19937_64 rng(20240611);
  int loaded = 0;
  const std::string texts[] = {"the thing", "hello world", "", "\xff\xfe bytes \xe4\xb8", "  \n\n x"};
  for (int i = 0; i < 1000; ++i) {
    const std::string bytes = mutate(seeds[i % 2], rng);
    auto t = parse_hf_tokenizer_json(bytes, "mutant.json");
    if (!t.ok()) {
      EXPECT_NE(t.status().message().find("mutant.json"), std::string::npos) << t.status().ToString();
      continue;
    }
    ++loaded;
    for (const std::string& s : texts) {
      const auto ids = (*t)->encode(s);
      for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < (*t)->vocab_size());
      (void)(*t)->decode(ids);
      (void)(*t)->encode_with_special_tokens(s);
    }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::cout << "mutants: 1000, loaded " << loaded << ", " << secs << " s\n";
  EXPECT_GT(loaded, 0);  // some edits (inside strings) leave a valid file: encode runs on them
}

}  // namespace
}  // namespace lmt::data
