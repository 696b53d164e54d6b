#include "lmt/io/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "lmt/base/xxh64.h"
#include "lmt/io/atomic_file.h"
#include "lmt/io/hf_checkpoint.h"
#include "lmt/io/mapped_file.h"
#include "lmt/io/safetensors.h"
#include "lmt/model/config_json.h"

namespace lmt::io {
namespace fs = std::filesystem;
namespace {

constexpr const char* kFiles[] = {"model.safetensors", "model.json", "optimizer.safetensors", "trainer_state.json",
                                  "config.toml"};

Status write_text(const std::string& path, const std::string& text) {
  LMT_ASSIGN_OR_RETURN(AtomicFileWriter w, AtomicFileWriter::create(path));
  LMT_RETURN_IF_ERROR(w.append(text.data(), text.size()));
  return w.commit();
}

Status fsync_dir(const std::string& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return IoError("cannot open directory " + dir + " to fsync it");
  const int rc = ::fsync(fd);
  ::close(fd);
  return rc == 0 ? Status::Ok() : IoError("fsync of directory " + dir + " failed");
}

StatusOr<std::pair<int64_t, uint64_t>> size_and_checksum(const std::string& path) {
  LMT_ASSIGN_OR_RETURN(MappedFile f, MappedFile::open_read_only(path));
  return std::make_pair(static_cast<int64_t>(f.size()), xxh64(f.data(), f.size()));
}

// Parses "step_00001234" (committed checkpoints only).
bool parse_step(const std::string& name, int64_t* step) {
  if (name.size() != 13 || name.rfind("step_", 0) != 0) return false;
  for (size_t i = 5; i < name.size(); ++i)
    if (name[i] < '0' || name[i] > '9') return false;
  *step = std::stoll(name.substr(5));
  return true;
}

std::vector<std::pair<int64_t, std::string>> committed(const std::string& dir) {
  std::vector<std::pair<int64_t, std::string>> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    int64_t step = 0;
    if (e.is_directory() && parse_step(e.path().filename().string(), &step)) out.emplace_back(step, e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Verifies the committed checkpoints newest first and returns the first valid one ("" if none),
// calling on_damaged(dir, why) for each damaged one before it (an error from it stops the search).
template <typename OnDamaged>
StatusOr<std::string> newest_valid(const std::string& checkpoints_dir, OnDamaged on_damaged) {
  auto all = committed(checkpoints_dir);
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    Status s = verify_checkpoint(it->second);
    if (s.ok()) return it->second;
    LMT_RETURN_IF_ERROR(on_damaged(it->second, s));
  }
  return std::string();
}

}  // namespace

std::string checkpoint_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step_%08lld", static_cast<long long>(step));
  return buf;
}

Status save_checkpoint(const std::string& checkpoints_dir, int64_t step, const CheckpointData& d) {
  LMT_CHECK(d.layout != nullptr && d.params != nullptr) << "save_checkpoint without a layout or params";
  std::error_code ec;
  fs::create_directories(checkpoints_dir, ec);
  if (ec) return IoError("cannot create " + checkpoints_dir + ": " + ec.message(), "check the run directory is writable");
  const std::string final_dir = checkpoints_dir + "/" + checkpoint_name(step), tmp_dir = final_dir + ".tmp";
  if (fs::exists(final_dir))
    return FailedPrecondition("checkpoint " + final_dir + " already exists",
                              "it is never overwritten; if it is damaged, resume with --resume (damaged checkpoints are "
                              "renamed aside to *.corrupt) or move it away by hand");
  fs::remove_all(tmp_dir, ec);  // a crash's leftovers
  fs::create_directory(tmp_dir, ec);
  if (ec) return IoError("cannot create " + tmp_dir + ": " + ec.message());

  LMT_RETURN_IF_ERROR(save_hf_weights(tmp_dir + "/model.safetensors", *d.layout, d.params, {{"format", "pt"}}));
  LMT_RETURN_IF_ERROR(write_text(tmp_dir + "/model.json", model::model_config_to_json(d.layout->config()).dump(2) + "\n"));
  std::vector<TensorToWrite> state;
  for (const auto& [name, view] : d.optimizer_state) {
    LMT_CHECK(view.dtype() == DType::kF32) << "optimizer state '" << name << "' is " << view.to_string();
    state.push_back({name, "F32", {view.numel()}, view.data()});
  }
  LMT_RETURN_IF_ERROR(write_safetensors(tmp_dir + "/optimizer.safetensors", state));
  LMT_RETURN_IF_ERROR(write_text(tmp_dir + "/trainer_state.json", d.trainer_state.dump(2) + "\n"));
  LMT_RETURN_IF_ERROR(write_text(tmp_dir + "/config.toml", d.config_toml));

  nlohmann::json manifest = {{"step", step}, {"files", nlohmann::json::object()}};
  for (const char* f : kFiles) {
    LMT_ASSIGN_OR_RETURN(auto sc, size_and_checksum(tmp_dir + "/" + f));
    manifest["files"][f] = {{"bytes", sc.first}, {"xxh64", hex64(sc.second)}};
  }
  LMT_RETURN_IF_ERROR(write_text(tmp_dir + "/manifest.json", manifest.dump(2) + "\n"));
  LMT_RETURN_IF_ERROR(fsync_dir(tmp_dir));
  fs::rename(tmp_dir, final_dir, ec);
  if (ec) return IoError("cannot rename " + tmp_dir + " to " + final_dir + ": " + ec.message());
  return fsync_dir(checkpoints_dir);
}

Status verify_checkpoint(const std::string& step_dir) {
  const std::string mpath = step_dir + "/manifest.json";
  FILE* f = std::fopen(mpath.c_str(), "rb");
  if (!f) return DataLoss(mpath + " is missing", "the checkpoint was not completed; use an older one");
  std::string text;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
  std::fclose(f);
  nlohmann::json m = nlohmann::json::parse(text, nullptr, false);
  if (m.is_discarded() || !m.contains("files") || !m["files"].is_object())
    return DataLoss(mpath + " is not a valid manifest", "the checkpoint is damaged; use an older one");
  for (const char* name : kFiles) {
    if (!m["files"].contains(name)) return DataLoss(mpath + " does not list " + name, "the checkpoint is damaged");
    const auto& entry = m["files"][name];
    auto sc = size_and_checksum(step_dir + "/" + name);
    if (!sc.ok()) return DataLoss(step_dir + "/" + name + " cannot be read: " + sc.status().message(), "the checkpoint is damaged");
    if (!entry.contains("bytes") || !entry.contains("xxh64") || entry["bytes"] != sc->first ||
        entry["xxh64"] != hex64(sc->second))
      return DataLoss(step_dir + "/" + name + " does not match its manifest (size or checksum)",
                      "the file was truncated or modified; use an older checkpoint");
  }
  return Status::Ok();
}

StatusOr<nlohmann::json> load_checkpoint(const std::string& step_dir, const model::ParamLayout& layout, float* params,
                                         const std::vector<std::pair<std::string, TensorView>>& optimizer_state) {
  LMT_RETURN_IF_ERROR(verify_checkpoint(step_dir));
  LMT_RETURN_IF_ERROR(load_hf_weights(step_dir + "/model.safetensors", layout, params));
  LMT_ASSIGN_OR_RETURN(SafetensorsFile opt, SafetensorsFile::open(step_dir + "/optimizer.safetensors"));
  for (const auto& [name, view] : optimizer_state) {
    const TensorInfo* t = opt.find(name);
    if (!t)
      return InvalidArgument(step_dir + "/optimizer.safetensors has no state '" + name + "'",
                             "the checkpoint was written with another optimizer; set optim.name to match it");
    LMT_RETURN_IF_ERROR(opt.read_f32(name, view.as<float>(), view.numel()));
  }
  std::ifstream in(step_dir + "/trainer_state.json");
  nlohmann::json state = nlohmann::json::parse(in, nullptr, false);
  if (state.is_discarded()) return DataLoss(step_dir + "/trainer_state.json is not JSON", "the checkpoint is damaged");
  return state;
}

StatusOr<std::string> find_latest_checkpoint(const std::string& checkpoints_dir, std::vector<std::string>* skipped) {
  std::vector<std::string> damaged;
  LMT_ASSIGN_OR_RETURN(std::string latest, newest_valid(checkpoints_dir, [&](const std::string& dir, const Status& s) {
                         damaged.push_back(dir + ": " + s.message());
                         return Status::Ok();
                       }));
  if (skipped) skipped->insert(skipped->end(), damaged.begin(), damaged.end());
  if (!latest.empty()) return latest;
  std::string why = damaged.empty() ? "" : " (" + std::to_string(damaged.size()) + " skipped; newest: " + damaged.front() + ")";
  return NotFound("no valid checkpoint in " + checkpoints_dir + why,
                  "a checkpoint is complete once its manifest.json is written; check the path or use an older run");
}

StatusOr<std::string> quarantine_checkpoint(const std::string& step_dir) {
  std::string to = step_dir + ".corrupt";
  for (int i = 2; fs::exists(to); ++i) to = step_dir + ".corrupt." + std::to_string(i);
  std::error_code ec;
  fs::rename(step_dir, to, ec);
  if (ec)
    return IoError("cannot rename damaged checkpoint " + step_dir + " to " + to + ": " + ec.message(),
                   "move it out of the checkpoints directory by hand");
  return to;
}

StatusOr<std::string> recover_latest_checkpoint(const std::string& checkpoints_dir, std::vector<std::string>* notes) {
  return newest_valid(checkpoints_dir, [&](const std::string& dir, const Status& s) -> Status {
    LMT_ASSIGN_OR_RETURN(std::string moved, quarantine_checkpoint(dir));
    notes->push_back(dir + " is damaged (" + s.message() + "); renamed to " + moved);
    return Status::Ok();
  });
}

std::vector<std::string> incomplete_checkpoints(const std::string& checkpoints_dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(checkpoints_dir, ec)) {
    const std::string name = e.path().filename().string();
    int64_t step = 0;
    if (e.is_directory() && name.ends_with(".tmp") && parse_step(name.substr(0, name.size() - 4), &step))
      out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

Status remove_incomplete_checkpoints(const std::string& checkpoints_dir) {
  std::vector<std::string> dirs = incomplete_checkpoints(checkpoints_dir);
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(checkpoints_dir, ec))  // prunes cut short by a crash
    if (e.path().filename().string().ends_with(".pruning")) dirs.push_back(e.path().string());
  for (const std::string& dir : dirs) {
    std::error_code ec;
    fs::remove_all(dir, ec);
    if (ec) return IoError("cannot remove incomplete checkpoint " + dir + ": " + ec.message());
  }
  return Status::Ok();
}

Status prune_checkpoints(const std::string& checkpoints_dir, int64_t keep) {
  if (keep <= 0) return Status::Ok();
  auto all = committed(checkpoints_dir);
  for (size_t i = 0; i + static_cast<size_t>(keep) < all.size(); ++i) {
    // Renamed first: a crash in the middle of remove_all must not leave a committed-looking
    // step_N directory with files missing. A leftover *.pruning is removed on the next resume.
    const std::string doomed = all[i].second + ".pruning";
    std::error_code ec;
    fs::rename(all[i].second, doomed, ec);
    if (!ec) fs::remove_all(doomed, ec);
    if (ec) return IoError("cannot remove old checkpoint " + all[i].second + ": " + ec.message());
  }
  return Status::Ok();
}

}  // namespace lmt::io
