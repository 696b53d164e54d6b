// Export to a Hugging Face transformers directory (docs/INTEROP.md): config.json, generation_config.json,
// model.safetensors (sharded with an index above a size limit), tokenizer.json, tokenizer_config.json
// and special_tokens_map.json, loadable by AutoModelForCausalLM / AutoTokenizer with no extra code.
#pragma once

#include <cstdint>
#include <string>

#include "lmt/export/export_model.h"
#include "lmt/model/hf_checkpoint.h"

namespace lmt::exporter {

// Writes `out_dir` atomically (it must not exist, or be empty). kQ8_0 is refused. Layouts HF has no
// architecture for are refused with an error naming the feature (model::config_to_hf).
// Weights above max_shard_bytes are split into shards with model.safetensors.index.json.
// Tokenizer (m.tokenizer_path): a tokenizer.json (or a directory holding one) is copied and gets a
// tokenizer_config.json and special_tokens_map.json; GPT-2 encoder.json/vocab.bpe directories and
// .tiktoken files are refused (kUnimplemented: no converter yet; export with no tokenizer instead).
// "" (none known): the model files are written without tokenizer files and a warning is logged;
// bos/eos ids then come from m.source's config.json when it has one.
Status export_hf(const ExportModel& m, const std::string& out_dir, ExportDType dtype,
                 int64_t max_shard_bytes = model::kDefaultMaxShardBytes);

// "5GB", "500MB", "64KiB", "123" (bytes) -> bytes. KB/MB/GB are powers of 1000 (as transformers'
// max_shard_size), KiB/MiB/GiB powers of 1024.
StatusOr<int64_t> parse_byte_size(const std::string& text);

}  // namespace lmt::exporter
