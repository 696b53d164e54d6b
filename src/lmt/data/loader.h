// Loader: training batches from prepared datasets (memory-mapped shards), with seeded shuffling,
// data-parallel slicing, weighted mixtures, stages, a background prefetch thread and an exact
// resume cursor. docs/FORMATS.md ("Loader") has the full story; the contract in short:
//
// Sequences. Each source's split is one token stream (documents, each followed by EOS). It is cut
// into windows of T+1 tokens that advance by T; a row of a batch is one window: tokens = its first
// T, targets = its last T (the next token of each). The partial window at the end of the stream is
// not used. Which window a position of an epoch reads is sequence_order.h: unshuffled = stream
// order; shuffled = a seeded, stratified permutation per epoch over windows (not documents), so one
// long document's windows are spread over the epoch and cannot fill a global batch.
//
// Ranks. All ranks run the same schedule in lockstep; rank r takes positions r, r+world, … of each
// source's epoch order, so ranks see disjoint windows. The last positions of an epoch that do not
// fill every rank are left out (they change with the per-epoch rotation when shuffled).
//
// Mixtures and stages. Every row draws its source with a seeded weighted draw (the same draw on all
// ranks) from the stage active at the batch's start: stage i is active once tokens_seen() >=
// stages[i].start_tokens (checked at batch boundaries). Each source keeps its own (epoch, position)
// across stages; a source listed in several stages (same path) continues where it was.
//
// Batch fields, per row of T (B rows, row-major):
//   tokens[t]    input id;  targets[t] = the id after it in the stream;
//   doc_ids[t]   0 at the row start, +1 after every EOS (so it changes exactly after an EOS);
//   positions[t] index within the document counted from max(row start, document start): 0 after
//                every EOS and at the row start (Megatron's reset_position_ids), so it is always < T
//                and valid for position embeddings and document-masked attention.
//
// Passes. loop = true: epochs follow each other forever (a batch may straddle two). loop = false:
// one pass; next() returns kOutOfRange when a row's source has no windows left (the incomplete last
// batch is dropped, so every rank returns the same number of batches). Errors are sticky.
//
// Cursor. cursor() is a JSON object with everything needed to resume (epoch and position per
// source, mixture RNG state, stage, batches and tokens so far); it is identical on every rank, so a
// checkpoint may store rank 0's and every rank restore() it. After restore(), next() yields exactly
// the batches the saving loader would have yielded. It reflects batches returned by next(), never
// the ones prefetched ahead.
//
// Threading: one thread calls the Loader's methods; with prefetch, one background thread builds the
// next batch meanwhile (the shards are read-only maps, the state is handed over under a mutex). If
// next() finds that thread not yet started on the batch (no CPU while the step saturates the cores),
// it builds the batch itself (a few microseconds) instead of waiting for the scheduler; either way
// the batches are the same.
// Ownership: the Loader owns its mappings and thread; a Batch passed to next() is overwritten (its
// buffers are recycled, so steady-state next() allocates nothing).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "lmt/base/status.h"

namespace lmt::data {

struct DataSource {
  std::string path;  // a prepared dataset directory
  double weight = 1.0;
};

struct DataStage {
  int64_t start_tokens = 0;  // mixture from this global token count on
  std::vector<DataSource> sources;
};

struct LoaderOptions {
  std::vector<DataStage> stages;  // at least one; the first starts at 0 tokens
  std::string split = "train";    // "train" or "val"
  int64_t batch = 1, seq = 0;     // B, T (per rank)
  uint64_t seed = 0;
  int rank = 0, world = 1;        // data-parallel slice: ranks see disjoint sequences
  bool shuffle = true;            // seeded sequence-level permutation per epoch
  bool loop = true;               // false: next() returns an OutOfRange status after one pass (validation)
  bool prefetch = true;           // a background thread prepares the next batch
  bool verify = true;             // open(): hash and range-check every shard byte (else headers only)
};

struct Batch {
  int64_t B = 0, T = 0;
  std::vector<int32_t> tokens, targets, doc_ids, positions;  // each B*T, row-major
};

class Loader {
 public:
  // Errors: kInvalidArgument (options, naming the field), kNotFound / kDataLoss (datasets, naming the
  // file), kFailedPrecondition (sources that disagree on the tokenizer, or too few tokens for one
  // batch of B·world windows).
  static StatusOr<std::unique_ptr<Loader>> open(const LoaderOptions& options);
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  // The next batch of this rank. kOutOfRange after one pass with loop = false; kDataLoss naming the
  // shard and offset if an id is outside the vocabulary (possible only with verify = false).
  Status next(Batch* batch);
  // Everything needed to resume exactly (epoch, position, RNG, stage, per-source state).
  nlohmann::json cursor() const;
  // After this, next() yields exactly what it would have. kInvalidArgument for a malformed cursor,
  // kFailedPrecondition for one saved with other data, seq, batch, world, seed, shuffle or split.
  Status restore(const nlohmann::json& cursor);

  int64_t vocab_size() const;
  int32_t eos_id() const;
  int64_t tokens_seen() const;  // global tokens consumed by all ranks so far (drives stages)
  int64_t batches_seen() const;  // batches next() has returned on this rank
  int current_stage() const;     // index into options.stages of the stage of the last batch

  struct Impl;

 private:
  explicit Loader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace lmt::data
