// MinHash-LSH near-duplicate detection (issue #17): signatures, the LSH band/row choice, and a
// streaming deduper that clusters documents whose signatures collide in at least one band.
//
// Algorithm (docs/DATA_CLEAN_MINHASH.md):
//   1. Shingles. The text (already normalised by the caller) is cut into units: words (maximal runs
//      of non-ASCII-whitespace bytes) or characters (UTF-8 code points). Every run of `ngram`
//      consecutive units is a shingle; word shingles are the words joined by one space. A text with
//      fewer than `ngram` units is one shingle of the whole text (its units, joined the same way).
//      Each shingle is hashed to 64 bits with xxh64 (seed 0); the shingle set is the set of hashes.
//   2. Signature. bands*rows universal hashes h_i(x) = (a_i*x + b_i) mod (2^61 - 1), the (a_i, b_i)
//      drawn from `seed` (a_i in [1, p), b_i in [0, p)), as datasketch and datatrove do; the
//      signature is, for each i, the minimum of h_i over the shingle set. P(equal value) = Jaccard.
//   3. LSH. The signature is cut into `bands` bands of `rows` values; two documents are a candidate
//      pair when some band is identical (a 64-bit xxh64 of the band's values, per band). The
//      probability for Jaccard s is the S-curve 1 - (1 - s^rows)^bands.
//   4. Clusters. Union-find over every band collision (optionally only the candidate pairs whose
//      true shingle Jaccard is >= threshold); every cluster keeps its smallest document index.
//
// Memory: MinHashDeduper buffers 16 bytes per document per band (the band hash and a dense index)
// up to memory_budget_bytes, then sorts the buffers (in parallel over bands) and spills one sorted
// run file per band into a private directory under work_dir; finish() merges the runs of each band.
// Besides the budget it keeps 16 bytes per document (doc ids and the union-find parents).
// Output is identical for any worker count and any memory budget.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "lmt/base/status.h"

namespace lmt::dedup {

enum class ShingleUnit { kWord, kChar };

struct MinHashOptions {
  int64_t ngram = 5;                 // shingle length in words (or characters)
  ShingleUnit unit = ShingleUnit::kWord;
  int64_t bands = 14, rows = 8;      // bands * rows hashes (FineWeb: 14 x 8 = 112)
  uint64_t seed = 1;
  bool verify = false;               // keep a candidate pair only if its true Jaccard >= threshold
  double threshold = 0.8;            // the verification threshold (and what choose_bands_rows aims at)
  std::string work_dir;              // where signatures/buckets spill to disk (must exist)
  int64_t memory_budget_bytes = int64_t{256} << 20;
  // Extension: threads for sorting the band buffers (parallel over bands); 0 = one per hardware
  // thread. The result does not depend on it.
  int64_t workers = 0;
};

// Checks the options the way create() does (ngram, bands, rows >= 1; threshold in [0, 1];
// memory budget > 0). Errors: kInvalidArgument naming the field. work_dir is not checked here.
Status validate(const MinHashOptions& o);

// The (bands, rows) with bands*rows == num_hashes minimising false positives + false negatives of the
// LSH S-curve 1-(1-s^r)^b around `threshold` (datasketch's rule).
// Precisely: argmin over divisors b of num_hashes (r = num_hashes / b) of
//   0.5 * integral_0^t P(s) ds + 0.5 * integral_t^1 (1 - P(s)) ds,  P(s) = 1 - (1 - s^r)^b,
// both integrals by the midpoint rule with step 0.001 (datasketch's fallback integrator); ties go
// to the smaller b. Requires num_hashes >= 1 and threshold in [0, 1] (checked: a caller's bug).
std::pair<int64_t, int64_t> choose_bands_rows(double threshold, int64_t num_hashes);

// The LSH S-curve: probability that two documents of Jaccard s share at least one of `bands` bands.
double lsh_probability(double s, int64_t bands, int64_t rows);

// Pure and thread-safe: bands*rows 64-bit min-hash values of text's shingles (after the caller's
// normalisation). A text with fewer than ngram units is one shingle of the whole text.
std::vector<uint64_t> minhash_signature(std::string_view text, const MinHashOptions& o);
// True Jaccard similarity of the two texts' shingle sets (for verification and tests).
// Computed on the 64-bit shingle hashes: exact up to xxh64 collisions (probability ~ n^2 / 2^64).
double shingle_jaccard(std::string_view a, std::string_view b, const MinHashOptions& o);
// Extension: the sorted, distinct 64-bit shingle hashes of `text` (what the two functions above use).
std::vector<uint64_t> shingle_hashes(std::string_view text, const MinHashOptions& o);
// Extension: |x ∩ y| / |x ∪ y| of two sorted, distinct hash sets (1 when both are empty).
double sorted_set_jaccard(const std::vector<uint64_t>& x, const std::vector<uint64_t>& y);

struct DedupResult {
  std::vector<int64_t> removed;      // sorted doc indices: every cluster member except its smallest
  std::vector<int64_t> kept_for;     // kept_for[i]: the smallest index of removed[i]'s cluster
  // candidate_pairs: band collisions, counted as (bucket size - 1) summed over every bucket of every
  //   band (a document colliding in 3 bands counts 3 times); independent of verification.
  // verified_pairs: with verify, the document pairs whose Jaccard was computed and was >= threshold
  //   (0 without verify). rejected_pairs (extension): computed and < threshold.
  // clusters: clusters with two or more documents.
  int64_t candidate_pairs = 0, verified_pairs = 0, clusters = 0;
  int64_t rejected_pairs = 0;
  int64_t spilled_runs = 0;          // extension: sorted runs written to work_dir (0 = all in memory)
};

class BandStore;

class MinHashDeduper {
 public:
  // Errors: kInvalidArgument (options; validate()), kNotFound (work_dir missing or not a directory),
  // kIoError (cannot create the private spill directory in work_dir), each naming the path.
  static StatusOr<std::unique_ptr<MinHashDeduper>> create(const MinHashOptions& o);
  ~MinHashDeduper();  // removes the spill directory and its files

  // Documents are added in increasing doc index (not necessarily contiguous); signature from
  // minhash_signature(). Not thread-safe: compute signatures in parallel, add in order.
  // Errors: kInvalidArgument (doc not increasing, signature size != bands*rows), kIoError (a spill
  // failed: disk full, ...; names the file), kFailedPrecondition (after finish()).
  Status add(int64_t doc, std::span<const uint64_t> signature);
  // The clusters (union-find over every band collision). text_of(doc) is called only when
  // options.verify. Deterministic: the same inputs give the same result for any worker count.
  // Call once. Errors: kIoError/kDataLoss reading a spilled run, kInvalidArgument (verify without
  // text_of), kFailedPrecondition (called twice).
  StatusOr<DedupResult> finish(const std::function<std::string(int64_t)>& text_of = {});

  int64_t documents() const { return static_cast<int64_t>(docs_.size()); }

 private:
  MinHashDeduper(const MinHashOptions& o, std::unique_ptr<BandStore> store);

  MinHashOptions opts_;
  std::unique_ptr<BandStore> store_;
  std::vector<int64_t> docs_;  // dense index -> doc
  bool finished_ = false;
};

}  // namespace lmt::dedup
