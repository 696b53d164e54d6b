#include "lmt/train/trainer_state.h"

namespace lmt::train {
namespace {

constexpr const char* kHint =
    "the checkpoint is damaged or was edited; move it aside (or delete it) to resume from the one before";

Status bad_field(const std::string& where, const std::string& key, const std::string& want, const nlohmann::json& got) {
  std::string shown = got.dump();
  if (shown.size() > 60) shown = shown.substr(0, 57) + "...";
  return DataLoss(where + ": '" + key + "' must be " + want + ", not " + shown, kHint);
}

}  // namespace

nlohmann::json TrainerState::to_json() const {
  return {{"step", step},
          {"updates", updates},
          {"tokens", tokens},
          {"bad_in_a_row", bad_in_a_row},
          {"run_seconds", run_seconds},
          {"spike_window", spike_window},
          {"grad_norm_window", grad_norm_window},
          {"loader", loader},
          {"seed", seed}};
}

StatusOr<TrainerState> TrainerState::parse(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object()) return bad_field(where, "(top level)", "a JSON object", j);
  TrainerState s;
  auto count = [&](const char* key, int64_t* out) -> Status {
    if (!j.contains(key)) return DataLoss(where + ": '" + key + "' is missing", kHint);
    const auto& v = j[key];
    if (!v.is_number_integer() || v.get<int64_t>() < 0) return bad_field(where, key, "a non-negative integer", v);
    *out = v.get<int64_t>();
    return Status::Ok();
  };
  LMT_RETURN_IF_ERROR(count("step", &s.step));
  LMT_RETURN_IF_ERROR(count("updates", &s.updates));
  LMT_RETURN_IF_ERROR(count("tokens", &s.tokens));
  LMT_RETURN_IF_ERROR(count("bad_in_a_row", &s.bad_in_a_row));
  if (s.updates > s.step) return bad_field(where, "updates", "at most 'step' (" + std::to_string(s.step) + ")", j["updates"]);
  if (s.bad_in_a_row > s.step)
    return bad_field(where, "bad_in_a_row", "at most 'step' (" + std::to_string(s.step) + ")", j["bad_in_a_row"]);
  if (j.contains("run_seconds")) {
    const auto& v = j["run_seconds"];
    if (!v.is_number() || !(v.get<double>() >= 0) || v.get<double>() > 1e12)
      return bad_field(where, "run_seconds", "a non-negative number of seconds", v);
    s.run_seconds = v.get<double>();
  }
  if (j.contains("seed")) {
    if (!j["seed"].is_number_unsigned()) return bad_field(where, "seed", "a non-negative integer", j["seed"]);
    s.seed = j["seed"].get<uint64_t>();
  }
  if (!j.contains("spike_window")) return DataLoss(where + ": 'spike_window' is missing", kHint);
  s.spike_window = j["spike_window"];
  s.grad_norm_window = j.value("grad_norm_window", nlohmann::json());
  if (!j.contains("loader") || !j["loader"].is_object()) return bad_field(where, "loader", "a JSON object (the data cursor)", j.value("loader", nlohmann::json()));
  s.loader = j["loader"];
  return s;
}

}  // namespace lmt::train
