#include "lmt/data/tokenizer/piece_counter.h"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <string_view>
#include <thread>
#include <unordered_map>

namespace lmt::data {
namespace {

// Transparent hashing lets a worker look a piece up by string_view, allocating only for new pieces.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using CountMap = std::unordered_map<std::string, int64_t, StringHash, std::equal_to<>>;

// Blocks travel reader -> workers through `full` and come back through `empty` for reuse, so a
// run allocates 2 * threads + 1 block buffers however large the corpus is.
struct BlockQueue {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<TextBlock> full;
  std::vector<TextBlock> empty;
  bool closed = false;  // no more blocks will be queued
};

class SegmentCounter {
 public:
  SegmentCounter(const Pretokenizer& pretokenizer, const std::vector<std::string>& specials)
      : pretokenizer_(pretokenizer), specials_(specials), next_special_(specials.size()) {}

  void count(std::string_view segment) {
    // next_special_[i]: where specials_[i] next occurs in `segment` (npos: nowhere), kept across the
    // loop so each special is searched for once per occurrence, not once per cut.
    for (size_t i = 0; i < specials_.size(); ++i) next_special_[i] = segment.find(specials_[i]);
    size_t pos = 0;
    for (;;) {
      size_t best = std::string_view::npos, best_len = 0;
      for (size_t i = 0; i < specials_.size(); ++i) {
        if (next_special_[i] != std::string_view::npos && next_special_[i] < pos)
          next_special_[i] = segment.find(specials_[i], pos);
        const size_t at = next_special_[i];
        if (at < best || (at == best && at != std::string_view::npos && specials_[i].size() > best_len)) {
          best = at;
          best_len = specials_[i].size();
        }
      }
      if (best == std::string_view::npos) break;
      count_text(segment.substr(pos, best - pos));
      ++specials_found_;
      pos = best + best_len;
    }
    count_text(segment.substr(pos));
  }

  CountMap& counts() { return counts_; }
  int64_t pieces() const { return pieces_; }
  int64_t specials_found() const { return specials_found_; }

 private:
  void count_text(std::string_view text) {
    if (text.empty()) return;
    scratch_.clear();
    pretokenizer_.split(text, &scratch_);
    pieces_ += static_cast<int64_t>(scratch_.size());
    for (std::string_view piece : scratch_) {
      auto it = counts_.find(piece);
      if (it != counts_.end()) {
        ++it->second;
      } else {
        counts_.emplace(std::string(piece), 1);
      }
    }
  }

  const Pretokenizer& pretokenizer_;
  const std::vector<std::string>& specials_;
  std::vector<size_t> next_special_;
  std::vector<std::string_view> scratch_;
  CountMap counts_;
  int64_t pieces_ = 0;
  int64_t specials_found_ = 0;
};

void worker_loop(BlockQueue* q, SegmentCounter* counter) {
  for (;;) {
    TextBlock block;
    {
      std::unique_lock<std::mutex> lock(q->mu);
      q->cv.wait(lock, [&] { return !q->full.empty() || q->closed; });
      if (q->full.empty()) return;
      block = std::move(q->full.front());
      q->full.pop_front();
    }
    for (size_t i = 0; i < block.segment_ends.size(); ++i) counter->count(block.segment(i));
    {
      std::lock_guard<std::mutex> lock(q->mu);
      q->empty.push_back(std::move(block));
    }
    q->cv.notify_all();
  }
}

}  // namespace

StatusOr<std::vector<PieceCount>> count_pieces(CorpusReader* reader, const Pretokenizer& pretokenizer,
                                               const PieceCountOptions& options,
                                               const std::function<void(uint64_t, uint64_t)>& progress,
                                               PieceCountStats* stats) {
  LMT_CHECK_GE(options.threads, 1);
  for (const std::string& s : options.special_tokens) LMT_CHECK(!s.empty()) << "empty special token";
  const size_t n_workers = static_cast<size_t>(options.threads);
  const size_t max_blocks = 2 * n_workers + 1;

  BlockQueue q;
  std::vector<SegmentCounter> counters;
  counters.reserve(n_workers);
  for (size_t i = 0; i < n_workers; ++i) counters.emplace_back(pretokenizer, options.special_tokens);
  std::vector<std::thread> workers;
  for (size_t i = 0; i < n_workers; ++i) workers.emplace_back(worker_loop, &q, &counters[i]);

  Status read_status;
  size_t allocated = 0;
  for (;;) {
    TextBlock block;
    {
      std::unique_lock<std::mutex> lock(q.mu);
      q.cv.wait(lock, [&] { return !q.empty.empty() || allocated < max_blocks; });
      if (!q.empty.empty()) {
        block = std::move(q.empty.back());
        q.empty.pop_back();
      } else {
        ++allocated;
      }
    }
    StatusOr<bool> more = reader->next(&block);
    if (!more.ok()) {
      read_status = more.status();
      break;
    }
    if (!*more) break;
    {
      std::lock_guard<std::mutex> lock(q.mu);
      q.full.push_back(std::move(block));
    }
    q.cv.notify_all();
    if (progress) progress(reader->bytes_read(), reader->total_bytes());
  }
  {
    std::lock_guard<std::mutex> lock(q.mu);
    q.closed = true;
    if (!read_status.ok()) q.full.clear();  // the run fails: do not count the rest
  }
  q.cv.notify_all();
  for (std::thread& t : workers) t.join();
  LMT_RETURN_IF_ERROR(read_status);

  // Sum into the largest map, then sort: neither step depends on which worker saw what.
  size_t largest = 0;
  for (size_t i = 1; i < counters.size(); ++i)
    if (counters[i].counts().size() > counters[largest].counts().size()) largest = i;
  CountMap& total = counters[largest].counts();
  PieceCountStats s;
  for (size_t i = 0; i < counters.size(); ++i) {
    s.pieces += counters[i].pieces();
    s.special_occurrences += counters[i].specials_found();
    if (i == largest) continue;
    CountMap& other = counters[i].counts();
    while (!other.empty()) {
      auto node = other.extract(other.begin());
      auto it = total.find(node.key());
      if (it != total.end()) {
        it->second += node.mapped();
      } else {
        total.insert(std::move(node));
      }
    }
  }
  std::vector<PieceCount> out;
  out.reserve(total.size());
  while (!total.empty()) {
    auto node = total.extract(total.begin());
    out.push_back({std::move(node.key()), node.mapped()});
  }
  std::sort(out.begin(), out.end(), [](const PieceCount& a, const PieceCount& b) { return a.bytes < b.bytes; });
  s.bytes = reader->bytes_read();
  s.documents = reader->documents();
  if (stats != nullptr) *stats = s;
  if (progress) progress(reader->bytes_read(), reader->total_bytes());
  return out;
}

}  // namespace lmt::data
