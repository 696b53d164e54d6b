// Export: a trained model leaves lmtrain as a Hugging Face directory (hf_export.h) or a GGUF file
// for llama.cpp (gguf_export.h). Both take the same description of the model, whatever it was
// loaded from (an lmtrain checkpoint or run, or a Hugging Face directory).
#pragma once

#include <string>

#include "lmt/base/status.h"
#include "lmt/model/config.h"
#include "lmt/model/params.h"

namespace lmt::exporter {

struct ExportModel {
  model::ModelConfig config;
  const model::ParamLayout* layout = nullptr;  // laid out for `config`
  const float* params = nullptr;               // layout->total_numel() f32 master weights
  std::string tokenizer_path;                  // the model's tokenizer ("" when none is known)
  std::string source;                          // where the weights came from (for messages, metadata)
};

// The element type of the written weights. q8_0 (blocks of 32 int8 with one f16 scale) is GGUF only.
enum class ExportDType { kF32, kBf16, kF16, kQ8_0 };

StatusOr<ExportDType> parse_export_dtype(const std::string& name);  // "f32" | "bf16" | "f16" | "q8_0"
const char* export_dtype_name(ExportDType d);

}  // namespace lmt::exporter
