// MinHashDeduper (minhash.h): band hashes into a BandStore, then union-find over the collisions.
#include <algorithm>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "lmt/base/xxh64.h"
#include "lmt/dedup/band_store.h"
#include "lmt/dedup/minhash.h"

namespace lmt::dedup {
namespace {

// Union-find over dense indices; the root of a set is always its smallest index, so the root of a
// cluster is the document it keeps, whatever order the unions come in.
class UnionFind {
 public:
  explicit UnionFind(size_t n) : parent_(n) {
    for (size_t i = 0; i < n; ++i) parent_[i] = i;
  }
  uint64_t find(uint64_t x) {
    while (parent_[x] != x) {
      parent_[x] = parent_[parent_[x]];  // path halving
      x = parent_[x];
    }
    return x;
  }
  // Returns true when x and y were in different sets.
  bool unite(uint64_t x, uint64_t y) {
    x = find(x), y = find(y);
    if (x == y) return false;
    if (y < x) std::swap(x, y);
    parent_[y] = x;
    return true;
  }

 private:
  std::vector<uint64_t> parent_;
};

// Shingle sets of the documents being verified, bounded (cleared when it grows past `limit`).
class ShingleCache {
 public:
  ShingleCache(const MinHashOptions& o, const std::function<std::string(int64_t)>& text_of,
               const std::vector<int64_t>& docs)
      : o_(o), text_of_(text_of), docs_(docs) {}
  const std::vector<uint64_t>& get(uint64_t index) {
    auto it = sets_.find(index);
    if (it != sets_.end()) return it->second;
    if (sets_.size() >= 4096) sets_.clear();
    return sets_.emplace(index, shingle_hashes(text_of_(docs_[index]), o_)).first->second;
  }

 private:
  const MinHashOptions& o_;
  const std::function<std::string(int64_t)>& text_of_;
  const std::vector<int64_t>& docs_;
  std::unordered_map<uint64_t, std::vector<uint64_t>> sets_;
};

}  // namespace

MinHashDeduper::MinHashDeduper(const MinHashOptions& o, std::unique_ptr<BandStore> store)
    : opts_(o), store_(std::move(store)) {}

MinHashDeduper::~MinHashDeduper() = default;

StatusOr<std::unique_ptr<MinHashDeduper>> MinHashDeduper::create(const MinHashOptions& o) {
  LMT_RETURN_IF_ERROR(validate(o));
  const int workers = o.workers > 0 ? static_cast<int>(std::min<int64_t>(o.workers, 1024))
                                    : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  LMT_ASSIGN_OR_RETURN(std::unique_ptr<BandStore> store,
                       BandStore::create(o.work_dir, o.bands, o.memory_budget_bytes, workers));
  return std::unique_ptr<MinHashDeduper>(new MinHashDeduper(o, std::move(store)));
}

Status MinHashDeduper::add(int64_t doc, std::span<const uint64_t> signature) {
  if (finished_) return FailedPrecondition("MinHashDeduper::add after finish()");
  if (!docs_.empty() && doc <= docs_.back()) {
    return InvalidArgument("MinHash document " + std::to_string(doc) + " added after document " +
                               std::to_string(docs_.back()),
                           "add documents in strictly increasing index order");
  }
  const size_t rows = static_cast<size_t>(opts_.rows);
  if (signature.size() != static_cast<size_t>(opts_.bands) * rows) {
    return InvalidArgument("MinHash signature of document " + std::to_string(doc) + " has " +
                               std::to_string(signature.size()) + " values, expected bands x rows = " +
                               std::to_string(opts_.bands * opts_.rows),
                           "compute it with minhash_signature() and the same options");
  }
  const uint64_t index = docs_.size();
  docs_.push_back(doc);
  for (int64_t b = 0; b < opts_.bands; ++b) {
    store_->add(b, xxh64(signature.data() + b * rows, rows * sizeof(uint64_t), static_cast<uint64_t>(b)), index);
  }
  if (store_->over_budget()) return store_->spill();
  return Status::Ok();
}

StatusOr<DedupResult> MinHashDeduper::finish(const std::function<std::string(int64_t)>& text_of) {
  if (finished_) return FailedPrecondition("MinHashDeduper::finish called twice");
  finished_ = true;
  if (opts_.verify && !text_of) {
    return InvalidArgument("MinHash verification is on but finish() got no text_of",
                           "pass a function returning each document's (normalised) text");
  }
  DedupResult result;
  UnionFind uf(docs_.size());
  ShingleCache cache(opts_, text_of, docs_);
  // Pairs verified and rejected (index pairs, smaller first): not verified again in later bands.
  struct PairHash {
    size_t operator()(const std::pair<uint64_t, uint64_t>& k) const noexcept {
      return static_cast<size_t>(k.first * 0x9e3779b97f4a7c15ull ^ k.second);
    }
  };
  std::unordered_set<std::pair<uint64_t, uint64_t>, PairHash> rejected;
  std::vector<uint64_t> group;  // the current bucket's indices (verify only), increasing
  int64_t group_band = -1;
  uint64_t group_hash = 0;

  // Every pair of the bucket whose clusters still differ is verified: the clusters end as the
  // connected components of {candidate pairs with Jaccard >= threshold}, whatever the visit order.
  auto close_group = [&]() {
    if (!opts_.verify || group.size() < 2) return;
    for (size_t j = 1; j < group.size(); ++j) {
      for (size_t i = 0; i < j; ++i) {
        if (uf.find(group[i]) == uf.find(group[j])) continue;
        const std::pair<uint64_t, uint64_t> key{group[i], group[j]};
        if (rejected.count(key) != 0) continue;
        const std::vector<uint64_t> x = cache.get(group[i]);  // copy: get() may evict
        const double jac = sorted_set_jaccard(x, cache.get(group[j]));
        if (jac >= opts_.threshold) {
          uf.unite(group[i], group[j]);
          ++result.verified_pairs;
        } else {
          rejected.insert(key);
          ++result.rejected_pairs;
        }
      }
    }
  };

  uint64_t first = 0;  // the first (smallest) index of the current bucket
  LMT_RETURN_IF_ERROR(store_->scan([&](int64_t band, const BandRecord& r) -> Status {
    if (band == group_band && r.hash == group_hash) {
      ++result.candidate_pairs;
      if (opts_.verify) {
        group.push_back(r.index);
      } else {
        uf.unite(first, r.index);
      }
      return Status::Ok();
    }
    close_group();
    group.assign(1, r.index);
    group_band = band, group_hash = r.hash, first = r.index;
    return Status::Ok();
  }));
  close_group();
  result.spilled_runs = store_->runs();

  std::vector<bool> counted(docs_.size(), false);  // roots whose cluster is counted
  for (uint64_t i = 0; i < docs_.size(); ++i) {
    const uint64_t root = uf.find(i);
    if (root != i) {
      result.removed.push_back(docs_[i]);
      result.kept_for.push_back(docs_[root]);
      if (!counted[root]) ++result.clusters, counted[root] = true;
    }
  }
  return result;
}

}  // namespace lmt::dedup
