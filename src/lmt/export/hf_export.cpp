#include "lmt/export/hf_export.h"

#include <cctype>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "lmt/base/log.h"
#include "lmt/data/tokenizer/tokenizer.h"
#include "lmt/io/atomic_dir.h"
#include "lmt/io/atomic_file.h"

namespace lmt::exporter {
namespace fs = std::filesystem;
using nlohmann::json;

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

StatusOr<int64_t> parse_byte_size(const std::string& text) {
  size_t i = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
  const std::string digits = text.substr(0, i), unit = text.substr(i);
  const std::string hint = "e.g. 5GB, 500MB, 64KiB or a number of bytes";
  if (digits.empty() || digits.size() > 12) return InvalidArgument("'" + text + "' is not a size", hint);
  int64_t mult = 1;
  if (unit.empty() || unit == "B") mult = 1;
  else if (unit == "KB") mult = 1000;
  else if (unit == "MB") mult = 1000 * 1000;
  else if (unit == "GB") mult = 1000 * 1000 * 1000;
  else if (unit == "KiB") mult = int64_t{1} << 10;
  else if (unit == "MiB") mult = int64_t{1} << 20;
  else if (unit == "GiB") mult = int64_t{1} << 30;
  else return InvalidArgument("'" + text + "': unknown unit '" + unit + "'", hint);
  const int64_t n = std::stoll(digits);
  if (n <= 0) return InvalidArgument("'" + text + "' must be positive", hint);
  return n * mult;
}

namespace {

struct SpecialTokens {
  std::optional<int64_t> bos_id, eos_id;
  std::optional<std::string> bos, eos, unk;
};

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The tokenizer.json to copy for `path`, or an error for formats without one.
StatusOr<std::string> tokenizer_json_of(const std::string& path) {
  std::error_code ec;
  const std::string hint = "export without tokenizer files (--tokenizer none) and add a tokenizer.json by hand, "
                           "or train/prepare with a tokenizer.json";
  if (fs::is_directory(path, ec)) {
    if (fs::exists(fs::path(path) / "encoder.json", ec))
      return Unimplemented(path + " is a GPT-2 encoder.json/vocab.bpe tokenizer; HF export copies tokenizer.json files only",
                           hint);
    if (fs::exists(fs::path(path) / "tokenizer.json", ec)) return (fs::path(path) / "tokenizer.json").string();
    return NotFound(path + " holds no tokenizer.json", hint);
  }
  if (fs::path(path).extension() == ".json") return path;
  return Unimplemented(path + " is not a tokenizer.json (a tiktoken rank file?); HF export copies tokenizer.json files only", hint);
}

StatusOr<SpecialTokens> special_tokens(const data::Tokenizer& tok, const model::ModelConfig& c, const std::string& path) {
  if (tok.vocab_size() > c.vocab_size)
    return InvalidArgument("the tokenizer " + path + " has " + std::to_string(tok.vocab_size()) + " tokens, the model only " +
                               std::to_string(c.vocab_size),
                           "pass the tokenizer the model was trained with (--tokenizer)");
  SpecialTokens s;
  auto text = [&](int32_t id) { return tok.decode(std::span<const int32_t>(&id, 1)); };
  if (auto eos = tok.eos_id()) s.eos_id = *eos, s.eos = text(*eos);
  for (const char* b : {"<|begin_of_text|>", "<s>", "<|startoftext|>"})
    if (auto id = tok.token_id(b)) {
      s.bos_id = *id, s.bos = b;
      break;
    }
  if (!s.bos_id && s.eos_id) s.bos_id = s.eos_id, s.bos = s.eos;  // GPT-2's convention: one document separator
  if (tok.token_id("<unk>")) s.unk = "<unk>";
  return s;
}

Status write_tokenizer(const std::string& tmp, const std::string& path, const model::ModelConfig& c, SpecialTokens* s) {
  LMT_ASSIGN_OR_RETURN(std::string json_path, tokenizer_json_of(path));
  auto tok = data::load_tokenizer(json_path);
  if (!tok.ok())
    return Status(tok.status().code(), "the tokenizer to export cannot be loaded: " + tok.status().message(),
                  "pass --tokenizer PATH (the tokenizer the model was trained with), or --tokenizer none to export the model "
                  "files only");
  LMT_ASSIGN_OR_RETURN(*s, special_tokens(**tok, c, json_path));
  LMT_RETURN_IF_ERROR(io::write_file_atomically(tmp + "/tokenizer.json", read_text(json_path)));
  auto tok_or_null = [](const std::optional<std::string>& t) { return t ? json(*t) : json(nullptr); };
  json cfg = {{"tokenizer_class", "PreTrainedTokenizerFast"},
              {"bos_token", tok_or_null(s->bos)},
              {"eos_token", tok_or_null(s->eos)},
              {"unk_token", tok_or_null(s->unk)},
              {"pad_token", nullptr},
              {"model_max_length", c.max_seq_len},
              {"clean_up_tokenization_spaces", false}};
  LMT_RETURN_IF_ERROR(io::write_file_atomically(tmp + "/tokenizer_config.json", cfg.dump(2) + "\n"));
  json map = json::object();
  if (s->bos) map["bos_token"] = *s->bos;
  if (s->eos) map["eos_token"] = *s->eos;
  if (s->unk) map["unk_token"] = *s->unk;
  return io::write_file_atomically(tmp + "/special_tokens_map.json", map.dump(2) + "\n");
}

// bos/eos ids of a Hugging Face source directory's config.json, when the export has no tokenizer.
void ids_from_source(const std::string& source, SpecialTokens* s) {
  std::error_code ec;
  const std::string cfg = source + "/config.json";
  if (source.empty() || !fs::exists(cfg, ec)) return;
  json j = json::parse(read_text(cfg), nullptr, false);
  if (j.is_discarded() || !j.is_object()) return;
  if (j.contains("bos_token_id") && j["bos_token_id"].is_number_integer()) s->bos_id = j["bos_token_id"].get<int64_t>();
  if (j.contains("eos_token_id") && j["eos_token_id"].is_number_integer()) s->eos_id = j["eos_token_id"].get<int64_t>();
}

}  // namespace

Status export_hf(const ExportModel& m, const std::string& out_dir, ExportDType dtype, int64_t max_shard_bytes) {
  if (dtype == ExportDType::kQ8_0)
    return InvalidArgument("--dtype q8_0 is GGUF only", "use f32, bf16 or f16 for --format hf, or --format gguf for q8_0");
  std::error_code ec;
  if (fs::exists(out_dir, ec) && !(fs::is_directory(out_dir, ec) && fs::is_empty(out_dir, ec)))
    return FailedPrecondition(out_dir + " already exists and is not an empty directory", "an export never overwrites; pass a new --out");
  const std::string torch_dtype = dtype == ExportDType::kF32 ? "float32" : dtype == ExportDType::kBf16 ? "bfloat16" : "float16";
  LMT_ASSIGN_OR_RETURN(json config, model::config_to_hf(m.config, torch_dtype));
  LMT_ASSIGN_OR_RETURN(io::AtomicDirectory out, io::AtomicDirectory::create(out_dir, io::AtomicDirectory::Staging::kHidden));
  const std::string& tmp = out.tmp_path();
  SpecialTokens st;
  if (m.tokenizer_path.empty()) {
    LMT_LOG(WARNING) << "no tokenizer is known for " << m.source << ": " << out_dir
                     << " gets the model files only (AutoTokenizer will not load it; pass --tokenizer PATH to include one)";
    ids_from_source(m.source, &st);
  } else {
    LMT_RETURN_IF_ERROR(write_tokenizer(tmp, m.tokenizer_path, m.config, &st));
  }
  auto id_or_null = [](const std::optional<int64_t>& v) { return v ? json(*v) : json(nullptr); };
  config["bos_token_id"] = id_or_null(st.bos_id);
  config["eos_token_id"] = id_or_null(st.eos_id);
  LMT_RETURN_IF_ERROR(io::write_file_atomically(tmp + "/config.json", config.dump(2) + "\n"));
  json gen = {{"_from_model_config", true}, {"bos_token_id", id_or_null(st.bos_id)}, {"eos_token_id", id_or_null(st.eos_id)}};
  LMT_RETURN_IF_ERROR(io::write_file_atomically(tmp + "/generation_config.json", gen.dump(2) + "\n"));
  const char* st_dtype = dtype == ExportDType::kF32 ? "F32" : dtype == ExportDType::kBf16 ? "BF16" : "F16";
  LMT_RETURN_IF_ERROR(model::save_hf_weights_dir(tmp, *m.layout, m.params, st_dtype, max_shard_bytes, {{"format", "pt"}}));
  return out.commit();
}

}  // namespace lmt::exporter
