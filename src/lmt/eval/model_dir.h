// Loading a trained model for inference from a directory:
//   - an lmtrain checkpoint (RUN/checkpoints/step_XXXXXXXX): model.json + model.safetensors, verified
//     against its manifest; or a run directory (RUN/), meaning its newest valid checkpoint;
//   - a Hugging Face model directory: config.json + model.safetensors.
// The tokenizer: an explicit path wins; otherwise, for a checkpoint, the copy it carries
// (step_XXXXXXXX/tokenizer/, io::checkpoint_tokenizer_path), or for checkpoints written before
// that existed the tokenizer recorded in the manifest of the dataset the run trained on
// (config.toml's data.path). A HF directory's own
// tokenizer.json is used when present.
#pragma once

#include <memory>
#include <string>

#include "lmt/base/status.h"
#include "lmt/data/tokenizer/tokenizer.h"
#include "lmt/model/transformer.h"

namespace lmt::eval {

struct LoadedModel {
  std::unique_ptr<model::Transformer> model;  // parameters loaded, not yet prepare()d
  std::string source;                          // the directory the weights came from
  std::string tokenizer_path;                  // resolved tokenizer location ("" if none is known)
};

StatusOr<LoadedModel> load_model_dir(const std::string& dir, kernels::Backend& backend);

// Loads the tokenizer: `explicit_path` if given, else loaded.tokenizer_path; a clear error when
// neither is known ("pass --tokenizer").
StatusOr<std::unique_ptr<data::Tokenizer>> load_model_tokenizer(const LoadedModel& loaded,
                                                                 const std::string& explicit_path);

}  // namespace lmt::eval
