#include "lmt/train/async_checkpointer.h"

#include <exception>

#include "lmt/base/trace.h"

namespace lmt::train {

AsyncCheckpointer::~AsyncCheckpointer() { (void)wait(); }

Status AsyncCheckpointer::wait() {
  backend_.join_snapshots();  // the writer's fence may wait for it (Backend::snapshot_async)
  if (thread_.joinable()) thread_.join();
  Status s = result_;
  result_ = Status::Ok();
  return s;
}

Status AsyncCheckpointer::start(int64_t step, const CheckpointData& data) {
  LMT_RETURN_IF_ERROR(wait());
  LMT_TRACE_SCOPE("checkpoint");
  data_ = data;
  // Host staging buffers (page-locked on a GPU), allocated at the first save (and again only if a
  // size changes). The copies into them are snapshots (Backend::snapshot_async): they start behind
  // the step that just ended and run beside the next one, whose optimizer step waits for them
  // (StepEngine::apply_update joins them); the writer waits for them (the fence), the training
  // thread does not.
  auto staged = [this](Tensor& buf, const Shape& shape) -> const Tensor& {
    if (!buf.view().present() || buf.shape() != shape) buf = Tensor(shape, DType::kF32, backend_.staging_allocator());
    return buf;
  };
  const int64_t n = data.layout->total_numel();
  backend_.snapshot_async(staged(params_, Shape{n}),
                          TensorView(const_cast<float*>(data.params), Shape{n}, DType::kF32, data.params_device));
  data_.params = params_.as<float>();
  data_.params_device = Device::host();
  state_.resize(data.optimizer_state.size());
  for (size_t i = 0; i < data.optimizer_state.size(); ++i) {
    const TensorView& v = data.optimizer_state[i].second;
    LMT_CHECK(v.dtype() == DType::kF32) << "optimizer state " << data.optimizer_state[i].first << " is " << v.to_string();
    backend_.snapshot_async(staged(state_[i], v.shape()), v);
    data_.optimizer_state[i].second = state_[i].view();
  }
  auto save = [this, step, snapshot = backend_.fence()] {
    try {  // an exception must not escape the thread (std::terminate): it becomes the save's error
      snapshot.wait();
      result_ = train::save_checkpoint(dir_, step, data_);
      if (result_.ok()) result_ = io::prune_checkpoints(dir_, keep_);
    } catch (const std::exception& e) {
      result_ = Internal("saving checkpoint " + io::checkpoint_name(step) + " in " + dir_ + " failed: " + e.what(),
                         "the previous checkpoints are intact");
    }
  };
  if (async_) {
    thread_ = std::thread(save);
    return Status::Ok();
  }
  backend_.join_snapshots();  // this thread waits for the fence itself
  save();
  return wait();
}

}  // namespace lmt::train
