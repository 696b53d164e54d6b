// The `filter` stage: read the inputs, normalise, and apply the four quality filters (pipeline.h).
#include "lmt/clean/filters.h"
#include "lmt/clean/normalize.h"
#include "lmt/clean/stages.h"

namespace lmt::clean {
namespace {

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

}  // namespace

Status run_filter_stage(const CleanRequest& req, const std::vector<data::InputFile>& files, const std::string& dir) {
  const CleanOptions& o = req.options;
  LMT_ASSIGN_OR_RETURN(StageWriter w, StageWriter::create(dir, "filter"));
  if (req.progress) w.report_to(req.progress, 0);  // documents in the raw inputs: not known before the end
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


}  // namespace lmt::clean
