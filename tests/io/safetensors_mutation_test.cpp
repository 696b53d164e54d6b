// Seeded random mutations of a valid file pushed through SafetensorsFile::parse(): the poor man's
// fuzzer that runs in every build (the libFuzzer target, tests/fuzz/safetensors_fuzz.cpp, needs
// clang).
// Each input lives in its own exact-size heap buffer so ASan/valgrind flag any read past its end.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <cstring>
#include <memory>
#include <random>

#include "lmt/io/safetensors.h"
#include "safetensors_test_util.h"

namespace lmt::io {
namespace {

class SafetensorsMutationTest : public testing::ScratchDirTest {
 protected:
  std::string ValidFileBytes() {
    const float f[6] = {1, 2, 3, 4, 5, 6};
    const uint16_t h[3] = {0x3c00, 0x4000, 0x7c00};
    const double d[2] = {1.0, 2.0};
    const std::string p = path("seed.safetensors");
    Status s = write_safetensors(p, {{"model.a.weight", "F32", {2, 3}, f}, {"b", "BF16", {3}, h},
                                     {"c", "F16", {3, 1}, h}, {"d", "F64", {2}, d}, {"e", "F32", {0}, nullptr}},
                                 {{"format", "pt"}});
    EXPECT_TRUE(s.ok()) << s.ToString();
    return testing::read_bytes(p);
  }
};

std::string mutate(const std::string& seed, std::mt19937_64& rng) {
  std::string b = seed;
  uint64_t header_len = 0;  // little-endian; the seed is valid, so 8 + header_len <= seed.size()
  for (int i = 0; i < 8; ++i) header_len |= static_cast<uint64_t>(static_cast<uint8_t>(seed[i])) << (8 * i);
  auto pick = [&](uint64_t n) { return n == 0 ? 0 : rng() % n; };
  switch (pick(6)) {
    case 0: {  // flip a few bits in the length field, the header or the first data bytes
      const uint64_t span = std::min<uint64_t>(b.size(), 8 + header_len + 8);
      for (uint64_t i = 0, n = 1 + pick(4); i < n; ++i) b[pick(span)] ^= static_cast<char>(1u << pick(8));
      break;
    }
    case 1:  // truncate
      b.resize(pick(b.size()));
      break;
    case 2: {  // a nearby or random header length
      uint64_t v = pick(2) ? header_len + pick(17) - 8 : rng();
      std::memcpy(b.data(), &v, 8);
      break;
    }
    case 3:  // replace a header byte with a JSON-significant one
      b[8 + pick(header_len)] = "{}[]\",:-0123456789e. "[pick(21)];
      break;
    case 4:  // delete a run of header bytes
      b.erase(8 + pick(header_len), 1 + pick(8));
      break;
    default:  // grow or shrink the data section
      if (pick(2)) {
        b.append(pick(16), '\0');
      } else {
        b.resize(b.size() - std::min<uint64_t>(b.size(), pick(16)));
      }
      break;
  }
  return b;
}

// Touches every byte a successful parse hands out: out-of-bounds spans would show up here.
void consume(const SafetensorsFile& file, const uint8_t* begin, size_t size) {
  for (const TensorInfo& t : file.tensors()) {
    ASSERT_TRUE(t.size == 0 || (t.data >= begin && t.data + t.size <= begin + size)) << t.name;
    if (t.dtype == "F32" || t.dtype == "BF16" || t.dtype == "F16" || t.dtype == "F64") {
      std::vector<float> out(static_cast<size_t>(t.numel()));
      ASSERT_TRUE(file.read_f32(t.name, out.data(), t.numel()).ok());
    }
  }
}

TEST_F(SafetensorsMutationTest, TwoThousandMutationsNeverCrash) {
  const std::string seed = ValidFileBytes();
  ASSERT_GT(seed.size(), 8u);
  std::mt19937_64 rng(20240607);
  const auto start = std::chrono::steady_clock::now();
  int accepted = 0;
  for (int i = 0; i < 2000; ++i) {
    const std::string m = mutate(seed, rng);
    auto buf = std::make_unique<uint8_t[]>(m.size());
    if (!m.empty()) std::memcpy(buf.get(), m.data(), m.size());
    auto r = SafetensorsFile::parse(buf.get(), m.size(), "mutant" + std::to_string(i));
    if (r.ok()) {
      ++accepted;
      consume(*r, buf.get(), m.size());
    } else {
      ASSERT_NE(r.status().message().find("mutant" + std::to_string(i)), std::string::npos) << r.status().message();
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 2.0);
  EXPECT_LT(accepted, 2000) << "mutations should break most files";
  std::cout << "[ info ] " << accepted << " of 2000 mutants parsed as valid, " << seconds << " s\n";
}

}  // namespace
}  // namespace lmt::io
