#include "lmt/train/checkpoint.h"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "lmt/io/atomic_dir.h"
#include "lmt/io/atomic_file.h"
#include "lmt/io/safetensors.h"
#include "lmt/model/config_json.h"
#include "lmt/model/hf_checkpoint.h"

namespace lmt::train {
namespace fs = std::filesystem;
namespace {

// Copies the tokenizer at `src` (a file, or a directory's GPT-2 / tokenizer.json files) into
// `dst_dir`, each file written atomically.
Status copy_tokenizer(const std::string& src, const std::string& dst_dir) {
  std::error_code ec;
  std::vector<fs::path> files;
  if (fs::is_directory(src, ec)) {
    for (const char* f : {"encoder.json", "vocab.bpe"})
      if (fs::exists(fs::path(src) / f, ec)) files.push_back(fs::path(src) / f);
    if (files.empty() && fs::exists(fs::path(src) / "tokenizer.json", ec)) files.push_back(fs::path(src) / "tokenizer.json");
  } else if (fs::is_regular_file(src, ec)) {
    files.push_back(src);
  }
  if (files.empty())
    return NotFound("the dataset's tokenizer " + src + " is gone", "prepare the dataset again, or keep its tokenizer where it was");
  fs::create_directories(dst_dir, ec);
  if (ec) return IoError("cannot create " + dst_dir + ": " + ec.message(), "check the run directory is writable");
  for (const fs::path& f : files) {
    std::ifstream in(f, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (!in.good() && !in.eof()) return IoError("cannot read " + f.string(), "check the tokenizer file");
    LMT_RETURN_IF_ERROR(io::write_file_atomically(dst_dir + "/" + f.filename().string(), bytes));
  }
  return Status::Ok();
}

}  // namespace

Status save_checkpoint(const std::string& checkpoints_dir, int64_t step, const CheckpointData& d) {
  LMT_CHECK(d.layout != nullptr && d.params != nullptr) << "save_checkpoint without a layout or params";
  std::error_code ec;
  fs::create_directories(checkpoints_dir, ec);
  if (ec) return IoError("cannot create " + checkpoints_dir + ": " + ec.message(), "check the run directory is writable");
  const std::string final_dir = checkpoints_dir + "/" + io::checkpoint_name(step);
  if (fs::exists(final_dir))
    return FailedPrecondition("checkpoint " + final_dir + " already exists",
                              "it is never overwritten; if it is damaged, resume with --resume (damaged checkpoints are "
                              "renamed aside to *.corrupt) or move it away by hand");
  LMT_ASSIGN_OR_RETURN(io::AtomicDirectory out,
                       io::AtomicDirectory::create(final_dir, io::AtomicDirectory::Staging::kSuffix));
  const std::string& tmp_dir = out.tmp_path();

  LMT_RETURN_IF_ERROR(model::save_hf_weights(tmp_dir + "/model.safetensors", *d.layout, d.params, {{"format", "pt"}}));
  LMT_RETURN_IF_ERROR(
      io::write_file_atomically(tmp_dir + "/model.json", model::model_config_to_json(d.layout->config()).dump(2) + "\n"));
  std::vector<io::TensorToWrite> state;
  for (const auto& [name, view] : d.optimizer_state) {
    LMT_CHECK(view.dtype() == DType::kF32) << "optimizer state '" << name << "' is " << view.to_string();
    state.push_back({name, "F32", {view.numel()}, view.data()});
  }
  LMT_RETURN_IF_ERROR(io::write_safetensors(tmp_dir + "/optimizer.safetensors", state));
  LMT_RETURN_IF_ERROR(io::write_file_atomically(tmp_dir + "/trainer_state.json", d.trainer_state.dump(2) + "\n"));
  LMT_RETURN_IF_ERROR(io::write_file_atomically(tmp_dir + "/config.toml", d.config_toml));
  if (!d.tokenizer_path.empty())
    LMT_RETURN_IF_ERROR(copy_tokenizer(d.tokenizer_path, tmp_dir + "/" + io::kCheckpointTokenizerDir));
  LMT_RETURN_IF_ERROR(io::write_checkpoint_manifest(tmp_dir, step));
  return out.commit();
}

StatusOr<nlohmann::json> load_checkpoint(const std::string& step_dir, const model::ParamLayout& layout, float* params,
                                         const std::vector<std::pair<std::string, TensorView>>& optimizer_state) {
  LMT_RETURN_IF_ERROR(io::verify_checkpoint(step_dir));
  LMT_RETURN_IF_ERROR(model::load_hf_weights(step_dir + "/model.safetensors", layout, params));
  LMT_ASSIGN_OR_RETURN(io::SafetensorsFile opt, io::SafetensorsFile::open(step_dir + "/optimizer.safetensors"));
  for (const auto& [name, view] : optimizer_state) {
    const io::TensorInfo* t = opt.find(name);
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

}  // namespace lmt::train
