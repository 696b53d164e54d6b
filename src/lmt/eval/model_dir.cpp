#include "lmt/eval/model_dir.h"

#include <filesystem>
#include <fstream>

#include "lmt/base/log.h"
#include "lmt/config/config.h"
#include "lmt/data/manifest.h"
#include "lmt/io/checkpoint_dir.h"
#include "lmt/io/safetensors.h"
#include "lmt/model/config_json.h"
#include "lmt/model/hf_checkpoint.h"

namespace lmt::eval {
namespace fs = std::filesystem;
namespace {

// The tokenizer of the dataset a checkpoint's run trained on, or "".
std::string tokenizer_of_checkpoint(const std::string& step_dir) {
  auto cfg = config::Config::from_toml_file(step_dir + "/config.toml");
  if (!cfg.ok() || !cfg->has("data.path")) return "";
  auto manifest = data::read_manifest(cfg->get_string("data.path"));
  return manifest.ok() ? manifest->tokenizer_path : "";
}

// balance = bias_update: the selection bias trained beside the weights, so that the loaded model
// routes its tokens as the run did (without it, to other experts).
Status load_router_bias(const std::string& step_dir, model::Transformer& m) {
  const TensorView first = m.router_bias(0);
  if (!first.present()) return Status::Ok();
  const std::string path = step_dir + "/optimizer.safetensors";
  LMT_ASSIGN_OR_RETURN(io::SafetensorsFile file, io::SafetensorsFile::open(path));
  const Status s = file.read_f32(io::kCheckpointRouterBias, first.as<float>(),
                                 m.config().n_layers * m.config().moe.num_experts);
  if (!s.ok())
    return DataLoss(path + ": the router bias '" + std::string(io::kCheckpointRouterBias) +
                        "' of this bias_update MoE model cannot be read: " + s.message(),
                    "the checkpoint is damaged or from another model; pick another step_XXXXXXXX");
  m.router_bias_written();
  return Status::Ok();
}

}  // namespace

StatusOr<LoadedModel> load_model_dir(const std::string& dir_in, kernels::Backend& backend) {
  std::string dir = dir_in;
  if (fs::exists(dir + "/checkpoints") && !fs::exists(dir + "/model.safetensors")) {  // a run directory
    std::vector<std::string> skipped;
    LMT_ASSIGN_OR_RETURN(dir, io::find_latest_checkpoint(dir + "/checkpoints", &skipped));
    for (const auto& s : skipped) {  // never silently an older model
      LMT_LOG(WARNING) << "skipping damaged checkpoint " << s << "; using " << dir;
    }
  }
  LoadedModel out;
  out.source = dir;
  model::ModelConfig config;
  const bool lmtrain_checkpoint = fs::exists(dir + "/model.json");
  if (lmtrain_checkpoint) {
    LMT_RETURN_IF_ERROR(io::verify_checkpoint(dir));
    std::ifstream in(dir + "/model.json");
    nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
    if (j.is_discarded()) return DataLoss(dir + "/model.json is not JSON", "the checkpoint is damaged");
    LMT_ASSIGN_OR_RETURN(config, model::model_config_from_json(j, dir + "/model.json"));
    out.tokenizer_path = io::checkpoint_tokenizer_path(dir);  // the copy the checkpoint carries
    if (out.tokenizer_path.empty()) out.tokenizer_path = tokenizer_of_checkpoint(dir);  // older checkpoints
  } else if (fs::exists(dir + "/config.json")) {  // a Hugging Face directory
    LMT_ASSIGN_OR_RETURN(config, model::config_from_hf(dir + "/config.json"));
    if (fs::exists(dir + "/tokenizer.json")) out.tokenizer_path = dir + "/tokenizer.json";
  } else {
    return NotFound(dir + " holds neither an lmtrain checkpoint (model.json) nor a Hugging Face model (config.json)",
                    "pass a run directory, RUN/checkpoints/step_XXXXXXXX, or a directory with config.json + model.safetensors");
  }
  // Weights and gradients (a Transformer holds both) must fit before anything is allocated: a config
  // with n_layers = 1e8 is refused here instead of swapping for minutes.
  LMT_RETURN_IF_ERROR(model::model_memory_check(config, 8, 0, "loading " + dir));
  out.model = std::make_unique<model::Transformer>(config, backend);
  const TensorView params = out.model->params();
  // On a device backend the weights are read into host memory, then copied to the device once.
  Tensor host;
  if (!params.device().is_host()) host = Tensor(params.shape(), DType::kF32);
  float* into = host.view().present() ? host.as<float>() : params.as<float>();
  LMT_RETURN_IF_ERROR(model::load_hf_weights(dir + "/model.safetensors", out.model->layout(), into));
  if (host.view().present()) backend.copy(params, host.view());
  if (lmtrain_checkpoint) LMT_RETURN_IF_ERROR(load_router_bias(dir, *out.model));
  return out;
}

StatusOr<std::unique_ptr<data::Tokenizer>> load_model_tokenizer(const LoadedModel& loaded, const std::string& explicit_path) {
  const std::string path = explicit_path.empty() ? loaded.tokenizer_path : explicit_path;
  if (path.empty())
    return NotFound("no tokenizer is known for " + loaded.source, "pass --tokenizer PATH (a tokenizer.json, *.tiktoken or GPT-2 directory)");
  auto t = data::load_tokenizer(path);
  if (!t.ok()) return t.status().WithContext("tokenizer of " + loaded.source);
  return t;
}

}  // namespace lmt::eval
