// Saving and loading a training state as a checkpoint directory: parameters, optimizer state,
// trainer state and recipe. The directory format, its manifest, verification, selection of the
// newest valid one, recovery and pruning are io/checkpoint_dir.h's (model-free); this file fills it.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "lmt/base/status.h"
#include "lmt/io/checkpoint_dir.h"
#include "lmt/model/params.h"
#include "lmt/tensor/tensor_view.h"

namespace lmt::train {

struct CheckpointData {
  const model::ParamLayout* layout = nullptr;
  const float* params = nullptr;  // layout->total_numel()
  Device params_device;           // where `params` lives (AsyncCheckpointer stages it to the host)
  std::vector<std::pair<std::string, TensorView>> optimizer_state;  // f32 tensors
  nlohmann::json trainer_state;
  std::string config_toml;
  // The dataset's tokenizer (a tokenizer.json, *.tiktoken file or GPT-2 directory), copied into
  // step_XXXXXXXX/tokenizer/ (io::kCheckpointTokenizerDir); "" copies nothing.
  std::string tokenizer_path;
};

// Writes `checkpoints_dir`/step_XXXXXXXX atomically (creating checkpoints_dir if needed). Refuses
// to replace an existing committed checkpoint of the same step (kFailedPrecondition). A save that
// fails leaves no step_XXXXXXXX and no step_XXXXXXXX.tmp behind.
Status save_checkpoint(const std::string& checkpoints_dir, int64_t step, const CheckpointData& data);

// Loads a verified checkpoint: params (layout.total_numel() f32; must match the layout exactly),
// optimizer state into the given views (each must be present in the file with the same numel),
// and returns trainer_state.json.
StatusOr<nlohmann::json> load_checkpoint(const std::string& step_dir, const model::ParamLayout& layout, float* params,
                                         const std::vector<std::pair<std::string, TensorView>>& optimizer_state);

}  // namespace lmt::train
