// Shingles, MinHash signatures, shingle Jaccard and the (bands, rows) choice (minhash.h).
#include <algorithm>
#include <cmath>
#include <limits>

#include "lmt/base/check.h"
#include "lmt/base/xxh64.h"
#include "lmt/dedup/minhash.h"

namespace lmt::dedup {
namespace {

constexpr uint64_t kMersenne61 = (uint64_t{1} << 61) - 1;

bool is_space(unsigned char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

// Calls fn(hash) for every shingle of `text` (duplicates included).
template <typename Fn>
void for_each_shingle(std::string_view text, const MinHashOptions& o, Fn&& fn) {
  const size_t n = static_cast<size_t>(o.ngram);
  if (o.unit == ShingleUnit::kWord) {
    std::vector<std::string_view> words;
    for (size_t i = 0; i < text.size();) {
      while (i < text.size() && is_space(static_cast<unsigned char>(text[i]))) ++i;
      const size_t start = i;
      while (i < text.size() && !is_space(static_cast<unsigned char>(text[i]))) ++i;
      if (i > start) words.push_back(text.substr(start, i - start));
    }
    auto hash_words = [&](size_t first, size_t count) {
      Xxh64 h(0);
      for (size_t k = 0; k < count; ++k) {
        if (k > 0) h.update(" ", 1);
        h.update(words[first + k].data(), words[first + k].size());
      }
      fn(h.digest());
    };
    if (words.size() < n) {
      hash_words(0, words.size());
      return;
    }
    for (size_t i = 0; i + n <= words.size(); ++i) hash_words(i, n);
    return;
  }
  // Characters: UTF-8 code points (a byte that is not a continuation byte starts one).
  std::vector<size_t> starts;
  for (size_t i = 0; i < text.size(); ++i) {
    if ((static_cast<unsigned char>(text[i]) & 0xC0) != 0x80 || starts.empty()) starts.push_back(i);
  }
  if (starts.size() < n) {
    fn(xxh64(text.data(), text.size(), 0));
    return;
  }
  starts.push_back(text.size());
  for (size_t i = 0; i + n < starts.size(); ++i) {
    fn(xxh64(text.data() + starts[i], starts[i + n] - starts[i], 0));
  }
}

uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// (a * x + b) mod (2^61 - 1) for a, b < 2^61 and any 64-bit x.
inline uint64_t universal_hash(uint64_t a, uint64_t b, uint64_t x) {
  const unsigned __int128 v = static_cast<unsigned __int128>(a) * x + b;  // < 2^125 + 2^61
  // 2^61 == 1 (mod p): fold the high bits down twice, then one conditional subtraction.
  unsigned __int128 r = (v & kMersenne61) + (v >> 61);                     // < 2^65
  uint64_t s = static_cast<uint64_t>((r & kMersenne61) + (r >> 61));       // < 2^61 + 16
  if (s >= kMersenne61) s -= kMersenne61;
  return s;
}

}  // namespace

Status validate(const MinHashOptions& o) {
  if (o.ngram < 1) return InvalidArgument("minhash ngram = " + std::to_string(o.ngram) + ": must be >= 1");
  if (o.bands < 1 || o.rows < 1) {
    return InvalidArgument("minhash bands x rows = " + std::to_string(o.bands) + " x " + std::to_string(o.rows) +
                               ": both must be >= 1",
                           "FineWeb uses 14 bands of 8 rows (112 hashes)");
  }
  if (o.bands > 4096 || o.rows > 4096) {
    return InvalidArgument("minhash bands x rows = " + std::to_string(o.bands) + " x " + std::to_string(o.rows) +
                           ": at most 4096 each");
  }
  if (!(o.threshold >= 0.0 && o.threshold <= 1.0)) {
    return InvalidArgument("minhash threshold = " + std::to_string(o.threshold) + ": must be in [0, 1]");
  }
  if (o.memory_budget_bytes <= 0) {
    return InvalidArgument("minhash memory budget = " + std::to_string(o.memory_budget_bytes) + " bytes: must be > 0");
  }
  if (o.workers < 0) return InvalidArgument("minhash workers = " + std::to_string(o.workers) + ": must be >= 0");
  return Status::Ok();
}

double lsh_probability(double s, int64_t bands, int64_t rows) {
  return 1.0 - std::pow(1.0 - std::pow(s, static_cast<double>(rows)), static_cast<double>(bands));
}

std::pair<int64_t, int64_t> choose_bands_rows(double threshold, int64_t num_hashes) {
  LMT_CHECK(num_hashes >= 1) << "num_hashes=" << num_hashes;
  LMT_CHECK(threshold >= 0.0 && threshold <= 1.0) << "threshold=" << threshold;
  // datasketch's _integration: midpoint rule, step 0.001, `while x < b`.
  auto integrate = [](auto f, double a, double b) {
    constexpr double p = 0.001;
    double area = 0.0;
    for (double x = a; x < b; x += p) area += f(x + 0.5 * p) * p;
    return area;
  };
  std::pair<int64_t, int64_t> best{num_hashes, 1};
  double best_error = std::numeric_limits<double>::infinity();
  for (int64_t b = 1; b <= num_hashes; ++b) {
    if (num_hashes % b != 0) continue;
    const int64_t r = num_hashes / b;
    const double fp = integrate([&](double s) { return lsh_probability(s, b, r); }, 0.0, threshold);
    const double fn = integrate([&](double s) { return 1.0 - lsh_probability(s, b, r); }, threshold, 1.0);
    const double error = 0.5 * fp + 0.5 * fn;
    if (error < best_error) {
      best_error = error;
      best = {b, r};
    }
  }
  return best;
}

std::vector<uint64_t> shingle_hashes(std::string_view text, const MinHashOptions& o) {
  std::vector<uint64_t> hashes;
  for_each_shingle(text, o, [&](uint64_t h) { hashes.push_back(h); });
  std::sort(hashes.begin(), hashes.end());
  hashes.erase(std::unique(hashes.begin(), hashes.end()), hashes.end());
  return hashes;
}

std::vector<uint64_t> minhash_signature(std::string_view text, const MinHashOptions& o) {
  const size_t k = static_cast<size_t>(o.bands * o.rows);
  // The permutations: (a_i, b_i) from a splitmix64 stream of the seed (cheap next to the hashing).
  std::vector<uint64_t> a(k), b(k);
  uint64_t state = o.seed;
  for (size_t i = 0; i < k; ++i) {
    a[i] = 1 + splitmix64(state) % (kMersenne61 - 1);
    b[i] = splitmix64(state) % kMersenne61;
  }
  std::vector<uint64_t> sig(k, std::numeric_limits<uint64_t>::max());
  for_each_shingle(text, o, [&](uint64_t h) {
    for (size_t i = 0; i < k; ++i) sig[i] = std::min(sig[i], universal_hash(a[i], b[i], h));
  });
  return sig;
}

double shingle_jaccard(std::string_view a, std::string_view b, const MinHashOptions& o) {
  return sorted_set_jaccard(shingle_hashes(a, o), shingle_hashes(b, o));
}

double sorted_set_jaccard(const std::vector<uint64_t>& x, const std::vector<uint64_t>& y) {
  size_t common = 0;
  for (size_t i = 0, j = 0; i < x.size() && j < y.size();) {
    if (x[i] < y[j]) {
      ++i;
    } else if (y[j] < x[i]) {
      ++j;
    } else {
      ++common, ++i, ++j;
    }
  }
  const size_t uni = x.size() + y.size() - common;
  return uni == 0 ? 1.0 : static_cast<double>(common) / static_cast<double>(uni);
}

}  // namespace lmt::dedup
