// BandStore: the LSH band hashes of every document, per band, sorted by (hash, index), in memory
// up to a byte budget and in sorted run files on disk beyond it (internal to lmt_dedup; minhash.h).
//
// add() appends a record to its band's buffer; when the buffers together hold more than the budget
// the deduper calls spill(): every band buffer is sorted (bands in parallel, `workers` threads) and
// written to `<dir>/band<B>.run<K>` in the private directory made under work_dir. scan() visits the
// bands in order 0..bands-1 and each band's records in increasing (hash, index) order: a sort of the
// buffers when nothing was spilled, else a k-way merge of the band's runs (the remaining buffers are
// spilled first; more than kMaxFanIn runs are first merged 64 at a time into bigger runs, so that few
// files are open at once). The order is a total order, so the visit does not depend on workers or budget.
// One thread at a time (spill() and scan() start and join their own threads).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "lmt/base/status.h"

namespace lmt::dedup {

struct BandRecord {
  uint64_t hash;   // xxh64 of the band's `rows` signature values
  uint64_t index;  // dense document index (order of add)
  bool operator<(const BandRecord& o) const { return hash != o.hash ? hash < o.hash : index < o.index; }
};
static_assert(sizeof(BandRecord) == 16);

class BandStore {
 public:
  // Makes `<work_dir>/lmt-minhash-XXXXXX`. Errors: kNotFound (work_dir missing / not a directory),
  // kIoError (cannot create the directory), naming the path.
  static StatusOr<std::unique_ptr<BandStore>> create(const std::string& work_dir, int64_t bands,
                                                     int64_t memory_budget_bytes, int workers);
  ~BandStore();  // removes the directory and its run files

  void add(int64_t band, uint64_t hash, uint64_t index) { buffers_[band].push_back({hash, index}); buffered_ += 1; }
  bool over_budget() const { return buffered_ * int64_t{sizeof(BandRecord)} >= budget_; }
  // Sorts and writes the buffers as one more run per band. Errors: kIoError naming the file.
  Status spill();
  // visit(band, record) for every record, band by band, sorted. Errors: kIoError/kDataLoss reading a
  // run, or the first error visit returns. Call once (the buffers are consumed).
  Status scan(const std::function<Status(int64_t band, const BandRecord& r)>& visit);

  int64_t runs() const { return runs_; }
  const std::string& dir() const { return dir_; }

 private:
  BandStore(std::string dir, int64_t bands, int64_t budget, int workers)
      : dir_(std::move(dir)), buffers_(bands), run_sizes_(bands), budget_(budget), workers_(workers) {}
  static constexpr int64_t kMaxFanIn = 64;  // run files a merge reads at once
  std::string run_path(int64_t band, int64_t run) const;
  Status merge_band(int64_t band, const std::function<Status(int64_t, const BandRecord&)>& visit);

  std::string dir_;
  std::vector<std::vector<BandRecord>> buffers_;
  std::vector<std::vector<int64_t>> run_sizes_;  // [band][run]: records in that run file
  int64_t buffered_ = 0;
  int64_t budget_;
  int workers_;
  int64_t runs_ = 0;
};

}  // namespace lmt::dedup
