// The `exact_dedup` and `minhash` stages (pipeline.h).
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include "lmt/base/xxh64.h"
#include "lmt/clean/stages.h"
#include "lmt/dedup/minhash.h"

namespace lmt::clean {
namespace fs = std::filesystem;
namespace {

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

}  // namespace

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

namespace {

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

}  // namespace

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
      LMT_ASSIGN_OR_RETURN(more, read_record_batch(reader, co, in_dir + "/records.tsv", &batch, &texts));
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

}  // namespace lmt::clean
