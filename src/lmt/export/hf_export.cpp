#include "lmt/export/hf_export.h"

namespace lmt::exporter {

StatusOr<ExportDType> parse_export_dtype(const std::string& name) {
  if (name == "f32") return ExportDType::kF32;
  if (name == "bf16") return ExportDType::kBf16;
  if (name == "f16") return ExportDType::kF16;
  if (name == "q8_0") return ExportDType::kQ8_0;
  return InvalidArgument("unknown export dtype '" + name + "'", "use f32, bf16, f16 or q8_0 (q8_0: GGUF only)");
}

const char* export_dtype_name(ExportDType d) {
  switch (d) {
    case ExportDType::kF32: return "f32";
    case ExportDType::kBf16: return "bf16";
    case ExportDType::kF16: return "f16";
    case ExportDType::kQ8_0: return "q8_0";
  }
  return "?";
}

Status export_hf(const ExportModel&, const std::string&, ExportDType) {
  return Unimplemented("export to Hugging Face is not implemented yet", "issue #16");
}

}  // namespace lmt::exporter
