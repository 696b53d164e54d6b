#include "lmt/data/prepare.h"

#include <algorithm>
#include <filesystem>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <thread>

#include "lmt/base/timer.h"
#include "lmt/data/dataset_writer.h"
#include "lmt/data/prepare_inputs.h"
#include "lmt/data/sequence_order.h"

namespace lmt::data {
namespace {

struct Job {
  Document doc;
  std::vector<int32_t> ids;
  bool done = false;
};

struct SourceStats {
  int64_t documents = 0, empty_documents = 0, val_documents = 0, train_tokens = 0, val_tokens = 0;
};

// Encoding threads over a queue of jobs kept in input order. The calling thread pushes jobs at the
// back and pops finished ones from the front; workers claim the oldest unclaimed job. Jobs are
// heap-allocated so a worker's pointer survives the deque growing.
class EncodePool {
 public:
  EncodePool(const Tokenizer& tokenizer, int workers) : tokenizer_(tokenizer) {
    for (int i = 0; i < workers; ++i) threads_.emplace_back([this] { work(); });
  }
  ~EncodePool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      closing_ = true;
    }
    cv_work_.notify_all();
    for (std::thread& t : threads_) t.join();
  }

  void push(std::unique_ptr<Job> job) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      jobs_.push_back(std::move(job));
    }
    cv_work_.notify_one();
  }
  bool empty() {
    std::lock_guard<std::mutex> lock(mu_);
    return jobs_.empty();
  }
  // Waits for the oldest job to finish and removes it; requires !empty().
  std::unique_ptr<Job> pop_oldest() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_done_.wait(lock, [this] { return jobs_.front()->done; });
    std::unique_ptr<Job> job = std::move(jobs_.front());
    jobs_.pop_front();
    --claimed_;  // the front was necessarily claimed (workers claim in order)
    return job;
  }
  // True when the oldest job is finished (so popping it would not wait).
  bool oldest_done() {
    std::lock_guard<std::mutex> lock(mu_);
    return !jobs_.empty() && jobs_.front()->done;
  }

 private:
  void work() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_work_.wait(lock, [this] { return closing_ || claimed_ < jobs_.size(); });
      if (closing_) return;
      Job* job = jobs_[claimed_++].get();
      lock.unlock();
      job->ids = tokenizer_.encode(job->doc.text);
      lock.lock();
      job->done = true;
      cv_done_.notify_all();
    }
  }

  const Tokenizer& tokenizer_;
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable cv_work_, cv_done_;
  std::deque<std::unique_ptr<Job>> jobs_;
  size_t claimed_ = 0;  // jobs_[0, claimed_) are claimed by workers (or done)
  bool closing_ = false;
};

nlohmann::json preparation_json(const PrepareOptions& o, int32_t eos, const std::vector<InputFile>& files,
                                const std::vector<SourceStats>& stats, int64_t documents, int64_t empty) {
  nlohmann::json sources = nlohmann::json::array();
  for (size_t i = 0; i < files.size(); ++i)
    sources.push_back({{"path", files[i].path},
                       {"format", files[i].jsonl ? "jsonl" : "text"},
                       {"bytes", files[i].bytes},
                       {"documents", stats[i].documents},
                       {"empty_documents", stats[i].empty_documents},
                       {"val_documents", stats[i].val_documents},
                       {"train_tokens", stats[i].train_tokens},
                       {"val_tokens", stats[i].val_tokens}});
  // Only what determines the output: no worker count, no timing (identical output for any -j).
  return {{"tool", "lmtrain data prepare"},
          {"inputs", o.inputs},
          {"text_field", o.text_field},
          {"val_fraction", o.val_fraction},
          {"split_seed", o.split_seed},
          {"eos_id", eos},
          {"documents", documents},
          {"empty_documents", empty},
          {"sources", sources}};
}

}  // namespace

bool is_val_document(uint64_t split_seed, int64_t index, double val_fraction) {
  const uint64_t h = mix64(split_seed ^ mix64(static_cast<uint64_t>(index)));
  return static_cast<double>(h >> 11) * 0x1.0p-53 < val_fraction;
}

StatusOr<PrepareReport> prepare_dataset(const PrepareOptions& o, const Tokenizer& tokenizer,
                                        const std::function<void(const PrepareProgress&)>& progress) {
  if (!(o.val_fraction >= 0 && o.val_fraction < 1))
    return InvalidArgument("--val-fraction " + std::to_string(o.val_fraction) + " must be in [0, 1)",
                           "e.g. 0.005 keeps about one document in 200 for validation");
  if (o.shard_tokens < 1)
    return InvalidArgument("--shard-tokens " + std::to_string(o.shard_tokens) + " must be positive");
  if (o.workers < 0) return InvalidArgument("--threads " + std::to_string(o.workers) + " must be >= 0", "0 = one per core");
  const std::optional<int32_t> eos = o.eos_id ? o.eos_id : tokenizer.eos_id();
  if (!eos)
    return InvalidArgument("the tokenizer " + o.tokenizer_path + " has no end-of-document token",
                           "name one of its tokens with --eos (e.g. --eos '</s>')");
  LMT_ASSIGN_OR_RETURN(std::vector<InputFile> files, list_input_files(o.inputs));
  uint64_t total_bytes = 0;
  for (const InputFile& f : files) total_bytes += f.bytes;

  DatasetSpec spec;
  // Absolute: the manifest is read from other directories (training, eval) than the one it was made in.
  std::error_code abs_ec;
  spec.tokenizer_path = o.tokenizer_path.empty() ? "" : std::filesystem::absolute(o.tokenizer_path, abs_ec).lexically_normal().string();
  if (abs_ec) spec.tokenizer_path = o.tokenizer_path;
  spec.tokenizer_fingerprint = tokenizer.fingerprint();
  spec.vocab_size = tokenizer.vocab_size();
  spec.eos_id = *eos;
  spec.shard_tokens = o.shard_tokens;
  LMT_ASSIGN_OR_RETURN(std::unique_ptr<DatasetWriter> writer, DatasetWriter::create(o.out, spec));

  const Timer timer;
  DocumentReader reader(files, o.text_field);
  std::vector<SourceStats> stats(files.size());
  PrepareProgress prog;
  prog.bytes_total = total_bytes;
  double last_report = -1;
  auto report = [&](bool final) {
    if (!progress) return;
    prog.seconds = timer.seconds();
    if (!final && prog.seconds - last_report < 0.1) return;
    last_report = prog.seconds;
    if (final) prog.bytes_done = total_bytes;
    progress(prog);
  };

  int64_t index = 0, empty = 0;  // documents read so far (the split hash's key), empty ones skipped
  uint64_t skipped_bytes = 0;    // input bytes of empty documents, credited once written ones pass them
  // Writes one encoded document; the split depends only on its index in the input.
  auto write = [&](Job& job, int64_t doc_index) -> Status {
    const bool val = is_val_document(o.split_seed, doc_index, o.val_fraction);
    const Status s = writer->add_document(val ? Split::kVal : Split::kTrain, job.ids);
    if (!s.ok()) return Status(s.code(), reader.where(job.doc) + ": " + s.message(), s.hint());
    SourceStats& st = stats[static_cast<size_t>(job.doc.file)];
    const int64_t tokens = static_cast<int64_t>(job.ids.size()) + 1;
    st.documents += 1;
    (val ? st.val_tokens : st.train_tokens) += tokens;
    st.val_documents += val ? 1 : 0;
    prog.documents += 1;
    prog.tokens += tokens;
    prog.bytes_done += job.doc.input_bytes + skipped_bytes;
    skipped_bytes = 0;
    report(false);
    return Status::Ok();
  };

  // The first document waits until a second one exists: an input of one document (a novel, a
  // single-file corpus) is split by tokens instead, its tail fraction going to val.
  std::unique_ptr<Job> first;
  int64_t first_index = -1;
  auto emit = [&](std::unique_ptr<Job> job, int64_t doc_index) -> Status {
    if (prog.documents == 0 && !first) {
      first = std::move(job);
      first_index = doc_index;
      return Status::Ok();
    }
    if (first) {
      LMT_RETURN_IF_ERROR(write(*first, first_index));
      first.reset();
    }
    return write(*job, doc_index);
  };
  auto write_split = [&](Job& job, int64_t doc_index) -> Status {
    const int64_t n = static_cast<int64_t>(job.ids.size());
    if (o.val_fraction <= 0 || n < 2) return write(job, doc_index);
    const int64_t tail = std::clamp<int64_t>(std::llround(static_cast<double>(n) * o.val_fraction), 1, n - 1);
    const std::span<const int32_t> ids(job.ids);
    for (const auto& [split, part] : {std::pair{Split::kTrain, ids.first(static_cast<size_t>(n - tail))},
                                      std::pair{Split::kVal, ids.last(static_cast<size_t>(tail))}}) {
      const Status s = writer->add_document(split, part);
      if (!s.ok()) return Status(s.code(), reader.where(job.doc) + ": " + s.message(), s.hint());
    }
    SourceStats& st = stats[static_cast<size_t>(job.doc.file)];
    st.documents += 1;
    st.val_documents += 1;
    st.train_tokens += n - tail + 1;
    st.val_tokens += tail + 1;
    prog.documents += 1;
    prog.tokens += n + 2;
    prog.bytes_done += job.doc.input_bytes + skipped_bytes;
    skipped_bytes = 0;
    return Status::Ok();
  };

  {
    const int workers = o.workers > 0 ? o.workers : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    EncodePool pool(tokenizer, workers);
    std::deque<int64_t> indices;  // the input index of each job in the pool, oldest first
    size_t inflight = 0;
    bool input_done = false;
    for (;;) {
      // Read ahead while the budget allows (always at least one job, so progress is guaranteed).
      while (!input_done && (inflight < o.max_inflight_bytes || indices.empty())) {
        auto job = std::make_unique<Job>();
        LMT_ASSIGN_OR_RETURN(bool more, reader.next(&job->doc));
        if (!more) {
          input_done = true;
          break;
        }
        const int64_t doc_index = index++;
        if (job->doc.text.empty()) {
          ++empty;
          ++stats[static_cast<size_t>(job->doc.file)].empty_documents;
          skipped_bytes += job->doc.input_bytes;
          continue;
        }
        inflight += job->doc.text.size();
        indices.push_back(doc_index);
        pool.push(std::move(job));
        // Keep writers busy: stop reading ahead as soon as a finished job waits to be written.
        if (pool.oldest_done()) break;
      }
      if (indices.empty()) break;
      std::unique_ptr<Job> job = pool.pop_oldest();
      inflight -= job->doc.text.size();
      const int64_t doc_index = indices.front();
      indices.pop_front();
      LMT_RETURN_IF_ERROR(emit(std::move(job), doc_index));
    }
  }  // joins the workers
  if (first) LMT_RETURN_IF_ERROR(write_split(*first, first_index));  // the input held one document

  const int64_t documents = prog.documents;
  if (documents == 0)
    return InvalidArgument("the inputs hold no non-empty document (" + std::to_string(empty) + " empty)",
                           "check the --input paths and --text-field");
  LMT_ASSIGN_OR_RETURN(Manifest manifest, writer->commit(preparation_json(o, *eos, files, stats, documents, empty)));
  report(true);
  PrepareReport r;
  r.manifest = std::move(manifest);
  r.input_bytes = total_bytes;
  r.documents = documents;
  r.empty_documents = empty;
  r.seconds = timer.seconds();
  return r;
}

}  // namespace lmt::data
