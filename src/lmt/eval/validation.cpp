#include "lmt/eval/validation.h"

#include <algorithm>
#include <cmath>

#include "lmt/base/timer.h"
#include "lmt/data/loader.h"

namespace lmt::eval {

StatusOr<ValidationResult> evaluate_validation(model::Transformer& model, const std::string& dataset_dir,
                                               const ValidationOptions& options) {
  const int64_t T = options.seq > 0 ? options.seq : std::min<int64_t>(1024, model.config().max_seq_len);
  if (T > model.config().max_seq_len || options.batch <= 0)
    return InvalidArgument("validation needs --micro-batch > 0 and a sequence length in [1, " + std::to_string(model.config().max_seq_len) +
                           "], got batch " + std::to_string(options.batch) + ", seq " + std::to_string(T));
  // Before the loader (whose buffers are batch x seq too) and the activation arena.
  model::RunOptions run;
  run.compute = model.master() == DType::kF64 ? DType::kF64 : options.compute;
  LMT_RETURN_IF_ERROR(model::activation_memory_check(
      model.config(), options.batch, T, run, 0,
      "validation batches of " + std::to_string(options.batch) + " x " + std::to_string(T) + " tokens", "lower --micro-batch or --seq-len"));
  data::LoaderOptions lo;
  lo.stages = {data::DataStage{0, {data::DataSource{dataset_dir, 1.0}}}};
  lo.split = "val";
  lo.batch = options.batch;
  lo.seq = T;
  lo.shuffle = false;
  lo.loop = false;
  lo.prefetch = false;
  auto loader = data::Loader::open(lo);
  if (!loader.ok()) return loader.status().WithContext("validation data " + dataset_dir);
  if ((*loader)->vocab_size() > model.config().vocab_size)
    return InvalidArgument(dataset_dir + " was tokenised with a vocabulary of " + std::to_string((*loader)->vocab_size()) +
                               " ids but the model has " + std::to_string(model.config().vocab_size),
                           "evaluate on data prepared with the model's tokenizer");
  model.prepare(options.batch, T, run);
  Timer timer;
  ValidationResult r;
  double sum = 0;
  data::Batch b;
  while (options.max_batches <= 0 || r.batches < options.max_batches) {
    Status s = (*loader)->next(&b);
    if (s.code() == StatusCode::kOutOfRange) break;
    LMT_RETURN_IF_ERROR(s);
    // Every target of a validation window is real, so the mean of batch means is the token mean.
    sum += model.forward(b.tokens.data(), b.targets.data(), options.doc_masking ? b.doc_ids.data() : nullptr, false,
                         1.0f, options.reset_positions ? b.positions.data() : nullptr);
    ++r.batches;
  }
  if (r.batches == 0)
    return FailedPrecondition("the val split of " + dataset_dir + " has fewer tokens than one batch of " +
                                  std::to_string(options.batch) + "x" + std::to_string(T),
                              "lower --micro-batch / --seq-len, or prepare the data with a larger --val-fraction");
  r.loss = sum / static_cast<double>(r.batches);
  r.ppl = std::exp(r.loss);
  r.tokens = r.batches * options.batch * T;
  r.seconds = timer.seconds();
  r.tokens_per_s = r.seconds > 0 ? static_cast<double>(r.tokens) / r.seconds : 0;
  return r;
}

}  // namespace lmt::eval
