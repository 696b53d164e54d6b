#include "lmt/plan/emit_config.h"

#include <cstdio>
#include <filesystem>

#include "lmt/io/atomic_file.h"

namespace lmt::plan {
namespace {

std::string str(int64_t v) { return std::to_string(v); }

}  // namespace

std::string layout_fragment(const PlanReport& r) {
  const Layout& l = r.layout;
  char step[64] = "";
  if (l.step_seconds > 0) std::snprintf(step, sizeof step, ", predicted step %.4g s", l.step_seconds);
  std::string s;
  s += "# lmtrain plan: " + r.model_name + " on " + str(r.inputs.devices) + " x " + r.device.name + ", TP " + str(l.tp) +
       " x PP " + str(l.pp) + " x DP " + str(l.dp) + (r.layout_searched ? " (best of the search)" : " (requested)") +
       ", ZeRO-" + std::to_string(r.inputs.zero_stage) + ", global batch " + str(r.inputs.global_batch) +
       " sequences" + step + ".\n";
  s += "# Overlay it on a recipe: lmtrain train --config RECIPE.toml --config THIS.toml --run-dir RUN\n";
  s += "# (under mpirun -np " + str(r.inputs.devices) + "; docs/DIST.md says what each layout runs with).\n";
  s += "[parallel]\n";
  s += "dp = " + str(l.dp) + "\n";
  s += "tp = " + str(l.tp) + "\n";
  s += "pp = " + str(l.pp) + "\n";
  s += "sp = false\n";
  s += "ep = " + str(r.inputs.ep) + "\n";  // expert parallelism (MoE models; 1 for dense ones)
  s += "\n[train]\n";
  s += "zero = " + std::to_string(r.inputs.zero_stage) + "\n";
  s += "micro_batch = " + str(l.micro_batch) + "\n";
  s += "grad_accum = " + str(l.grad_accum) + "\n";
  s += "seq_len = " + str(r.inputs.seq_len) + "\n";
  s += std::string("recompute = ") + (r.inputs.recompute ? "true" : "false") + "\n";
  return s;
}

Status emit_layout_config(const PlanReport& r, const std::string& path) {
  const std::string text = layout_fragment(r);
  if (path == "-") {
    std::fwrite(text.data(), 1, text.size(), stdout);
    return Status::Ok();
  }
  std::error_code ec;
  if (std::filesystem::exists(path, ec) || std::filesystem::is_symlink(path, ec))
    return FailedPrecondition("--emit-config " + path + " already exists; nothing was written",
                         "choose a new file name, remove the old one, or pass --emit-config - for stdout");
  Status s = io::write_file_atomically(path, text);
  if (!s.ok()) return s.WithContext("--emit-config " + path);
  return Status::Ok();
}

}  // namespace lmt::plan
