#include "lmt/plan/model_source.h"

#include "lmt/model/config_json.h"
#include "lmt/model/hf_checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <vector>

namespace lmt::plan {
namespace {

using nlohmann::json;
using model::ModelConfig;

}  // namespace

StatusOr<ModelConfig> load_model(const std::string& arg) {
  namespace fs = std::filesystem;
  const fs::path path(arg);
  const std::string ext = path.extension().string();
  const bool looks_like_file = ext == ".json" || ext == ".toml" || arg.find('/') != std::string::npos;
  std::error_code ec;
  if (!looks_like_file && !fs::exists(path, ec)) {
    auto p = model::preset(arg);
    if (!p.ok())
      return NotFound(p.status().message(), p.status().hint() + "; or pass a path to a .json model config");
    return p;
  }
  if (ext == ".toml")
    return Unimplemented("'" + arg + "': TOML model configs are read by the config module, not yet here",
                         "write the model's keys as a .json file, or use a preset name");
  std::ifstream in(arg);
  if (!in)
    return NotFound("model config file '" + arg + "' does not exist or cannot be read",
                    "pass a preset name (" + std::to_string(model::preset_names().size()) +
                        " known, e.g. llama3.2-1b) or the path of a .json model config");
  std::stringstream text;
  text << in.rdbuf();
  json j;
  try {
    j = json::parse(text.str());
  } catch (const json::exception& e) {  // parse_error, or out_of_range for a number like 1e999
    return InvalidArgument("'" + arg + "' is not valid JSON: " + e.what(),
                           "a model config is one JSON object, e.g. {\"n_layers\": 16, ...}");
  }
  if (j.is_object() && j.contains("model_type")) return model::config_from_hf(arg);  // a Hugging Face config.json
  return model::model_config_from_json(j, arg);
}

StatusOr<double> mfu_from_metrics(const std::string& path) {
  std::ifstream in(path);
  if (!in)
    return NotFound("metrics file '" + path + "' does not exist or cannot be read",
                    "pass the metrics.jsonl of a run (runs/<name>/metrics.jsonl) or use --mfu F");
  std::vector<double> values;
  std::string line;
  int64_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded())
      return DataLoss(path + ":" + std::to_string(line_no) + ": not a JSON object",
                      "metrics.jsonl holds one JSON object per line");
    if (j.is_object() && j.contains("mfu") && j["mfu"].is_number()) values.push_back(j["mfu"].get<double>());
  }
  if (values.empty())
    return InvalidArgument("metrics file '" + path + "' has no line with a numeric \"mfu\"",
                           "the trainer writes \"mfu\" on its step lines; or pass --mfu F");
  std::vector<double> tail(values.begin() + static_cast<std::ptrdiff_t>(values.size() / 2), values.end());
  std::sort(tail.begin(), tail.end());
  return tail[tail.size() / 2];
}

}  // namespace lmt::plan
