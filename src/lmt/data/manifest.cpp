#include "lmt/data/manifest.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "lmt/base/xxh64.h"

namespace lmt::data {
namespace {

const char* kFormat = "lmtrain-dataset";
const char* kHint = "the manifest is damaged or was not written by `lmtrain data prepare`; prepare the data again";

nlohmann::json split_to_json(const SplitInfo& s) {
  nlohmann::json shards = nlohmann::json::array();
  for (const ShardEntry& e : s.shards)
    shards.push_back({{"file", e.file}, {"tokens", e.tokens}, {"documents", e.documents}, {"checksum", hex64(e.checksum)}});
  return {{"documents", s.documents}, {"tokens", s.tokens}, {"shards", shards}};
}

// Typed lookups that turn a missing or ill-typed key into an error naming the file and key path.
class Reader {
 public:
  explicit Reader(std::string path) : path_(std::move(path)) {}

  Status error(const std::string& key, const std::string& what) const {
    return DataLoss(path_ + ": key '" + key + "' " + what, kHint);
  }
  StatusOr<const nlohmann::json*> get(const nlohmann::json& obj, const std::string& parent, const char* key,
                                      nlohmann::json::value_t type) const {
    const std::string name = parent.empty() ? key : parent + "." + key;
    if (!obj.is_object() || !obj.contains(key)) return error(name, "is missing");
    const nlohmann::json& v = obj.at(key);
    const bool number = type == nlohmann::json::value_t::number_integer;
    if (number ? !v.is_number_integer() : v.type() != type) return error(name, "has the wrong type");
    return &v;
  }
  StatusOr<int64_t> integer(const nlohmann::json& obj, const std::string& parent, const char* key) const {
    LMT_ASSIGN_OR_RETURN(const nlohmann::json* v, get(obj, parent, key, nlohmann::json::value_t::number_integer));
    const int64_t x = v->get<int64_t>();
    if (x < 0) return error(parent.empty() ? std::string(key) : parent + "." + key, "is negative");
    return x;
  }
  StatusOr<std::string> string(const nlohmann::json& obj, const std::string& parent, const char* key) const {
    LMT_ASSIGN_OR_RETURN(const nlohmann::json* v, get(obj, parent, key, nlohmann::json::value_t::string));
    return v->get<std::string>();
  }

 private:
  std::string path_;
};

StatusOr<SplitInfo> split_from_json(const Reader& r, const nlohmann::json& splits, const char* name) {
  const std::string at = std::string("splits.") + name;
  LMT_ASSIGN_OR_RETURN(const nlohmann::json* j, r.get(splits, "splits", name, nlohmann::json::value_t::object));
  SplitInfo s;
  LMT_ASSIGN_OR_RETURN(s.documents, r.integer(*j, at, "documents"));
  LMT_ASSIGN_OR_RETURN(s.tokens, r.integer(*j, at, "tokens"));
  LMT_ASSIGN_OR_RETURN(const nlohmann::json* shards, r.get(*j, at, "shards", nlohmann::json::value_t::array));
  int64_t tokens = 0, documents = 0;
  for (size_t i = 0; i < shards->size(); ++i) {
    const std::string sat = at + ".shards[" + std::to_string(i) + "]";
    const nlohmann::json& sj = (*shards)[i];
    ShardEntry e;
    LMT_ASSIGN_OR_RETURN(e.file, r.string(sj, sat, "file"));
    if (e.file.empty() || e.file.find('/') != std::string::npos || e.file[0] == '.')
      return r.error(sat + ".file", "must be a plain file name inside the dataset directory");
    LMT_ASSIGN_OR_RETURN(e.tokens, r.integer(sj, sat, "tokens"));
    LMT_ASSIGN_OR_RETURN(e.documents, r.integer(sj, sat, "documents"));
    LMT_ASSIGN_OR_RETURN(std::string hex, r.string(sj, sat, "checksum"));
    size_t used = 0;
    try {
      e.checksum = std::stoull(hex, &used, 16);
    } catch (const std::exception&) {
      used = 0;
    }
    if (hex.size() != 16 || used != 16) return r.error(sat + ".checksum", "is not 16 hex digits");
    if (__builtin_add_overflow(tokens, e.tokens, &tokens) || __builtin_add_overflow(documents, e.documents, &documents))
      return r.error(sat, "makes the split's token or document count overflow");
    s.shards.push_back(std::move(e));
  }
  if (tokens != s.tokens || documents != s.documents)
    return r.error(at, "counts disagree with the sum over its shards (" + std::to_string(tokens) + " tokens, " +
                           std::to_string(documents) + " documents)");
  return s;
}

}  // namespace

const SplitInfo* Manifest::split(const std::string& name) const {
  if (name == "train") return &train;
  if (name == "val") return &val;
  return nullptr;
}

nlohmann::json manifest_to_json(const Manifest& m) {
  return {{"format", kFormat},
          {"version", kManifestVersion},
          {"tokenizer",
           {{"path", m.tokenizer_path},
            {"fingerprint", m.tokenizer_fingerprint},
            {"vocab_size", m.vocab_size},
            {"eos_id", m.eos_id}}},
          {"token_dtype", m.token_bytes == 2 ? "uint16" : "uint32"},
          {"shard_tokens", m.shard_tokens},
          {"splits", {{"train", split_to_json(m.train)}, {"val", split_to_json(m.val)}}},
          {"preparation", m.preparation}};
}

StatusOr<Manifest> read_manifest(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / kManifestFile).string();
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::error_code ec;
    const auto status = std::filesystem::status(dir, ec);
    const char* layout = "a dataset is the directory `lmtrain data prepare --out DIR` makes: DIR/manifest.json plus its "
                         "token shards DIR/train-000000.bin, ..., DIR/val-000000.bin, ...";
    if (std::filesystem::is_regular_file(status))
      return InvalidArgument(dir + " is a file, not a dataset directory", std::string(layout) + "; pass DIR");
    if (std::filesystem::exists(status) && !std::filesystem::is_directory(status))
      return InvalidArgument(dir + " is not a directory, so not a dataset", layout);
    if (!std::filesystem::is_directory(status))
      return NotFound("dataset directory " + dir + " does not exist",
                      "create it with `lmtrain data prepare --out " + dir + " ...`");
    return NotFound(dir + " is not a prepared dataset: it has no " + kManifestFile,
                    "create it with `lmtrain data prepare --out DIR ...`, or finish an interrupted copy");
  }
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return DataLoss(path + " is not a JSON object", kHint);
  const Reader r(path);
  LMT_ASSIGN_OR_RETURN(std::string format, r.string(j, "", "format"));
  if (format != kFormat) return r.error("format", "is '" + format + "', expected '" + kFormat + "'");
  LMT_ASSIGN_OR_RETURN(int64_t version, r.integer(j, "", "version"));
  if (version != kManifestVersion)
    return DataLoss(path + ": manifest version " + std::to_string(version) + ", this lmtrain reads version " +
                        std::to_string(kManifestVersion),
                    "prepare the data again with this lmtrain");
  Manifest m;
  LMT_ASSIGN_OR_RETURN(const nlohmann::json* tok, r.get(j, "", "tokenizer", nlohmann::json::value_t::object));
  LMT_ASSIGN_OR_RETURN(m.tokenizer_path, r.string(*tok, "tokenizer", "path"));
  LMT_ASSIGN_OR_RETURN(m.tokenizer_fingerprint, r.string(*tok, "tokenizer", "fingerprint"));
  LMT_ASSIGN_OR_RETURN(m.vocab_size, r.integer(*tok, "tokenizer", "vocab_size"));
  LMT_ASSIGN_OR_RETURN(int64_t eos, r.integer(*tok, "tokenizer", "eos_id"));
  if (m.vocab_size < 1 || m.vocab_size > (int64_t{1} << 31)) return r.error("tokenizer.vocab_size", "is out of range");
  if (eos >= m.vocab_size) return r.error("tokenizer.eos_id", "is not below vocab_size");
  m.eos_id = static_cast<int32_t>(eos);
  LMT_ASSIGN_OR_RETURN(std::string dtype, r.string(j, "", "token_dtype"));
  if (dtype != "uint16" && dtype != "uint32") return r.error("token_dtype", "is '" + dtype + "', expected uint16 or uint32");
  m.token_bytes = dtype == "uint16" ? 2 : 4;
  LMT_ASSIGN_OR_RETURN(m.shard_tokens, r.integer(j, "", "shard_tokens"));
  LMT_ASSIGN_OR_RETURN(const nlohmann::json* splits, r.get(j, "", "splits", nlohmann::json::value_t::object));
  LMT_ASSIGN_OR_RETURN(m.train, split_from_json(r, *splits, "train"));
  LMT_ASSIGN_OR_RETURN(m.val, split_from_json(r, *splits, "val"));
  if (j.contains("preparation")) m.preparation = j["preparation"];
  return m;
}

}  // namespace lmt::data
