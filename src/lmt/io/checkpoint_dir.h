// Checkpoint directories: RUN/checkpoints/step_XXXXXXXX/, committed atomically, verified on load.
// This is the model-free half (names, manifest, verification, selection, recovery, pruning); what
// goes into the files is train/checkpoint.h's.
//
// Contents:
//   model.safetensors      parameters, Hugging Face names and shapes, f32 (model/hf_checkpoint.h)
//   model.json             the model config (model/config_json.h)
//   optimizer.safetensors  optimizer state: named flat f32 tensors, element i belongs to parameter
//                          element i, so a state written by N ranks can be read by M
//   trainer_state.json     step, tokens, schedule, RNG, data cursor: whatever the trainer needs to
//                          continue bit for bit
//   config.toml            the resolved training recipe
//   tokenizer/             optional: a copy of the dataset's tokenizer (tokenizer.json, NAME.tiktoken,
//                          or GPT-2's encoder.json + vocab.bpe), so the checkpoint works from anywhere;
//                          checkpoints written before it existed have none
//   manifest.json          every file above with its size and XXH64, written last
// Commit protocol (io/atomic_dir.h, staging kSuffix): everything goes into step_XXXXXXXX.tmp/ (each
// file fsynced), the directory is fsynced, renamed to step_XXXXXXXX and the parent fsynced. A crash
// leaves either the previous checkpoints untouched or a *.tmp directory that the next save removes.
// A checkpoint whose files do not match its manifest is reported and skipped by
// find_latest_checkpoint().
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lmt/base/status.h"

namespace lmt::io {

// The files of a checkpoint besides manifest.json, each listed in the manifest.
inline constexpr const char* kCheckpointFiles[] = {"model.safetensors", "model.json", "optimizer.safetensors",
                                                   "trainer_state.json", "config.toml"};

// The optional tokenizer copy inside a checkpoint (its files are listed in the manifest too).
inline constexpr const char* kCheckpointTokenizerDir = "tokenizer";

// The MoE router's selection bias (balance = bias_update): f32 [n_layers, E] in optimizer.safetensors.
// Model state outside the parameters: what loads a checkpoint's model for inference reads it too.
inline constexpr const char* kCheckpointRouterBias = "moe.router_bias";

// The path load_tokenizer() takes for `step_dir`'s tokenizer copy: the single file in
// step_dir/tokenizer/ (tokenizer.json, NAME.tiktoken), or the directory itself (GPT-2 files);
// "" when the checkpoint carries none (older checkpoints).
std::string checkpoint_tokenizer_path(const std::string& step_dir);

// "step_00001234"
std::string checkpoint_name(int64_t step);

// Writes `step_dir`/manifest.json (atomically) with the size and XXH64 of every kCheckpointFiles
// entry in `step_dir` and every file under step_dir/tokenizer/: the last write of a save. Errors: a file missing or unreadable, kIoError.
Status write_checkpoint_manifest(const std::string& step_dir, int64_t step);

// Checks every file of `step_dir` against its manifest (size and checksum): the kCheckpointFiles,
// which must be listed, and any tokenizer/ files the manifest lists.
Status verify_checkpoint(const std::string& step_dir);

// The newest checkpoint under checkpoints_dir that verifies; each skipped (corrupt or incomplete)
// one is appended to *skipped as "dir: reason". NotFound when there is none.
StatusOr<std::string> find_latest_checkpoint(const std::string& checkpoints_dir, std::vector<std::string>* skipped);

// Recovery (docs/RELIABILITY.md). A damaged checkpoint is never deleted: it is renamed aside to
// step_XXXXXXXX.corrupt (.corrupt.2, ... if taken), so the run can commit that step again and the
// bytes stay for inspection. Returns the new path.
StatusOr<std::string> quarantine_checkpoint(const std::string& step_dir);
// For a resume (rank 0, holding the run lock): renames each damaged checkpoint newer than the newest
// valid one aside, appending "DIR is damaged (why); renamed to DIR.corrupt" to *notes, and returns
// the newest valid checkpoint, or "" when there is none. Errors: only a failed rename.
StatusOr<std::string> recover_latest_checkpoint(const std::string& checkpoints_dir, std::vector<std::string>* notes);
// The step_XXXXXXXX.tmp directories under checkpoints_dir: saves that never committed (a crash or a
// full disk during the write). They hold nothing a resume can use.
std::vector<std::string> incomplete_checkpoints(const std::string& checkpoints_dir);
// Removes them, and step_XXXXXXXX.pruning directories (a prune cut short by a crash); call only
// while holding the run lock (no save can be in flight).
Status remove_incomplete_checkpoints(const std::string& checkpoints_dir);

// Removes all but the newest `keep` committed checkpoints (keep <= 0 keeps all), each renamed to
// step_XXXXXXXX.pruning first so that a crash never leaves a half-deleted committed checkpoint.
Status prune_checkpoints(const std::string& checkpoints_dir, int64_t keep);

}  // namespace lmt::io
