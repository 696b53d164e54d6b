#include "lmt/data/loader.h"

#include <utility>

#include "lmt/data/loader_impl.h"

namespace lmt::data {
namespace {

Status check_options(const LoaderOptions& o) {
  const char* hint = "check the data section of the run configuration";
  if (o.split != "train" && o.split != "val")
    return InvalidArgument("loader split '" + o.split + "' is unknown", "use train or val");
  if (o.batch < 1) return InvalidArgument("loader batch " + std::to_string(o.batch) + " must be at least 1", hint);
  if (o.seq < 1) return InvalidArgument("loader seq " + std::to_string(o.seq) + " must be at least 1", hint);
  if (o.world < 1) return InvalidArgument("loader world " + std::to_string(o.world) + " must be at least 1", hint);
  if (o.rank < 0 || o.rank >= o.world)
    return InvalidArgument("loader rank " + std::to_string(o.rank) + " is outside [0, " + std::to_string(o.world) + ")",
                           hint);
  return Status::Ok();
}

// The window's ids must be inside the vocabulary before they index an embedding table. Free when
// the shards were verified at open(); the only guard when they were not.
Status check_window(const Dataset& d, int64_t start, const std::vector<int32_t>& window, int64_t vocab) {
  for (size_t i = 0; i < window.size(); ++i) {
    if (static_cast<uint32_t>(window[i]) < static_cast<uint64_t>(vocab)) continue;
    auto [shard, offset] = d.locate(start + static_cast<int64_t>(i));
    return DataLoss("shard " + shard->path() + ": token id " + std::to_string(static_cast<uint32_t>(window[i])) +
                        " at offset " + std::to_string(offset) + " is outside the vocabulary [0, " +
                        std::to_string(vocab) + ")",
                    "the shard is corrupt; `lmtrain data info --verify` checks every shard of a dataset");
  }
  return Status::Ok();
}

}  // namespace

StatusOr<std::unique_ptr<Loader>> Loader::open(const LoaderOptions& options) {
  LMT_RETURN_IF_ERROR(check_options(options));
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  LMT_ASSIGN_OR_RETURN(impl->plan, plan_mixture(options.stages));
  const int64_t T = options.seq, group = options.batch * options.world;
  const Verify verify = options.verify ? Verify::kFull : Verify::kHeader;
  for (size_t i = 0; i < impl->plan.paths.size(); ++i) {
    const std::string& path = impl->plan.paths[i];
    LMT_ASSIGN_OR_RETURN(std::unique_ptr<Dataset> d, Dataset::open(path, options.split, verify));
    if (i == 0) {
      impl->vocab_size = d->vocab_size();
      impl->eos_id = d->eos_id();
    } else {
      const Dataset& first = *impl->sources[0].data;
      if (d->vocab_size() != first.vocab_size() || d->eos_id() != first.eos_id() ||
          d->manifest().tokenizer_fingerprint != first.manifest().tokenizer_fingerprint)
        return FailedPrecondition("datasets " + first.dir() + " and " + path + " were tokenised differently (vocab " +
                                      std::to_string(first.vocab_size()) + " vs " + std::to_string(d->vocab_size()) +
                                      ", tokenizer " + first.manifest().tokenizer_fingerprint + " vs " +
                                      d->manifest().tokenizer_fingerprint + ")",
                                  "a mixture needs datasets prepared with the same tokenizer");
    }
    const int64_t windows = (d->token_count() - 1) / T;
    const int64_t needed = options.shuffle ? group : options.world;
    if (windows < needed)
      return FailedPrecondition("dataset " + path + " (" + options.split + ") has " + std::to_string(d->token_count()) +
                                    " tokens: " + std::to_string(windows) + " windows of seq+1 = " +
                                    std::to_string(T + 1) + ", fewer than the " + std::to_string(needed) +
                                    (options.shuffle ? " rows of one global batch (batch × world)" : " ranks"),
                                "use a shorter seq or a smaller batch, or prepare more text");
    const uint64_t key = mix64(options.seed ^ mix64(d->content_id()));
    SequenceOrder order(windows, group, options.shuffle, key);
    const int64_t rows = order.positions_per_epoch() / options.world;
    impl->sources.push_back(LoaderSource{std::move(d), order, rows});
  }
  impl->consumer.rng = Rng(mix64(options.seed ^ 0x6d69787475726521ull)).state();
  impl->consumer.sources.resize(impl->sources.size());
  std::unique_ptr<Loader> loader(new Loader(std::move(impl)));
  if (options.prefetch) loader->impl_->start_prefetch();
  return loader;
}

Loader::Loader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Loader::~Loader() { impl_->stop_prefetch(); }

Status Loader::Impl::produce(LoaderState* s, Batch* out, std::vector<int32_t>* window) const {
  const int64_t B = options.batch, T = options.seq;
  LoaderState next = *s;
  next.stage = active_stage(plan, next.tokens_seen, next.stage);
  const StagePlan& stage = plan.stages[next.stage];
  out->B = B;
  out->T = T;
  for (auto* v : {&out->tokens, &out->targets, &out->doc_ids, &out->positions}) v->resize(B * T);
  window->resize(T + 1);
  Rng rng;
  rng.set_state(next.rng);
  for (int64_t b = 0; b < B; ++b) {
    const int src = draw_source(stage, rng.uniform());
    const LoaderSource& source = sources[src];
    LoaderState::Source& c = next.sources[src];
    if (c.row == source.rows_per_epoch) {
      if (!options.loop)
        return OutOfRange("one pass over " + source.data->dir() + " (" + options.split + ") is complete");
      ++c.epoch;
      c.row = 0;
    }
    const int64_t position = c.row * options.world + options.rank;
    const int64_t start = source.order.window(c.epoch, position) * T;
    ++c.row;
    source.data->read(start, T + 1, window->data());
    LMT_RETURN_IF_ERROR(check_window(*source.data, start, *window, vocab_size));
    const int32_t* w = window->data();
    int32_t* tokens = out->tokens.data() + b * T;
    int32_t* targets = out->targets.data() + b * T;
    int32_t* doc_ids = out->doc_ids.data() + b * T;
    int32_t* positions = out->positions.data() + b * T;
    int32_t doc = 0, pos = 0;
    for (int64_t t = 0; t < T; ++t) {
      tokens[t] = w[t];
      targets[t] = w[t + 1];
      doc_ids[t] = doc;
      positions[t] = pos;
      if (w[t] == eos_id) {
        ++doc;
        pos = 0;
      } else {
        ++pos;
      }
    }
  }
  next.rng = rng.state();
  next.batches += 1;
  next.tokens_seen += B * T * options.world;
  *s = std::move(next);
  return Status::Ok();
}

// ---- prefetch --------------------------------------------------------------------------------------

void Loader::Impl::start_prefetch() {
  producer = consumer;
  stop = ready = failed = busy = false;
  thread = std::thread([this] { prefetch_loop(); });
}

void Loader::Impl::stop_prefetch() {
  if (!thread.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mu);
    stop = true;
  }
  cv.notify_all();
  thread.join();
}

void Loader::Impl::prefetch_loop() {
  std::unique_lock<std::mutex> lock(mu);
  for (;;) {
    cv.wait(lock, [this] { return stop || (!ready && !failed && !busy); });
    if (stop) return;
    busy = true;
    LoaderState s = producer;
    lock.unlock();
    Status status = produce(&s, &work_batch, &producer_window);
    lock.lock();
    busy = false;
    if (stop) return;
    ready_status = status;
    if (status.ok()) {
      std::swap(ready_batch, work_batch);
      producer = s;
      ready_state = std::move(s);
    } else {
      failed = true;
    }
    ready = true;
    cv.notify_all();
  }
}

// ---- public API ------------------------------------------------------------------------------------

Status Loader::next(Batch* batch) {
  Impl& m = *impl_;
  if (!m.options.prefetch) return m.produce(&m.consumer, batch, &m.consumer_window);
  std::unique_lock<std::mutex> lock(m.mu);
  if (!m.ready && !m.busy) {
    // The producer has not started on this batch (its thread got no CPU yet, likely when the
    // training step keeps every core busy): building it here takes microseconds, waiting for the
    // scheduler can take milliseconds.
    m.busy = true;
    LoaderState s = m.producer;
    lock.unlock();
    Status status = m.produce(&s, batch, &m.consumer_window);
    lock.lock();
    m.busy = false;
    if (status.ok()) {
      m.producer = s;
      m.consumer = std::move(s);
    } else {
      m.failed = m.ready = true;  // sticky, as if the producer had hit it
      m.ready_status = status;
    }
    lock.unlock();
    m.cv.notify_all();
    return status;
  }
  m.cv.wait(lock, [&m] { return m.ready; });
  if (!m.ready_status.ok()) return m.ready_status;  // stays ready: errors are sticky
  std::swap(*batch, m.ready_batch);  // the caller's old buffers go back to the producer
  m.consumer = m.ready_state;
  m.ready = false;
  lock.unlock();
  m.cv.notify_all();
  return Status::Ok();
}

nlohmann::json Loader::cursor() const { return impl_->to_json(impl_->consumer); }

Status Loader::restore(const nlohmann::json& cursor) {
  LMT_ASSIGN_OR_RETURN(LoaderState s, impl_->from_json(cursor));
  impl_->stop_prefetch();
  impl_->consumer = std::move(s);
  if (impl_->options.prefetch) impl_->start_prefetch();
  return Status::Ok();
}

int64_t Loader::vocab_size() const { return impl_->vocab_size; }
int32_t Loader::eos_id() const { return impl_->eos_id; }
int64_t Loader::tokens_seen() const { return impl_->consumer.tokens_seen; }
int64_t Loader::batches_seen() const { return impl_->consumer.batches; }
int Loader::current_stage() const { return impl_->consumer.stage; }

}  // namespace lmt::data
