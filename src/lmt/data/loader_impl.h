// Internal to lmt_data: the Loader's state, shared by loader.cpp (batches, prefetch thread) and
// loader_cursor.cpp (cursor to and from JSON). Not part of the public API.
//
// Threading: `consumer` belongs to the calling thread. With prefetch, `producer`, `ready*`, `failed`,
// `busy` and `stop` are guarded by `mu`; the background thread builds a batch from a copy of
// `producer` outside the lock and publishes it with the state after it, which next() then adopts as
// `consumer`. When next() finds the thread idle (not yet scheduled), it builds the batch itself;
// `busy` keeps the two from ever building from the same state.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "lmt/base/rng.h"
#include "lmt/data/dataset.h"
#include "lmt/data/loader.h"
#include "lmt/data/mixture.h"
#include "lmt/data/sequence_order.h"

namespace lmt::data {

struct LoaderSource {
  std::unique_ptr<Dataset> data;
  SequenceOrder order;
  int64_t rows_per_epoch;  // per rank: positions_per_epoch / world
};

struct LoaderState {
  struct Source {
    int64_t epoch = 0;
    int64_t row = 0;  // rows this rank has read from the source in the current epoch
  };
  int64_t batches = 0;
  int64_t tokens_seen = 0;  // global: batches · B · T · world
  int stage = 0;
  Rng::State rng{};
  std::vector<Source> sources;
};

struct Loader::Impl {
  LoaderOptions options;
  MixturePlan plan;
  std::vector<LoaderSource> sources;  // parallel to plan.paths
  int64_t vocab_size = 0;
  int32_t eos_id = 0;

  LoaderState consumer;

  // Builds the batch after state *s into *out and advances *s; *s is untouched on error.
  Status produce(LoaderState* s, Batch* out, std::vector<int32_t>* window) const;

  // Prefetch (see the header comment).
  void start_prefetch();
  void stop_prefetch();
  void prefetch_loop();
  std::thread thread;
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;
  bool ready = false;   // a result (batch or error) waits for next()
  bool failed = false;  // the producer hit an error; it stays until restore()
  bool busy = false;    // a batch is being built from `producer` (by the thread or by next() itself)
  LoaderState producer, ready_state;
  Status ready_status;
  Batch ready_batch, work_batch;
  std::vector<int32_t> producer_window, consumer_window;

  // loader_cursor.cpp
  nlohmann::json to_json(const LoaderState& s) const;
  StatusOr<LoaderState> from_json(const nlohmann::json& j) const;
};

}  // namespace lmt::data
