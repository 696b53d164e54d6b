#include "lmt/train/async_checkpointer.h"

#include <cstring>
#include <exception>

#include "lmt/base/trace.h"

namespace lmt::train {

AsyncCheckpointer::~AsyncCheckpointer() { (void)wait(); }

Status AsyncCheckpointer::wait() {
  if (thread_.joinable()) thread_.join();
  Status s = result_;
  result_ = Status::Ok();
  return s;
}

Status AsyncCheckpointer::start(int64_t step, const CheckpointData& data) {
  LMT_RETURN_IF_ERROR(wait());
  LMT_TRACE_SCOPE("checkpoint");
  data_ = data;
  const int64_t n = data.layout->total_numel();
  params_.assign(data.params, data.params + n);
  data_.params = params_.data();
  state_.resize(data.optimizer_state.size());
  for (size_t i = 0; i < data.optimizer_state.size(); ++i) {
    const TensorView& v = data.optimizer_state[i].second;
    state_[i].assign(v.as<float>(), v.as<float>() + v.numel());
    data_.optimizer_state[i].second = TensorView(state_[i].data(), v.shape(), DType::kF32);
  }
  auto save = [this, step] {
    try {  // an exception must not escape the thread (std::terminate): it becomes the save's error
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
  save();
  return wait();
}

}  // namespace lmt::train
