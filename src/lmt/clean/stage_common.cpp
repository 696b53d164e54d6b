// Helpers shared by the stages of `data clean` (stages.h) and run_record_stage().
#include <atomic>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "lmt/clean/stages.h"

namespace lmt::clean {
namespace {
constexpr size_t kSampleChars = 1000;  // text kept per removed document in removed.jsonl

}  // namespace

// ---- fault injection (pipeline.h) ----
void maybe_kill_after(const std::string& stage) {
  const char* f = std::getenv("LMT_CLEAN_FAULT");
  if (f != nullptr && std::string(f) == "after:" + stage) std::raise(SIGKILL);
}
int64_t kill_during(const std::string& stage) {
  const char* f = std::getenv("LMT_CLEAN_FAULT");
  const std::string prefix = "during:" + stage + ":";
  if (f == nullptr || !std::string(f).starts_with(prefix)) return -1;
  return std::atoll(f + prefix.size());
}

void parallel_for(int64_t n, int64_t workers, const std::function<void(int64_t)>& fn) {
  const int64_t w = std::min<int64_t>(std::max<int64_t>(workers, 1), n);
  if (w <= 1) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  std::atomic<int64_t> next{0};
  std::vector<std::thread> threads;
  for (int64_t t = 0; t < w; ++t)
    threads.emplace_back([&] {
      for (int64_t i; (i = next.fetch_add(1)) < n;) fn(i);
    });
  for (auto& t : threads) t.join();
}

std::string text_sample(const std::string& text) {
  if (text.size() <= kSampleChars) return text;
  size_t cut = kSampleChars;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;  // whole characters
  return text.substr(0, cut);
}

// The output record of a document: the input line as it was when the text is unchanged, else the
// input object (key order kept) with the text field replaced.
std::string make_record(const std::string& raw, const std::string& field, const std::string& original,
                        const std::string& text) {
  std::string line = raw;
  if (!line.empty() && line.back() == '\r') line.pop_back();
  if (!line.empty() && text == original) return line;
  nlohmann::ordered_json j = line.empty() ? nlohmann::ordered_json::object() : nlohmann::ordered_json::parse(line, nullptr, false);
  if (j.is_discarded() || !j.is_object()) j = nlohmann::ordered_json::object();
  j[field] = text;
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

StatusOr<std::string> record_text(const StageRecord& r, const std::string& field, const std::string& where) {
  json j = json::parse(r.record, nullptr, false);
  auto it = j.is_object() ? j.find(field) : j.end();
  if (j.is_discarded() || it == j.end() || !it->is_string())
    return DataLoss(where + ": record of document " + std::to_string(r.doc) + " has no string '" + field + "'",
                    "remove the .tmp directory of the run and start it again");
  return it->get<std::string>();
}


StatusOr<bool> read_record_batch(StageReader& reader, const CleanOptions& o, const std::string& where,
                                 std::vector<StageRecord>* batch, std::vector<std::string>* texts) {
  batch->clear();
  texts->clear();
  while (static_cast<int64_t>(batch->size()) < o.batch_docs) {
    StageRecord r;
    LMT_ASSIGN_OR_RETURN(const bool more, reader.next(&r));
    if (!more) return false;
    LMT_ASSIGN_OR_RETURN(std::string t, record_text(r, o.text_field, where));
    texts->push_back(std::move(t));
    batch->push_back(std::move(r));
  }
  return true;
}

Status run_record_stage(const CleanRequest& req, const std::string& in_dir, const std::string& dir, const std::string& name,
                        const Decide& decide, const std::function<json()>& extra) {
  const CleanOptions& o = req.options;
  LMT_ASSIGN_OR_RETURN(StageWriter w, StageWriter::create(dir, name));
  LMT_ASSIGN_OR_RETURN(StageReader reader, StageReader::open(in_dir + "/records.tsv"));
  if (req.progress) {
    // The documents this stage reads: those the previous stage kept (its stats.json).
    int64_t total = 0;
    std::ifstream in(in_dir + "/stats.json");
    const json stats = json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (stats.is_object()) total = stats.value("documents_out", int64_t{0});
    w.report_to(req.progress, total);
  }
  std::vector<StageRecord> batch;
  std::vector<std::string> texts;
  std::vector<RecordOutcome> outcomes;
  bool more = true;
  while (more) {
    LMT_ASSIGN_OR_RETURN(more, read_record_batch(reader, o, in_dir + "/records.tsv", &batch, &texts));
    outcomes.assign(batch.size(), RecordOutcome{});
    LMT_RETURN_IF_ERROR(decide(batch, texts, &outcomes));
    for (size_t i = 0; i < batch.size(); ++i) {
      const RecordOutcome& r = outcomes[i];
      const auto bytes = static_cast<int64_t>(texts[i].size());
      if (!r.keep) {
        LMT_RETURN_IF_ERROR(w.remove(batch[i].doc, batch[i].source, name + ":" + r.reason, bytes, texts[i], r.detail));
        continue;
      }
      if (r.new_text) {
        batch[i].record = make_record(batch[i].record, o.text_field, texts[i], *r.new_text);
        LMT_RETURN_IF_ERROR(w.keep(batch[i], bytes, static_cast<int64_t>(r.new_text->size()), true));
      } else {
        LMT_RETURN_IF_ERROR(w.keep(batch[i], bytes, bytes, false));
      }
    }
  }
  w.stats.extra = extra ? extra() : json::object();
  return w.finish();
}

// The exact-dedup key: ASCII-lowercased text with every whitespace run as one space, trimmed.
}  // namespace lmt::clean
