#include "lmt/export/gguf_export.h"

namespace lmt::exporter {

Status export_gguf(const ExportModel&, const std::string&, ExportDType) {
  return Unimplemented("export to GGUF is not implemented yet", "issue #16");
}

}  // namespace lmt::exporter
