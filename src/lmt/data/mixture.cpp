#include "lmt/data/mixture.h"

#include <cmath>
#include <filesystem>

namespace lmt::data {

StatusOr<MixturePlan> plan_mixture(const std::vector<DataStage>& stages) {
  const char* hint = "data stages need increasing start_tokens (the first at 0) and sources with positive weights";
  if (stages.empty()) return InvalidArgument("the loader needs at least one data stage", hint);
  MixturePlan plan;
  std::vector<std::string> keys;  // normalised paths, parallel to plan.paths
  for (size_t si = 0; si < stages.size(); ++si) {
    const DataStage& st = stages[si];
    const std::string at = "data stage " + std::to_string(si);
    if (si == 0 && st.start_tokens != 0)
      return InvalidArgument(at + " starts at " + std::to_string(st.start_tokens) + " tokens; the first must start at 0",
                             hint);
    if (si > 0 && st.start_tokens <= stages[si - 1].start_tokens)
      return InvalidArgument(at + " starts at " + std::to_string(st.start_tokens) + " tokens, not after stage " +
                                 std::to_string(si - 1) + " (" + std::to_string(stages[si - 1].start_tokens) + ")",
                             hint);
    if (st.sources.empty()) return InvalidArgument(at + " has no sources", hint);
    StagePlan sp;
    sp.start_tokens = st.start_tokens;
    double total = 0;
    for (const DataSource& src : st.sources) {
      if (src.path.empty()) return InvalidArgument(at + " has a source with an empty path", hint);
      if (!std::isfinite(src.weight) || src.weight < 0)
        return InvalidArgument(at + ": source " + src.path + " has weight " + std::to_string(src.weight), hint);
      std::error_code ec;
      std::string key = std::filesystem::weakly_canonical(src.path, ec).string();
      if (ec) key = std::filesystem::path(src.path).lexically_normal().string();
      size_t index = 0;
      while (index < keys.size() && keys[index] != key) ++index;
      if (index == keys.size()) {
        keys.push_back(key);
        plan.paths.push_back(src.path);
      }
      for (int other : sp.sources)
        if (other == static_cast<int>(index))
          return InvalidArgument(at + " lists source " + src.path + " twice", "give it one entry with the summed weight");
      sp.sources.push_back(static_cast<int>(index));
      total += src.weight;
      sp.cumulative.push_back(total);
    }
    if (!(total > 0)) return InvalidArgument(at + ": the source weights sum to 0", hint);
    for (double& c : sp.cumulative) c /= total;
    sp.cumulative.back() = 1.0;  // no rounding gap for u close to 1
    plan.stages.push_back(std::move(sp));
  }
  return plan;
}

int draw_source(const StagePlan& stage, double u) {
  for (size_t i = 0; i < stage.cumulative.size(); ++i)
    if (u < stage.cumulative[i]) return stage.sources[i];
  return stage.sources.back();
}

int active_stage(const MixturePlan& plan, int64_t tokens_seen, int current) {
  while (current + 1 < static_cast<int>(plan.stages.size()) && tokens_seen >= plan.stages[current + 1].start_tokens)
    ++current;
  return current;
}

}  // namespace lmt::data
