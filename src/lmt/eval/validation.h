// Validation loss and perplexity of a model on the "val" split of a prepared dataset (the shards
// `lmtrain data prepare` writes): one unshuffled pass of B×T windows, as the trainer's own
// validation reads them (data/loader.h), so the numbers are comparable with metrics.jsonl.
// The model is prepare()d for (B, T) and left so. Not thread-safe (one model, one caller).
#pragma once

#include <cstdint>
#include <string>

#include "lmt/base/status.h"
#include "lmt/model/transformer.h"

namespace lmt::eval {

struct ValidationOptions {
  int64_t batch = 8;
  int64_t seq = 0;              // T (0: min(1024, the model's max_seq_len))
  int64_t max_batches = 0;      // 0: the whole split
  bool doc_masking = true;      // attend within documents only (the recipe default)
  bool reset_positions = false;  // positions restart at each document (data.reset_positions)
  DType compute = DType::kF32;
};

struct ValidationResult {
  double loss = 0;   // mean next-token NLL (nats) over every target of the pass
  double ppl = 0;    // exp(loss)
  int64_t tokens = 0, batches = 0;
  double seconds = 0, tokens_per_s = 0;
};

// Errors: the loader's (missing dataset, a split too small for one batch: kFailedPrecondition), and
// kInvalidArgument for a dataset whose vocabulary is larger than the model's.
StatusOr<ValidationResult> evaluate_validation(model::Transformer& model, const std::string& dataset_dir,
                                               const ValidationOptions& options = {});

}  // namespace lmt::eval
