#include "lmt/clean/pipeline.h"

#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <thread>
#include <tuple>
#include <atomic>
#include <unordered_map>
#include <unordered_set>

#include "lmt/base/xxh64.h"
#include "lmt/clean/decontaminate.h"
#include "lmt/clean/stage_io.h"
#include "lmt/dedup/minhash.h"
#include "lmt/data/prepare_inputs.h"
#include "lmt/io/atomic_dir.h"
#include "lmt/io/atomic_file.h"
#include "lmt/io/files.h"

namespace lmt::clean {
namespace fs = std::filesystem;
using nlohmann::json;
using ojson = nlohmann::ordered_json;

namespace {

constexpr size_t kSampleChars = 1000;  // text kept per removed document in removed.jsonl

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

// Runs fn(i) for i in [0, n) over `workers` threads. fn must only touch slot i of its outputs.
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
  ojson j = line.empty() ? ojson::object() : ojson::parse(line, nullptr, false);
  if (j.is_discarded() || !j.is_object()) j = ojson::object();
  j[field] = text;
  return j.dump(-1, ' ', false, ojson::error_handler_t::replace);
}

StatusOr<std::string> record_text(const StageRecord& r, const std::string& field, const std::string& where) {
  json j = json::parse(r.record, nullptr, false);
  auto it = j.is_object() ? j.find(field) : j.end();
  if (j.is_discarded() || it == j.end() || !it->is_string())
    return DataLoss(where + ": record of document " + std::to_string(r.doc) + " has no string '" + field + "'",
                    "remove the .tmp directory of the run and start it again");
  return it->get<std::string>();
}

// Counts of one stage (stats.json).
struct StageStats {
  std::string name;
  int64_t docs_in = 0, bytes_in = 0, docs_out = 0, bytes_out = 0, modified = 0;
  std::map<std::string, std::pair<int64_t, int64_t>> removed;  // reason -> (docs, bytes)
  json extra = json::object();

  json to_json() const {
    json r = json::object();
    for (const auto& [k, v] : removed) r[k] = {{"documents", v.first}, {"bytes", v.second}};
    return {{"stage", name}, {"documents_in", docs_in}, {"bytes_in", bytes_in}, {"documents_out", docs_out},
            {"bytes_out", bytes_out}, {"modified", modified}, {"removed", r}, {"extra", extra}};
  }
};

// The outputs of one stage while it runs.
class StageWriter {
 public:
  static StatusOr<StageWriter> create(const std::string& dir, const std::string& name) {
    std::error_code ec;
    fs::remove_all(dir, ec);  // an unfinished earlier attempt
    if (!fs::create_directories(dir, ec) && ec) return IoError("cannot create " + dir + ": " + ec.message());
    LMT_ASSIGN_OR_RETURN(LineWriter rec, LineWriter::create(dir + "/records.tsv"));
    LMT_ASSIGN_OR_RETURN(LineWriter rem, LineWriter::create(dir + "/removed.jsonl"));
    return StageWriter(dir, name, std::move(rec), std::move(rem));
  }

  Status keep(const StageRecord& r, int64_t bytes_in, int64_t bytes_out, bool modified) {
    ++stats.docs_in;
    stats.bytes_in += bytes_in;
    ++stats.docs_out;
    stats.bytes_out += bytes_out;
    if (modified) ++stats.modified;
    LMT_RETURN_IF_ERROR(records_.write(encode_stage_record(r)));
    return tick();
  }

  Status remove(int64_t doc, const std::string& source, const std::string& reason, int64_t bytes, const std::string& text,
                const json& detail = nullptr) {
    ++stats.docs_in;
    stats.bytes_in += bytes;
    auto& c = stats.removed[reason];
    ++c.first;
    c.second += bytes;
    json j = {{"doc", doc}, {"source", source}, {"stage", stats.name}, {"reason", reason}, {"bytes", bytes}};
    if (!detail.is_null()) j["detail"] = detail;
    j["text"] = text_sample(text);
    LMT_RETURN_IF_ERROR(removed_.write(j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n"));
    return tick();
  }

  Status finish() {
    LMT_RETURN_IF_ERROR(records_.close());
    LMT_RETURN_IF_ERROR(removed_.close());
    LMT_RETURN_IF_ERROR(io::write_file_atomically(dir_ + "/stats.json", stats.to_json().dump(1) + "\n"));
    LMT_RETURN_IF_ERROR(io::fsync_directory(dir_));
    return write_done_marker(dir_);
  }

  StageStats stats;

 private:
  StageWriter(std::string dir, const std::string& name, LineWriter rec, LineWriter rem)
      : dir_(std::move(dir)), records_(std::move(rec)), removed_(std::move(rem)), kill_at_(kill_during(name)) {
    stats.name = name;
  }
  Status tick() {
    if (kill_at_ >= 0 && stats.docs_in >= kill_at_) {
      LMT_RETURN_IF_ERROR(records_.close());  // what was written is on disk, the stage unfinished
      LMT_RETURN_IF_ERROR(removed_.close());
      std::raise(SIGKILL);
    }
    return Status::Ok();
  }
  std::string dir_;
  LineWriter records_, removed_;
  int64_t kill_at_ = -1;
};

// ---- stage 1: read, normalise, filter ----

struct FilterHistograms {
  std::map<std::string, Histogram> h;
  FilterHistograms() {
    const std::vector<double> words = {0, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 25000, 100000};
    h["gopher_quality.words"] = Histogram::with_edges(words);
    h["gopher_quality.mean_word_length"] = Histogram::linear(0, 15, 15);
    h["gopher_quality.alpha_words"] = Histogram::linear(0, 1, 20);
    h["gopher_quality.stop_words"] = Histogram::linear(0, 9, 9);
    h["gopher_quality.hash_ratio"] = Histogram::linear(0, 0.5, 10);
    h["gopher_quality.bullet_lines"] = Histogram::linear(0, 1, 20);
    h["gopher_repetition.dup_line_frac"] = Histogram::linear(0, 1, 20);
    h["gopher_repetition.dup_para_frac"] = Histogram::linear(0, 1, 20);
    h["gopher_repetition.dup_line_char_frac"] = Histogram::linear(0, 1, 20);
    h["c4.lines_kept_fraction"] = Histogram::linear(0, 1, 20);
    h["fineweb.line_punct_ratio"] = Histogram::linear(0, 1, 20);
    h["fineweb.short_line_ratio"] = Histogram::linear(0, 1, 20);
    h["fineweb.char_dup_ratio"] = Histogram::linear(0, 0.2, 20);
  }
};

struct FilterOutcome {
  Verdict verdict;                 // keep or the reason ("<filter>:<reason>")
  std::string text;                // the text after normalisation and C4's line removal
  std::vector<std::pair<const char*, double>> signals;
};

FilterOutcome filter_document(const std::string& raw_text, const CleanOptions& o) {
  FilterOutcome out;
  out.text = normalize_text(raw_text, o.normalize);
  auto fail = [&](const char* filter, const Verdict& v) {
    out.verdict = {false, std::string(filter) + ":" + v.reason};
    return out;
  };
  if (out.text.empty()) return fail("normalize", {false, "empty"});
  U32 text = decode_utf8(out.text);
  std::vector<U32View> words = split_words(text);
  if (o.gopher_repetition.enabled) {
    GopherRepetitionSignals s;
    const Verdict v = gopher_repetition(text, words, o.gopher_repetition, &s);
    out.signals.insert(out.signals.end(), {{"gopher_repetition.dup_line_frac", s.dup_line_frac},
                                           {"gopher_repetition.dup_para_frac", s.dup_para_frac},
                                           {"gopher_repetition.dup_line_char_frac", s.dup_line_char_frac}});
    if (!v.keep) return fail("gopher_repetition", v);
  }
  if (o.gopher_quality.enabled) {
    GopherQualitySignals s;
    const Verdict v = gopher_quality(text, words, o.gopher_quality, &s);
    out.signals.insert(out.signals.end(), {{"gopher_quality.words", static_cast<double>(s.words)},
                                           {"gopher_quality.mean_word_length", s.mean_word_length},
                                           {"gopher_quality.alpha_words", s.alpha_words},
                                           {"gopher_quality.stop_words", static_cast<double>(s.stop_words)},
                                           {"gopher_quality.hash_ratio", s.hash_ratio},
                                           {"gopher_quality.bullet_lines", s.bullet_lines}});
    if (!v.keep) return fail("gopher_quality", v);
  }
  if (o.c4.enabled) {
    C4Signals s;
    U32 kept;
    const Verdict v = c4_quality(text, o.c4, &kept, &s);
    out.signals.push_back({"c4.lines_kept_fraction", s.lines > 0 ? static_cast<double>(s.lines_kept) / static_cast<double>(s.lines) : 0});
    if (!v.keep) return fail("c4", v);
    if (kept != text) {
      text = std::move(kept);
      words = split_words(text);
      out.text = encode_utf8(text);
    }
  }
  if (o.fineweb.enabled) {
    FineWebSignals s;
    const Verdict v = fineweb_quality(text, words, o.fineweb, &s);
    out.signals.insert(out.signals.end(), {{"fineweb.line_punct_ratio", s.line_punct_ratio},
                                           {"fineweb.short_line_ratio", s.short_line_ratio},
                                           {"fineweb.char_dup_ratio", s.char_dup_ratio}});
    if (!v.keep) return fail("fineweb", v);
  }
  if (out.text.empty()) return fail("normalize", {false, "empty"});
  return out;
}

Status run_filter_stage(const CleanRequest& req, const std::vector<data::InputFile>& files, const std::string& dir) {
  const CleanOptions& o = req.options;
  LMT_ASSIGN_OR_RETURN(StageWriter w, StageWriter::create(dir, "filter"));
  data::DocumentReader reader(files, o.text_field);
  reader.set_keep_records(true);
  FilterHistograms hist;
  std::map<std::string, int64_t> c4_lines;
  std::vector<data::Document> batch;
  std::vector<FilterOutcome> outcomes;
  int64_t next_doc = 0;
  bool more = true;
  while (more) {
    batch.clear();
    while (static_cast<int64_t>(batch.size()) < o.batch_docs) {
      data::Document d;
      LMT_ASSIGN_OR_RETURN(more, reader.next(&d));
      if (!more) break;
      batch.push_back(std::move(d));
    }
    outcomes.assign(batch.size(), FilterOutcome{});
    parallel_for(static_cast<int64_t>(batch.size()), req.workers,
                 [&](int64_t i) { outcomes[static_cast<size_t>(i)] = filter_document(batch[static_cast<size_t>(i)].text, o); });
    for (size_t i = 0; i < batch.size(); ++i) {
      const data::Document& d = batch[i];
      FilterOutcome& r = outcomes[i];
      for (const auto& [name, v] : r.signals) hist.h.at(name).add(v);
      const int64_t doc = next_doc++;
      const auto bytes_in = static_cast<int64_t>(d.text.size());
      if (!r.verdict.keep) {
        LMT_RETURN_IF_ERROR(w.remove(doc, reader.where(d), r.verdict.reason, bytes_in, d.text));
        continue;
      }
      StageRecord rec{doc, reader.where(d), make_record(d.record, o.text_field, d.text, r.text)};
      LMT_RETURN_IF_ERROR(w.keep(rec, bytes_in, static_cast<int64_t>(r.text.size()), r.text != d.text));
    }
  }
  json h = json::object();
  for (const auto& [k, v] : hist.h) h[k] = v.to_json();
  w.stats.extra["histograms"] = h;
  return w.finish();
}

// ---- stages over records.tsv ----

struct RecordOutcome {
  bool keep = true;
  std::string reason;
  std::optional<std::string> new_text;  // set when the stage changed the text
  json detail;
};

// Runs a stage over the kept records of the previous stage, in batches: `decide` fills one outcome
// per record of the batch (texts are the records' text fields).
using Decide = std::function<Status(const std::vector<StageRecord>&, const std::vector<std::string>&, std::vector<RecordOutcome>*)>;

Status run_record_stage(const CleanRequest& req, const std::string& in_dir, const std::string& dir, const std::string& name,
                        const Decide& decide, const std::function<json()>& extra = {}) {
  const CleanOptions& o = req.options;
  LMT_ASSIGN_OR_RETURN(StageWriter w, StageWriter::create(dir, name));
  LMT_ASSIGN_OR_RETURN(StageReader reader, StageReader::open(in_dir + "/records.tsv"));
  std::vector<StageRecord> batch;
  std::vector<std::string> texts;
  std::vector<RecordOutcome> outcomes;
  bool more = true;
  while (more) {
    batch.clear();
    texts.clear();
    while (static_cast<int64_t>(batch.size()) < o.batch_docs) {
      StageRecord r;
      LMT_ASSIGN_OR_RETURN(more, reader.next(&r));
      if (!more) break;
      LMT_ASSIGN_OR_RETURN(std::string t, record_text(r, o.text_field, in_dir + "/records.tsv"));
      texts.push_back(std::move(t));
      batch.push_back(std::move(r));
    }
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
std::pair<uint64_t, uint64_t> dedup_key(const std::string& text) {
  std::string s;
  s.reserve(text.size());
  bool space = false;
  for (char c : text) {
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f') { space = !s.empty(); continue; }
    if (space) s.push_back(' ');
    space = false;
    s.push_back(c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c);
  }
  return {xxh64(s.data(), s.size(), 1), xxh64(s.data(), s.size(), 2)};
}

struct PairHash {
  size_t operator()(const std::pair<uint64_t, uint64_t>& p) const { return static_cast<size_t>(p.first ^ (p.second * 0x9E3779B97F4A7C15ull)); }
};

Status run_exact_dedup_stage(const CleanRequest& req, const std::string& in_dir, const std::string& dir) {
  const CleanOptions& o = req.options;
  std::unordered_map<std::pair<uint64_t, uint64_t>, int64_t, PairHash> seen;  // key -> first doc
  std::unordered_set<std::pair<uint64_t, uint64_t>, PairHash> lines_seen;
  int64_t lines_dropped = 0;
  Decide decide = [&](const std::vector<StageRecord>& batch, const std::vector<std::string>& texts, std::vector<RecordOutcome>* out) {
    std::vector<std::pair<uint64_t, uint64_t>> keys(batch.size());
    parallel_for(static_cast<int64_t>(batch.size()), req.workers, [&](int64_t i) { keys[static_cast<size_t>(i)] = dedup_key(texts[static_cast<size_t>(i)]); });
    for (size_t i = 0; i < batch.size(); ++i) {
      RecordOutcome& r = (*out)[i];
      auto [it, fresh] = seen.try_emplace(keys[i], batch[i].doc);
      if (!fresh) {
        r = {false, "duplicate", std::nullopt, {{"duplicate_of", it->second}}};
        continue;
      }
      if (!o.exact_dedup_lines) continue;
      std::string kept;
      std::vector<std::pair<uint64_t, uint64_t>> mine;
      bool changed = false;
      size_t start = 0;
      const std::string& t = texts[i];
      while (start <= t.size()) {
        size_t nl = t.find('\n', start);
        if (nl == std::string::npos) nl = t.size();
        const std::string line = t.substr(start, nl - start);
        start = nl + 1;
        const auto k = dedup_key(line);
        const bool counted = static_cast<int64_t>(line.size()) >= o.exact_dedup_min_line_chars && !line.empty();
        if (counted && lines_seen.count(k)) { changed = true; ++lines_dropped; continue; }
        if (counted) mine.push_back(k);
        if (!kept.empty()) kept.push_back('\n');
        kept += line;
      }
      if (changed && kept.find_first_not_of(" \t\n") == std::string::npos) {
        r = {false, "all_lines_duplicate", std::nullopt, nullptr};
        continue;
      }
      lines_seen.insert(mine.begin(), mine.end());
      if (changed) r.new_text = kept;
    }
    return Status::Ok();
  };
  return run_record_stage(req, in_dir, dir, "exact_dedup", decide, [&]() -> json {
    if (!o.exact_dedup_lines) return json::object();
    return {{"lines_dropped", lines_dropped}};
  });
}

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

dedup::MinHashOptions minhash_options(const CleanOptions& co, int64_t workers, const std::string& work_dir) {
  dedup::MinHashOptions o;
  o.ngram = co.minhash.ngram;
  o.unit = co.minhash.unit == "char" ? dedup::ShingleUnit::kChar : dedup::ShingleUnit::kWord;
  o.bands = co.minhash.bands;
  o.rows = co.minhash.rows;
  if (o.bands == 0) std::tie(o.bands, o.rows) = dedup::choose_bands_rows(co.minhash.threshold, co.minhash.num_hashes);
  o.seed = static_cast<uint64_t>(co.minhash.seed);
  o.verify = co.minhash.verify;
  o.threshold = co.minhash.threshold;
  o.work_dir = work_dir;
  o.memory_budget_bytes = co.minhash.memory_budget_mb << 20;
  o.workers = workers;
  return o;
}

// Near duplicates: signatures of every kept document (parallel), LSH clusters (lmt_dedup), then a
// pass that drops every cluster member but the first.
Status run_minhash_stage(const CleanRequest& req, const std::string& in_dir, const std::string& dir) {
  const CleanOptions& co = req.options;
  const std::string work = dir + ".work";
  std::error_code ec;
  fs::remove_all(work, ec);
  if (!fs::create_directories(work, ec) && ec) return IoError("cannot create " + work + ": " + ec.message());
  const dedup::MinHashOptions mo = minhash_options(co, req.workers, work);
  LMT_ASSIGN_OR_RETURN(std::unique_ptr<dedup::MinHashDeduper> deduper, dedup::MinHashDeduper::create(mo));
  // Pass 1: signatures; with verify, where each document's text is (for text_of).
  std::unordered_map<int64_t, size_t> position;  // doc -> record index (verify only)
  std::vector<StageRecord> batch;
  std::vector<std::string> texts, all_texts;
  {
    LMT_ASSIGN_OR_RETURN(StageReader reader, StageReader::open(in_dir + "/records.tsv"));
    bool more = true;
    while (more) {
      batch.clear();
      texts.clear();
      while (static_cast<int64_t>(batch.size()) < co.batch_docs) {
        StageRecord r;
        LMT_ASSIGN_OR_RETURN(more, reader.next(&r));
        if (!more) break;
        LMT_ASSIGN_OR_RETURN(std::string t, record_text(r, co.text_field, in_dir + "/records.tsv"));
        texts.push_back(std::move(t));
        batch.push_back(std::move(r));
      }
      std::vector<std::vector<uint64_t>> sigs(batch.size());
      parallel_for(static_cast<int64_t>(batch.size()), req.workers,
                   [&](int64_t i) { sigs[static_cast<size_t>(i)] = dedup::minhash_signature(texts[static_cast<size_t>(i)], mo); });
      for (size_t i = 0; i < batch.size(); ++i) {
        LMT_RETURN_IF_ERROR(deduper->add(batch[i].doc, sigs[i]));
        if (mo.verify) {
          position[batch[i].doc] = all_texts.size();
          all_texts.push_back(std::move(texts[i]));
        }
      }
    }
  }
  LMT_ASSIGN_OR_RETURN(dedup::DedupResult result, deduper->finish([&](int64_t doc) { return all_texts[position.at(doc)]; }));
  all_texts.clear();
  deduper.reset();
  fs::remove_all(work, ec);
  std::unordered_map<int64_t, int64_t> kept_for;
  for (size_t i = 0; i < result.removed.size(); ++i) kept_for[result.removed[i]] = result.kept_for[i];
  // Pass 2: drop the removed documents.
  Decide decide = [&](const std::vector<StageRecord>& b, const std::vector<std::string>&, std::vector<RecordOutcome>* out) {
    for (size_t i = 0; i < b.size(); ++i) {
      auto it = kept_for.find(b[i].doc);
      if (it != kept_for.end()) (*out)[i] = {false, "near_duplicate", std::nullopt, {{"duplicate_of", it->second}}};
    }
    return Status::Ok();
  };
  return run_record_stage(req, in_dir, dir, "minhash", decide, [&]() -> json {
    return {{"ngram", mo.ngram}, {"unit", co.minhash.unit}, {"bands", mo.bands}, {"rows", mo.rows},
            {"threshold", mo.threshold}, {"verify", mo.verify}, {"candidate_pairs", result.candidate_pairs},
            {"verified_pairs", result.verified_pairs}, {"rejected_pairs", result.rejected_pairs},
            {"clusters", result.clusters}};
  });
}

// ---- the final directory ----

Status write_final(const CleanRequest& req, const std::string& last_dir, const std::vector<std::string>& stage_dirs,
                   const std::string& final_dir, CleanResult* result) {
  const CleanOptions& o = req.options;
  // Shards.
  LMT_ASSIGN_OR_RETURN(StageReader reader, StageReader::open(last_dir + "/records.tsv"));
  std::optional<LineWriter> shard;
  int64_t docs = 0;
  for (StageRecord r;;) {
    LMT_ASSIGN_OR_RETURN(bool more, reader.next(&r));
    if (!more) break;
    if (!shard || shard->bytes() >= o.shard_bytes) {
      if (shard) LMT_RETURN_IF_ERROR(shard->close());
      char name[32];
      std::snprintf(name, sizeof name, "shard_%05zu.jsonl", result->shards.size());
      result->shards.push_back(name);
      shard.reset();
      LMT_ASSIGN_OR_RETURN(LineWriter w, LineWriter::create(final_dir + "/" + name));
      shard.emplace(std::move(w));
    }
    LMT_RETURN_IF_ERROR(shard->write(r.record + "\n"));
    ++docs;
  }
  if (shard) LMT_RETURN_IF_ERROR(shard->close());
  // Report and removed samples, stage by stage.
  json stages = json::array();
  LMT_ASSIGN_OR_RETURN(LineWriter samples, LineWriter::create(final_dir + "/removed_sample.jsonl"));
  std::map<std::string, int64_t> per_reason;
  json removed_total = json::object();
  for (const std::string& d : stage_dirs) {
    std::ifstream in(d + "/stats.json");
    json s = json::parse(in, nullptr, false);
    if (s.is_discarded()) return DataLoss(d + "/stats.json does not parse", "remove the .tmp directory of the run and start it again");
    for (auto& [reason, c] : s["removed"].items()) removed_total[reason] = c;
    stages.push_back(s);
    std::ifstream rem(d + "/removed.jsonl");
    for (std::string line; std::getline(rem, line);) {
      json j = json::parse(line, nullptr, false);
      if (j.is_discarded()) continue;
      if (per_reason[j.value("reason", "")]++ < o.removed_samples_per_reason) LMT_RETURN_IF_ERROR(samples.write(line + "\n"));
    }
  }
  LMT_RETURN_IF_ERROR(samples.close());
  json files = json::array();
  const json& first = stages.empty() ? json::object() : stages.front();
  json report = {{"inputs", req.inputs},
                 {"documents_in", first.value("documents_in", 0)},
                 {"bytes_in", first.value("bytes_in", 0)},
                 {"documents_out", docs},
                 {"bytes_out", stages.empty() ? 0 : stages.back().value("bytes_out", 0)},
                 {"shards", result->shards},
                 {"removed", removed_total},
                 {"stages", stages},
                 {"settings", options_fingerprint(o)}};
  result->report = report;
  LMT_RETURN_IF_ERROR(io::write_file_atomically(final_dir + "/clean_report.json", report.dump(1) + "\n"));
  return io::fsync_directory(final_dir);
}

std::string run_fingerprint(const CleanRequest& req, const std::vector<data::InputFile>& files) {
  std::string s = "lmtrain data clean v1\n" + options_fingerprint(req.options);
  for (const auto& f : files) s += "input " + f.path + " " + std::to_string(f.bytes) + "\n";
  for (const auto& d : req.decontaminate) s += "decontaminate " + d + "\n";
  return s;
}

std::string strip_slash(std::string p) {
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  return p;
}

}  // namespace

StatusOr<CleanResult> run_clean_in(const CleanRequest& req_in, bool* tmp_created);

StatusOr<CleanResult> run_clean(const CleanRequest& req) {
  // A run that fails with an error (not a kill) leaves DIR.tmp only when a stage finished there,
  // so that running it again resumes; otherwise nothing is left behind.
  bool tmp_created = false;
  StatusOr<CleanResult> r = run_clean_in(req, &tmp_created);
  if (!r.ok() && tmp_created) {
    const std::string tmp = strip_slash(req.out) + ".tmp";
    bool any_done = false;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(tmp, ec)) any_done = any_done || stage_done(e.path().string());
    if (!any_done) fs::remove_all(tmp, ec);
  }
  return r;
}

StatusOr<CleanResult> run_clean_in(const CleanRequest& req_in, bool* tmp_created) {
  CleanRequest req = req_in;
  req.out = strip_slash(req.out);
  if (req.out.empty()) return InvalidArgument("--out is empty", "name the output directory to create");
  if (fs::exists(req.out))
    return FailedPrecondition("the output " + req.out + " already exists", "choose a new --out directory (data clean never overwrites)");
  LMT_ASSIGN_OR_RETURN(std::vector<data::InputFile> files, data::list_input_files(req.inputs));
  std::optional<ContaminationIndex> index;
  if (!req.decontaminate.empty()) {
    LMT_ASSIGN_OR_RETURN(ContaminationIndex built, ContaminationIndex::build(req.decontaminate, req.options.decontaminate_ngram));
    index.emplace(std::move(built));
  }

  const std::string tmp = req.out + ".tmp";
  const std::string fingerprint = run_fingerprint(req, files);
  CleanResult result;
  std::error_code ec;
  if (fs::exists(tmp + "/run.txt")) {
    std::ifstream in(tmp + "/run.txt", std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    if (ss.str() != fingerprint)
      return FailedPrecondition(tmp + " holds an unfinished run with other inputs or settings",
                                "run it again with the same inputs and settings to resume it, or remove " + tmp + " to start over");
  } else {
    fs::remove_all(tmp, ec);
    if (!fs::create_directories(tmp, ec) && ec) return IoError("cannot create " + tmp + ": " + ec.message());
    *tmp_created = true;
    LMT_RETURN_IF_ERROR(io::write_file_atomically(tmp + "/run.txt", fingerprint));
    LMT_RETURN_IF_ERROR(io::fsync_directory(tmp));
  }

  std::vector<std::string> stage_dirs;
  std::string last;
  auto stage = [&](const std::string& name, const std::function<Status(const std::string& in, const std::string& dir)>& run) -> Status {
    const std::string dir = tmp + "/" + name;
    if (stage_done(dir)) result.resumed_stages.push_back(name);
    else {
      LMT_RETURN_IF_ERROR(run(last, dir));
      maybe_kill_after(name);
    }
    stage_dirs.push_back(dir);
    last = dir;
    return Status::Ok();
  };
  LMT_RETURN_IF_ERROR(stage("filter", [&](const std::string&, const std::string& dir) { return run_filter_stage(req, files, dir); }));
  if (req.options.exact_dedup || req.options.exact_dedup_lines)
    LMT_RETURN_IF_ERROR(stage("exact_dedup", [&](const std::string& in, const std::string& dir) { return run_exact_dedup_stage(req, in, dir); }));
  if (req.options.minhash.enabled)
    LMT_RETURN_IF_ERROR(stage("minhash", [&](const std::string& in, const std::string& dir) { return run_minhash_stage(req, in, dir); }));
  if (index)
    LMT_RETURN_IF_ERROR(stage("decontaminate", [&](const std::string& in, const std::string& dir) { return run_decontaminate_stage(req, *index, in, dir); }));

  // The final directory: staged as a hidden sibling of DIR, renamed to DIR in one step
  // (io::AtomicDirectory; it never replaces a non-empty DIR).
  LMT_ASSIGN_OR_RETURN(io::AtomicDirectory final_dir, io::AtomicDirectory::create(req.out, io::AtomicDirectory::Staging::kHidden));
  LMT_RETURN_IF_ERROR(write_final(req, last, stage_dirs, final_dir.tmp_path(), &result));
  maybe_kill_after("write");
  if (fs::exists(req.out))
    return FailedPrecondition("the output " + req.out + " appeared while the run was writing", "choose a new --out directory");
  LMT_RETURN_IF_ERROR(final_dir.commit());
  fs::remove_all(tmp, ec);  // the stages' work; a leftover is harmless
  return result;
}

}  // namespace lmt::clean
