// The `decontaminate` stage (pipeline.h, decontaminate.h).
#include "lmt/clean/stages.h"

namespace lmt::clean {

Status run_decontaminate_stage(const CleanRequest& req, const ContaminationIndex& index, const std::string& in_dir,
                               const std::string& dir) {
  const bool remove = req.options.decontaminate_action == "remove";
  std::map<std::pair<int32_t, int64_t>, int64_t> found;  // (file, line) -> documents
  std::vector<json> flagged;
  Decide decide = [&](const std::vector<StageRecord>& batch, const std::vector<std::string>& texts, std::vector<RecordOutcome>* out) {
    std::vector<std::optional<EvalItemRef>> hits(batch.size());
    parallel_for(static_cast<int64_t>(batch.size()), req.workers, [&](int64_t i) { hits[static_cast<size_t>(i)] = index.find(texts[static_cast<size_t>(i)]); });
    for (size_t i = 0; i < batch.size(); ++i) {
      if (!hits[i]) continue;
      const EvalFile& f = index.files()[static_cast<size_t>(hits[i]->file)];
      ++found[{hits[i]->file, hits[i]->line}];
      json detail = {{"task", f.task}, {"file", f.path}, {"line", hits[i]->line}};
      if (remove) (*out)[i] = {false, f.task, std::nullopt, detail};
      else flagged.push_back({{"doc", batch[i].doc}, {"source", batch[i].source}, {"item", detail}});
    }
    return Status::Ok();
  };
  return run_record_stage(req, in_dir, dir, "decontaminate", decide, [&]() -> json {
    json files = json::array();
    for (size_t fi = 0; fi < index.files().size(); ++fi) {
      const EvalFile& f = index.files()[fi];
      json items = json::array();
      int64_t docs = 0;
      for (const auto& [k, n] : found)
        if (k.first == static_cast<int32_t>(fi)) { items.push_back({{"line", k.second}, {"documents", n}}); docs += n; }
      files.push_back({{"task", f.task}, {"file", f.path}, {"items", f.items}, {"items_too_short", f.items_too_short},
                       {"items_found", items.size()}, {"documents", docs}, {"found", items}});
    }
    return {{"ngram", index.ngram()}, {"action", req.options.decontaminate_action}, {"files", files}, {"flagged", flagged}};
  });
}

}  // namespace lmt::clean
