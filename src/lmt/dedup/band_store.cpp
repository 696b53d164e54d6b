// BandStore (band_store.h): sorted in-memory buffers and sorted run files, merged per band.
#include "lmt/dedup/band_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <queue>
#include <thread>

#include "lmt/io/files.h"

namespace lmt::dedup {
namespace {

constexpr const char* kSpillHint =
    "free disk space in the MinHash work directory, point it at a larger disk, or raise the memory budget";

// fn(b) for b in [0, n) on up to `workers` threads; returns the error of the smallest failing b.
Status parallel_over(int64_t n, int workers, const std::function<Status(int64_t)>& fn) {
  std::vector<Status> status(static_cast<size_t>(n));
  const int threads = static_cast<int>(std::clamp<int64_t>(workers, 1, n));
  if (threads <= 1) {
    for (int64_t b = 0; b < n; ++b) status[b] = fn(b);
  } else {
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        for (int64_t b = t; b < n; b += threads) status[b] = fn(b);
      });
    }
    for (std::thread& th : pool) th.join();
  }
  for (Status& s : status) {
    if (!s.ok()) return s;
  }
  return Status::Ok();
}

// Buffered reader of one run file of BandRecords.
class RunReader {
 public:
  RunReader(std::string path, int64_t records, size_t buffer_records)
      : path_(std::move(path)), left_(records), buffer_(buffer_records) {}
  ~RunReader() {
    if (fd_ >= 0) ::close(fd_);
  }
  RunReader(const RunReader&) = delete;
  RunReader& operator=(const RunReader&) = delete;

  Status open() {
    fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) return IoError(path_ + ": cannot open a MinHash spill run: " + io::errno_text());
    return refill();
  }
  bool done() const { return pos_ == len_; }
  const BandRecord& head() const { return buffer_[pos_]; }
  Status pop() {
    ++pos_;
    return pos_ == len_ ? refill() : Status::Ok();
  }

 private:
  Status refill() {
    pos_ = len_ = 0;
    if (left_ == 0) return Status::Ok();
    const size_t want = static_cast<size_t>(std::min<int64_t>(left_, static_cast<int64_t>(buffer_.size())));
    char* dst = reinterpret_cast<char*>(buffer_.data());
    size_t got = 0;
    const size_t bytes = want * sizeof(BandRecord);
    while (got < bytes) {
      const ssize_t n = ::read(fd_, dst + got, bytes - got);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return IoError(path_ + ": read failed: " + io::errno_text());
      if (n == 0) {
        return DataLoss(path_ + ": MinHash spill run ends early (" + std::to_string(left_) + " records expected)",
                        "the work directory was modified while the deduper ran");
      }
      got += static_cast<size_t>(n);
    }
    len_ = want;
    left_ -= static_cast<int64_t>(want);
    return Status::Ok();
  }

  std::string path_;
  int64_t left_;
  std::vector<BandRecord> buffer_;
  size_t pos_ = 0, len_ = 0;
  int fd_ = -1;
};

struct Run {
  std::string path;
  int64_t records;
};

// k-way merge of sorted runs into visit(record), in (hash, index) order; about `budget` bytes of
// read buffers in all.
Status merge_runs(const std::vector<Run>& runs, int64_t budget, const std::function<Status(const BandRecord&)>& visit) {
  const size_t per_reader =
      std::max<size_t>(512, static_cast<size_t>(budget) / sizeof(BandRecord) / std::max<size_t>(1, runs.size()));
  std::vector<std::unique_ptr<RunReader>> readers;
  for (const Run& run : runs) {
    readers.push_back(std::make_unique<RunReader>(
        run.path, run.records, std::min<size_t>(per_reader, static_cast<size_t>(run.records) + 1)));
    LMT_RETURN_IF_ERROR(readers.back()->open());
  }
  auto later = [&](size_t x, size_t y) { return readers[y]->head() < readers[x]->head(); };
  std::priority_queue<size_t, std::vector<size_t>, decltype(later)> heap(later);
  for (size_t k = 0; k < readers.size(); ++k) {
    if (!readers[k]->done()) heap.push(k);
  }
  while (!heap.empty()) {
    const size_t k = heap.top();
    heap.pop();
    LMT_RETURN_IF_ERROR(visit(readers[k]->head()));
    LMT_RETURN_IF_ERROR(readers[k]->pop());
    if (!readers[k]->done()) heap.push(k);
  }
  return Status::Ok();
}

// Writes records to `path` through a buffer.
class RunWriter {
 public:
  static StatusOr<std::unique_ptr<RunWriter>> create(const std::string& path) {
    const int fd = ::open(path.c_str(), O_CREAT | O_WRONLY | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return IoError(path + ": cannot create a MinHash spill run: " + io::errno_text(), kSpillHint);
    return std::unique_ptr<RunWriter>(new RunWriter(path, fd));
  }
  ~RunWriter() {
    if (fd_ >= 0) ::close(fd_);
  }
  Status write(const BandRecord* records, size_t n) {
    const int err = io::write_all(fd_, records, n * sizeof(BandRecord));
    if (err != 0) return IoError(path_ + ": write failed: " + io::errno_text(err), kSpillHint);
    return Status::Ok();
  }
  Status push(const BandRecord& r) {
    buffer_.push_back(r);
    if (buffer_.size() < 4096) return Status::Ok();
    Status s = write(buffer_.data(), buffer_.size());
    buffer_.clear();
    return s;
  }
  Status close() {
    LMT_RETURN_IF_ERROR(write(buffer_.data(), buffer_.size()));
    buffer_.clear();
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) return IoError(path_ + ": write failed: " + io::errno_text(), kSpillHint);
    return Status::Ok();
  }

 private:
  RunWriter(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  std::string path_;
  int fd_;
  std::vector<BandRecord> buffer_;
};

}  // namespace

StatusOr<std::unique_ptr<BandStore>> BandStore::create(const std::string& work_dir, int64_t bands,
                                                       int64_t memory_budget_bytes, int workers) {
  if (work_dir.empty()) {
    return InvalidArgument("MinHash work directory is empty", "give an existing directory for the spill files");
  }
  struct stat st {};
  if (::stat(work_dir.c_str(), &st) != 0) {
    return NotFound(work_dir + ": MinHash work directory: " + io::errno_text(),
                    "create it first; it holds the band spill files");
  }
  if (!S_ISDIR(st.st_mode)) {
    return NotFound(work_dir + ": MinHash work directory is not a directory", "give an existing directory");
  }
  std::string tmpl = work_dir + "/lmt-minhash-XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) {
    return IoError(work_dir + ": cannot create the MinHash spill directory in it: " + io::errno_text(),
                   "make the work directory writable or choose another one");
  }
  return std::unique_ptr<BandStore>(new BandStore(tmpl, bands, memory_budget_bytes, std::max(1, workers)));
}

BandStore::~BandStore() {
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);  // scratch: nothing to report from a destructor
}

std::string BandStore::run_path(int64_t band, int64_t run) const {
  return dir_ + "/band" + std::to_string(band) + ".run" + std::to_string(run);
}

Status BandStore::spill() {
  const int64_t run = runs_;
  LMT_RETURN_IF_ERROR(parallel_over(static_cast<int64_t>(buffers_.size()), workers_, [&](int64_t b) -> Status {
    std::vector<BandRecord>& buf = buffers_[b];
    std::sort(buf.begin(), buf.end());
    LMT_ASSIGN_OR_RETURN(std::unique_ptr<RunWriter> writer, RunWriter::create(run_path(b, run)));
    LMT_RETURN_IF_ERROR(writer->write(buf.data(), buf.size()));
    return writer->close();
  }));
  for (size_t b = 0; b < buffers_.size(); ++b) {
    run_sizes_[b].push_back(static_cast<int64_t>(buffers_[b].size()));
    buffers_[b].clear();
  }
  buffered_ = 0;
  ++runs_;
  return Status::Ok();
}

Status BandStore::merge_band(int64_t band, const std::function<Status(int64_t, const BandRecord&)>& visit) {
  std::vector<Run> runs;
  for (size_t k = 0; k < run_sizes_[band].size(); ++k) {
    runs.push_back({run_path(band, static_cast<int64_t>(k)), run_sizes_[band][k]});
  }
  // At most kMaxFanIn files open at once: merge the oldest runs into a new one until few are left.
  int64_t merged = 0;
  while (runs.size() > static_cast<size_t>(kMaxFanIn)) {
    const std::vector<Run> inputs(runs.begin(), runs.begin() + kMaxFanIn);
    Run out{dir_ + "/band" + std::to_string(band) + ".merge" + std::to_string(merged++), 0};
    LMT_ASSIGN_OR_RETURN(std::unique_ptr<RunWriter> writer, RunWriter::create(out.path));
    LMT_RETURN_IF_ERROR(merge_runs(inputs, budget_ / 2, [&](const BandRecord& r) {
      ++out.records;
      return writer->push(r);
    }));
    LMT_RETURN_IF_ERROR(writer->close());
    for (const Run& in : inputs) ::unlink(in.path.c_str());
    runs.erase(runs.begin(), runs.begin() + kMaxFanIn);
    runs.push_back(out);
  }
  return merge_runs(runs, budget_, [&](const BandRecord& r) { return visit(band, r); });
}

Status BandStore::scan(const std::function<Status(int64_t band, const BandRecord& r)>& visit) {
  const int64_t bands = static_cast<int64_t>(buffers_.size());
  if (runs_ == 0) {
    LMT_RETURN_IF_ERROR(parallel_over(bands, workers_, [&](int64_t b) {
      std::sort(buffers_[b].begin(), buffers_[b].end());
      return Status::Ok();
    }));
    for (int64_t b = 0; b < bands; ++b) {
      for (const BandRecord& r : buffers_[b]) LMT_RETURN_IF_ERROR(visit(b, r));
      std::vector<BandRecord>().swap(buffers_[b]);
    }
    return Status::Ok();
  }
  if (buffered_ > 0) LMT_RETURN_IF_ERROR(spill());
  for (int64_t b = 0; b < bands; ++b) LMT_RETURN_IF_ERROR(merge_band(b, visit));
  return Status::Ok();
}

}  // namespace lmt::dedup
