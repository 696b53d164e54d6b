// `lmtrain logits --checkpoint DIR --ids 1,2,3 [--out FILE]`: the model's logits after each given
// token, as JSON, for checks against other implementations (docs/INTEROP.md). f32 inference path
// (eval::Decoder, the one `generate` uses), real vocabulary only.
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend_flag.h"
#include "commands.h"
#include "lmt/eval/decode.h"
#include "lmt/eval/model_dir.h"
#include "lmt/io/atomic_file.h"

namespace lmt::cli {
namespace {

struct LogitsArgs {
  std::string checkpoint, ids, out, backend = "cpu";
  bool json = false;  // --json: accepted; the output is JSON either way
};

StatusOr<std::vector<int32_t>> parse_id_list(const std::string& text, int64_t vocab) {
  std::vector<int32_t> ids;
  size_t pos = 0;
  while (pos <= text.size()) {
    const size_t comma = std::min(text.find(',', pos), text.size());
    const std::string item = text.substr(pos, comma - pos);
    char* end = nullptr;
    const long long v = std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v < 0 || v >= vocab)
      return InvalidArgument("--ids: '" + item + "' is not a token id in [0, " + std::to_string(vocab) + ")",
                             "pass comma-separated ids, e.g. --ids 1,345,22");
    ids.push_back(static_cast<int32_t>(v));
    pos = comma + 1;
  }
  return ids;
}

Status run_logits(const LogitsArgs& a) {
  LMT_ASSIGN_OR_RETURN(kernels::Backend* be, backend_from_flag(a.backend));
  StatusOr<eval::LoadedModel> loaded = eval::load_model_dir(a.checkpoint, *be);
  if (!loaded.ok()) return loaded.status().WithContext("--checkpoint");
  model::Transformer& m = *loaded->model;
  LMT_ASSIGN_OR_RETURN(std::vector<int32_t> ids, parse_id_list(a.ids, m.config().vocab_size));
  if (static_cast<int64_t>(ids.size()) > m.config().max_seq_len)
    return InvalidArgument("--ids: " + std::to_string(ids.size()) + " ids, the model takes at most " +
                           std::to_string(m.config().max_seq_len), "pass fewer ids");
  eval::Decoder dec(m, static_cast<int64_t>(ids.size()));
  const int64_t V = dec.vocab_size();
  std::vector<float> all(ids.size() * static_cast<size_t>(V));
  dec.forward(ids, all.data());
  // One compact JSON object on one line (docs/CLI.md).
  std::string text = "{\"source\":" + nlohmann::json(loaded->source).dump() + ",\"ids\":" + nlohmann::json(ids).dump() +
                     ",\"vocab_size\":" + std::to_string(V) + ",\"logits\":[";
  char buf[32];
  for (size_t t = 0; t < ids.size(); ++t) {
    text += t ? ",[" : "[";
    for (int64_t v = 0; v < V; ++v) {
      std::snprintf(buf, sizeof buf, "%s%.9g", v ? "," : "", static_cast<double>(all[t * static_cast<size_t>(V) + v]));
      text += buf;
    }
    text += "]";
  }
  text += "]}\n";
  if (a.out.empty()) {
    std::fwrite(text.data(), 1, text.size(), stdout);
    return Status::Ok();
  }
  return io::write_file_atomically(a.out, text);
}

}  // namespace

void add_logits_command(CLI::App& app, Runner& runner) {
  static LogitsArgs a;
  CLI::App* c = app.add_subcommand("logits", "print a model's logits after each of the given token ids (JSON)");
  c->add_option("--checkpoint", a.checkpoint, "a run directory, a checkpoint step directory, or a Hugging Face directory")
      ->required();
  c->add_option("--ids", a.ids, "comma-separated token ids, e.g. 1,345,22")->required();
  c->add_option("--out", a.out, "write the JSON here (atomically) instead of stdout");
  add_backend_flag(c, a.backend);
  c->add_flag("--json", a.json, "accepted for uniformity: the output is always one compact JSON object");
  c->callback([&runner] { runner.set(run_logits(a)); });
}

}  // namespace lmt::cli
