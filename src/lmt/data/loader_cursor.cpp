// Loader cursor <-> JSON. 64-bit values that must survive any JSON reader exactly (RNG words,
// content ids) are written as 16 hex digits; counters are plain integers.
#include <string>

#include "lmt/base/xxh64.h"
#include "lmt/data/loader_impl.h"

namespace lmt::data {
namespace {

const char* kFormat = "lmtrain-loader-cursor";
constexpr int kVersion = 1;
const char* kResumeHint = "resume with the data, split, seq, batch, world, seed and shuffle of the run that saved it";

bool parse_hex64(const nlohmann::json& j, uint64_t* out) {
  if (!j.is_string()) return false;
  const std::string s = j.get<std::string>();
  if (s.size() != 16) return false;
  uint64_t v = 0;
  for (char c : s) {
    int d;
    if (c >= '0' && c <= '9') d = c - '0';
    else if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
    else return false;
    v = (v << 4) | static_cast<uint64_t>(d);
  }
  *out = v;
  return true;
}

// Counters (batches, tokens, epochs) stay far below this in any run, and next() adds to them
// without overflowing: 2^53 is also exact in every JSON reader.
constexpr int64_t kMaxCount = int64_t{1} << 53;

Status malformed(const std::string& key) {
  return InvalidArgument("loader cursor: key '" + key + "' is missing or malformed (counts are integers in [0, 2^53))",
                         "pass the object that Loader::cursor() returned, unchanged");
}

// Reads an integer member in [0, kMaxCount).
bool get_count(const nlohmann::json& j, const char* key, int64_t* out) {
  if (!j.is_object() || !j.contains(key) || !j[key].is_number_integer()) return false;
  *out = j[key].get<int64_t>();
  return *out >= 0 && *out < kMaxCount;
}

}  // namespace

nlohmann::json Loader::Impl::to_json(const LoaderState& s) const {
  nlohmann::json rng = nlohmann::json::array();
  for (uint64_t w : s.rng) rng.push_back(hex64(w));
  nlohmann::json srcs = nlohmann::json::array();
  for (size_t i = 0; i < sources.size(); ++i)
    srcs.push_back({{"path", plan.paths[i]},
                    {"content", hex64(sources[i].data->content_id())},
                    {"windows", sources[i].order.windows()},
                    {"epoch", s.sources[i].epoch},
                    {"row", s.sources[i].row}});
  return {{"format", kFormat},    {"version", kVersion},       {"split", options.split},
          {"seq", options.seq},   {"batch", options.batch},    {"world", options.world},
          {"seed", hex64(options.seed)}, {"shuffle", options.shuffle}, {"batches", s.batches},
          {"tokens_seen", s.tokens_seen}, {"stage", s.stage},  {"rng", rng},
          {"sources", srcs}};
}

StatusOr<LoaderState> Loader::Impl::from_json(const nlohmann::json& j) const {
  if (!j.is_object() || !j.contains("format") || j["format"] != kFormat) return malformed("format");
  if (!j.contains("version") || j["version"] != kVersion)
    return InvalidArgument("loader cursor: unsupported version " + (j.contains("version") ? j["version"].dump() : "?"),
                           "it was saved by another lmtrain version");
  // The schedule depends on these; a cursor of another schedule cannot be replayed exactly.
  auto differs = [](const std::string& key, const std::string& saved, const std::string& now) {
    return FailedPrecondition("loader cursor was saved with " + key + " = " + saved + ", this loader has " + now,
                              kResumeHint);
  };
  if (!j.contains("split") || !j["split"].is_string()) return malformed("split");
  if (j["split"] != options.split) return differs("split", j["split"].get<std::string>(), options.split);
  const std::pair<const char*, int64_t> ints[] = {{"seq", options.seq}, {"batch", options.batch}, {"world", options.world}};
  for (const auto& [key, mine] : ints) {
    int64_t saved;
    if (!get_count(j, key, &saved)) return malformed(key);
    if (saved != mine) return differs(key, std::to_string(saved), std::to_string(mine));
  }
  uint64_t seed;
  if (!j.contains("seed") || !parse_hex64(j["seed"], &seed)) return malformed("seed");
  if (seed != options.seed) return differs("seed", std::to_string(seed), std::to_string(options.seed));
  if (!j.contains("shuffle") || !j["shuffle"].is_boolean()) return malformed("shuffle");
  if (j["shuffle"] != options.shuffle)
    return differs("shuffle", j["shuffle"].dump(), options.shuffle ? "true" : "false");

  LoaderState s;
  int64_t stage;
  if (!get_count(j, "batches", &s.batches)) return malformed("batches");
  if (!get_count(j, "tokens_seen", &s.tokens_seen)) return malformed("tokens_seen");
  if (!get_count(j, "stage", &stage) || stage >= static_cast<int64_t>(plan.stages.size())) return malformed("stage");
  s.stage = static_cast<int>(stage);
  if (!j.contains("rng") || !j["rng"].is_array() || j["rng"].size() != s.rng.size()) return malformed("rng");
  for (size_t i = 0; i < s.rng.size(); ++i)
    if (!parse_hex64(j["rng"][i], &s.rng[i])) return malformed("rng");
  if (!j.contains("sources") || !j["sources"].is_array()) return malformed("sources");
  const nlohmann::json& srcs = j["sources"];
  if (srcs.size() != sources.size())
    return differs("sources", std::to_string(srcs.size()) + " datasets", std::to_string(sources.size()));
  s.sources.resize(sources.size());
  for (size_t i = 0; i < sources.size(); ++i) {
    const std::string key = "sources[" + std::to_string(i) + "]";
    uint64_t content;
    int64_t windows;
    if (!srcs[i].is_object() || !srcs[i].contains("content") || !parse_hex64(srcs[i]["content"], &content))
      return malformed(key + ".content");
    if (!get_count(srcs[i], "windows", &windows)) return malformed(key + ".windows");
    const std::string saved_path = srcs[i].contains("path") && srcs[i]["path"].is_string() ? srcs[i]["path"].get<std::string>() : "?";
    if (content != sources[i].data->content_id() || windows != sources[i].order.windows())
      return FailedPrecondition("loader cursor: source " + std::to_string(i) + " (saved as " + saved_path +
                                    ") has other content than " + plan.paths[i],
                                kResumeHint);
    if (!get_count(srcs[i], "epoch", &s.sources[i].epoch)) return malformed(key + ".epoch");
    if (!get_count(srcs[i], "row", &s.sources[i].row) || s.sources[i].row > sources[i].rows_per_epoch)
      return malformed(key + ".row");
  }
  return s;
}

}  // namespace lmt::data
