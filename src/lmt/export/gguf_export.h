// Export to one GGUF v3 file for llama.cpp (docs/INTEROP.md): the architecture metadata, the
// tokenizer (vocabulary, merges or scores, token types, special ids, pre-tokenizer name) and the
// weights in f32, f16, bf16 or q8_0.
#pragma once

#include <string>

#include "lmt/export/export_model.h"

namespace lmt::exporter {

// Writes `out_path` atomically; never replaces an existing file.
Status export_gguf(const ExportModel& m, const std::string& out_path, ExportDType dtype);

}  // namespace lmt::exporter
