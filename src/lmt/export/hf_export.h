// Export to a Hugging Face transformers directory (docs/INTEROP.md): config.json, generation_config.json,
// model.safetensors (sharded with an index above a size limit), tokenizer.json, tokenizer_config.json
// and special_tokens_map.json, loadable by AutoModelForCausalLM / AutoTokenizer with no extra code.
#pragma once

#include <string>

#include "lmt/export/export_model.h"

namespace lmt::exporter {

// Writes `out_dir` atomically (it must not exist, or be empty). kQ8_0 is refused. Layouts HF has no
// architecture for are refused with an error naming the feature.
Status export_hf(const ExportModel& m, const std::string& out_dir, ExportDType dtype);

}  // namespace lmt::exporter
