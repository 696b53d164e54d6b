#include "lmt/train/init_from.h"

#include <filesystem>
#include <fstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "lmt/base/log.h"
#include "lmt/io/checkpoint_dir.h"
#include "lmt/model/config_json.h"
#include "lmt/model/hf_checkpoint.h"

namespace lmt::train {
namespace fs = std::filesystem;

namespace {

// `path`'s own config, when it has one that parses (for the warnings only).
StatusOr<model::ModelConfig> own_config(const std::string& dir) {
  if (fs::exists(dir + "/model.json")) {
    std::ifstream in(dir + "/model.json");
    nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
    if (j.is_discarded()) return DataLoss(dir + "/model.json is not JSON");
    return model::model_config_from_json(j, dir + "/model.json");
  }
  return model::config_from_hf(dir + "/config.json");
}

void warn_differences(const std::string& dir, const model::ModelConfig& want) {
  auto theirs = own_config(dir);
  if (!theirs.ok()) return;
  const nlohmann::json a = model::model_config_to_json(want), b = model::model_config_to_json(*theirs);
  for (const auto& [key, value] : a.items()) {
    if (key == "name" || key == "init_std" || key == "scaled_residual_init" || key == "vocab_pad_to") continue;
    if (b.contains(key) && b[key] != value) {
      LMT_LOG(WARNING) << "model.init_from: " << dir << " has " << key << " = " << b[key].dump() << ", this run uses "
                       << value.dump();
    }
  }
}

}  // namespace

Status init_params_from(const std::string& path, const model::ParamLayout& layout, float* params) {
  std::error_code ec;
  if (!fs::is_directory(path, ec))
    return NotFound("model.init_from: " + path + " is not a directory",
                    "give a Hugging Face model directory, a run directory or RUN/checkpoints/step_XXXXXXXX");
  std::string dir = path;
  if (fs::exists(dir + "/checkpoints") && !fs::exists(dir + "/model.safetensors")) {  // a run directory
    std::vector<std::string> skipped;
    auto latest = io::find_latest_checkpoint(dir + "/checkpoints", &skipped);
    if (!latest.ok()) return latest.status().WithContext("model.init_from");
    for (const auto& s : skipped) LMT_LOG(WARNING) << "model.init_from: skipping damaged checkpoint " << s;
    dir = *latest;
  }
  if (fs::exists(dir + "/model.json")) {
    Status v = io::verify_checkpoint(dir);
    if (!v.ok()) return v.WithContext("model.init_from");
  } else if (fs::exists(dir + "/model.safetensors.index.json") && !fs::exists(dir + "/model.safetensors")) {
    return Unimplemented("model.init_from: " + dir + " holds sharded weights (model.safetensors.index.json)",
                         "merge the shards into one model.safetensors (e.g. save_pretrained with a larger max_shard_size)");
  } else if (!fs::exists(dir + "/config.json")) {
    return NotFound("model.init_from: " + dir + " holds neither an lmtrain checkpoint (model.json) nor a Hugging Face model (config.json)",
                    "give a Hugging Face model directory, a run directory or RUN/checkpoints/step_XXXXXXXX");
  }
  warn_differences(dir, layout.config());
  Status s = model::load_hf_weights(dir + "/model.safetensors", layout, params);
  if (!s.ok())
    return Status(s.code(), "model.init_from: " + s.message(),
                  "the model.* keys (or preset) must describe the same shapes as " + dir +
                      "'s weights; for a Hugging Face model, copy its config.json values into [model]");
  LMT_LOG(INFO) << "model.init_from: parameters loaded from " << dir;
  return Status::Ok();
}

}  // namespace lmt::train
