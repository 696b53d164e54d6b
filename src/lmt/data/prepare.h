// prepare_dataset: text files -> tokenised train/val shards + manifest.json (`lmtrain data prepare`).
//
// Pipeline: the calling thread reads documents in input order (prepare_inputs.h) and hands them to
// `workers` threads that encode them with the Tokenizer (any order, any thread); the calling thread
// writes the results strictly in input order, so the output is byte-identical whatever the worker
// count. At most `max_inflight_bytes` of text wait or are being encoded at once (one document more
// if it alone is larger), so memory stays bounded for any corpus size.
//
// Documents: empty texts are skipped (counted in the manifest); every other document gets EOS
// appended. Document k (0-based over every document read, empty ones included) goes to the val
// split when a seeded hash of (split_seed, k) falls below val_fraction, else to train: the split
// depends on neither worker count nor timing. An input that holds a single non-empty document is
// split by tokens instead: its last round(n · val_fraction) tokens (at least 1, at most n - 1) form
// a val document, the rest a train document (each with EOS). The output directory is written by DatasetWriter
// (atomic rename; an existing non-empty directory is refused and never touched).
//
// Threading: call from one thread; the Tokenizer must be thread-safe (tokenizer.h promises it).
// The progress callback runs on the calling thread, at most about 10 times a second and once at
// the end.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "lmt/base/status.h"
#include "lmt/data/manifest.h"
#include "lmt/data/tokenizer/tokenizer.h"

namespace lmt::data {

struct PrepareOptions {
  std::vector<std::string> inputs;  // files and directories
  std::string out;                  // the dataset directory to create
  std::string text_field = "text";  // the document field of JSONL lines
  double val_fraction = 0.005;      // expected fraction of documents in the val split, in [0, 1)
  uint64_t split_seed = 0;
  int64_t shard_tokens = 100'000'000;
  int workers = 0;                  // encoding threads; 0 = one per hardware thread
  std::string tokenizer_path;       // recorded in the manifest
  std::optional<int32_t> eos_id;    // overrides tokenizer.eos_id()
  size_t max_inflight_bytes = size_t{256} << 20;
};

struct PrepareProgress {
  uint64_t bytes_done = 0, bytes_total = 0;  // input bytes
  int64_t documents = 0;                     // written so far
  int64_t tokens = 0;                        // written so far (EOS included)
  double seconds = 0;
};

struct PrepareReport {
  Manifest manifest;
  uint64_t input_bytes = 0;   // sum of the input files' sizes
  int64_t documents = 0;      // non-empty documents written
  int64_t empty_documents = 0;
  double seconds = 0;
};

// Errors: kInvalidArgument (options; a tokenizer without an EOS and no override; an input line that
// is not JSON or lacks the field, naming file:line; a document that encodes to the EOS id or to an
// id outside the vocabulary, naming file:line; inputs with no non-empty document), kNotFound
// (an input), kIoError (writing). On error nothing is left in `out`.
StatusOr<PrepareReport> prepare_dataset(const PrepareOptions& options, const Tokenizer& tokenizer,
                                        const std::function<void(const PrepareProgress&)>& progress = {});

// True when document `index` belongs to the val split (the rule above; exposed for tests).
bool is_val_document(uint64_t split_seed, int64_t index, double val_fraction);

}  // namespace lmt::data
