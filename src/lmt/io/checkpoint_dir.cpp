#include "lmt/io/checkpoint_dir.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <utility>

#include <nlohmann/json.hpp>

#include "lmt/base/xxh64.h"
#include "lmt/io/atomic_file.h"
#include "lmt/io/mapped_file.h"

namespace lmt::io {
namespace fs = std::filesystem;
namespace {

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

std::string checkpoint_tokenizer_path(const std::string& step_dir) {
  const fs::path dir = fs::path(step_dir) / kCheckpointTokenizerDir;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return "";
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.is_regular_file()) files.push_back(e.path().string());
  if (files.size() == 1) return files[0];
  return files.empty() ? "" : dir.string();
}

std::string checkpoint_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step_%08lld", static_cast<long long>(step));
  return buf;
}

Status write_checkpoint_manifest(const std::string& step_dir, int64_t step) {
  nlohmann::json manifest = {{"step", step}, {"files", nlohmann::json::object()}};
  for (const char* f : kCheckpointFiles) {
    LMT_ASSIGN_OR_RETURN(auto sc, size_and_checksum(step_dir + "/" + f));
    manifest["files"][f] = {{"bytes", sc.first}, {"xxh64", hex64(sc.second)}};
  }
  std::error_code ec;
  const fs::path tok = fs::path(step_dir) / kCheckpointTokenizerDir;
  if (fs::is_directory(tok, ec)) {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(tok, ec))
      if (e.is_regular_file()) names.push_back(std::string(kCheckpointTokenizerDir) + "/" + e.path().filename().string());
    std::sort(names.begin(), names.end());
    for (const std::string& f : names) {
      LMT_ASSIGN_OR_RETURN(auto sc, size_and_checksum(step_dir + "/" + f));
      manifest["files"][f] = {{"bytes", sc.first}, {"xxh64", hex64(sc.second)}};
    }
  }
  return write_file_atomically(step_dir + "/manifest.json", manifest.dump(2) + "\n");
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
  for (const char* required : kCheckpointFiles)
    if (!m["files"].contains(required)) return DataLoss(mpath + " does not list " + required, "the checkpoint is damaged");
  const std::string tok_prefix = std::string(kCheckpointTokenizerDir) + "/";
  for (const auto& item : m["files"].items()) {
    const std::string& name = item.key();  // not a structured binding: clang 14 cannot capture one
    const nlohmann::json& entry = item.value();
    const bool known = std::find_if(std::begin(kCheckpointFiles), std::end(kCheckpointFiles),
                                    [&](const char* k) { return name == k; }) != std::end(kCheckpointFiles);
    const bool tokenizer_file = name.rfind(tok_prefix, 0) == 0 && name.find('/', tok_prefix.size()) == std::string::npos &&
                                name.size() > tok_prefix.size() && name.find("..") == std::string::npos;
    if (!known && !tokenizer_file)
      return DataLoss(mpath + " lists '" + name + "', which is no checkpoint file", "the checkpoint is damaged");
    auto sc = size_and_checksum(step_dir + "/" + name);
    if (!sc.ok()) return DataLoss(step_dir + "/" + name + " cannot be read: " + sc.status().message(), "the checkpoint is damaged");
    if (!entry.contains("bytes") || !entry.contains("xxh64") || entry["bytes"] != sc->first ||
        entry["xxh64"] != hex64(sc->second))
      return DataLoss(step_dir + "/" + name + " does not match its manifest (size or checksum)",
                      "the file was truncated or modified; use an older checkpoint");
  }
  return Status::Ok();
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
