// AsyncCheckpointer: saves checkpoints in a background thread while training continues.
//
// start() snapshots everything it needs (parameters, optimizer state, trainer state) into buffers it
// owns; the thread then writes the checkpoint (train/checkpoint.h) and prunes old ones. At most one
// save is in flight: start() and wait() first wait for the previous one, and report its error if it
// failed. Host data is copied at once. Data in the backend's memory is taken with its
// snapshot_async (kernels/backend.h) into host buffers from its staging allocator (page-locked on a
// GPU), reused from one save to the next: on a GPU the copies run on a copy stream behind the step
// that just ended and beside the next one's forward and backward, and the writer thread waits for
// them (a fence). So nothing may write the parameters or optimizer state until the snapshot is
// joined: StepEngine::apply_update joins it before the optimizer step, and wait() joins it before
// blocking on the writer.
#pragma once

#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "lmt/kernels/backend.h"
#include "lmt/tensor/tensor.h"
#include "lmt/train/checkpoint.h"

namespace lmt::train {

class AsyncCheckpointer {
 public:
  // `backend` (the one the model runs on) must outlive the checkpointer.
  AsyncCheckpointer(std::string checkpoints_dir, int64_t keep, bool async, kernels::Backend& backend)
      : dir_(std::move(checkpoints_dir)), keep_(keep), async_(async), backend_(backend) {}
  ~AsyncCheckpointer();
  AsyncCheckpointer(const AsyncCheckpointer&) = delete;
  AsyncCheckpointer& operator=(const AsyncCheckpointer&) = delete;

  // Waits for the previous save (returning its error, if any), snapshots `data`, and saves it
  // (in the background when async, else before returning).
  Status start(int64_t step, const CheckpointData& data);
  // Waits for the save in flight; its status.
  Status wait();
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  int64_t keep_;
  bool async_;
  kernels::Backend& backend_;
  std::thread thread_;
  Status result_;
  // The snapshot the thread writes.
  Tensor params_;
  std::vector<Tensor> state_;
  CheckpointData data_;
};

}  // namespace lmt::train
