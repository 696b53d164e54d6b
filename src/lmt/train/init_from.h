// model.init_from: a new run starts from existing weights (docs/INTEROP.md "Starting from HF weights").
#pragma once

#include <string>

#include "lmt/base/status.h"
#include "lmt/model/params.h"

namespace lmt::train {

// Fills params (layout.total_numel() f32) from `path`: a Hugging Face directory (config.json +
// model.safetensors), an lmtrain checkpoint (step_XXXXXXXX, verified against its manifest) or a
// run directory (its newest valid checkpoint). Every tensor the layout names must be there with
// the same shape: a mismatch names the tensor and both shapes (InvalidArgument, "model.init_from").
// Padded vocabulary rows keep their values. Differences between `path`'s own config and the
// layout's that shapes cannot show (rope_theta, norm_eps, ...) are logged as warnings.
Status init_params_from(const std::string& path, const model::ParamLayout& layout, float* params);

}  // namespace lmt::train
