// `lmtrain data clean` as a user runs it: real prose documents with planted duplicates, junk and a
// benchmark item; the output read back and fed to `data prepare`; the same output for any worker
// count; resume after SIGKILL between and inside stages; malformed input; exit codes.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/files.h"
#include "common/lmtrain_cli.h"

namespace {

using lmt::test::read_bytes;
using lmt::test::write_bytes;
using nlohmann::json;
namespace fs = std::filesystem;

lmt::test::CliResult run(const std::string& args, bool with_stderr = true) { return lmt::test::run_lmtrain(args, with_stderr); }

const std::string kData = LMT_SHARED_DATA;

std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> out;
  for (std::string s; std::getline(in, s);) out.push_back(s);
  return out;
}

json last_json_line(const std::string& out) {
  const size_t p = out.rfind("\n{");
  return json::parse(p == std::string::npos ? out : out.substr(p + 1), nullptr, false);
}

class CleanCli : public lmt::test::ScratchDirTest {
 protected:
  void SetUp() override {
    ScratchDirTest::SetUp();
    const std::string prose = kData + "/corpora/medium_prose.jsonl";
    if (!fs::exists(prose)) GTEST_SKIP() << "the shared corpus is not under " << kData;
    // 30 real documents (State of the Union addresses and prose), then planted cases.
    const std::vector<std::string> all = lines_of(prose);
    ASSERT_GT(all.size(), 31u);
    const std::vector<std::string> real(all.begin(), all.begin() + 30);
    std::string docs;
    for (const auto& l : real) docs += l + "\n";
    docs += real[2] + "\n";  // an exact duplicate of document 2 (same id, same text)
    json dup_ws = json::parse(real[3]);
    dup_ws["id"] = "planted/whitespace-variant";
    dup_ws["text"] = "  " + dup_ws["text"].get<std::string>() + "\r\n";  // the same after normalisation
    docs += dup_ws.dump() + "\n";
    json lorem = json::parse(real[4]);
    lorem["id"] = "planted/lorem";
    lorem["text"] = lorem["text"].get<std::string>() + "\nLorem ipsum dolor sit amet, consectetur adipiscing elit.";
    docs += lorem.dump() + "\n";
    json bench = json::parse(all[30]);  // not otherwise in the input (else it is a near duplicate)
    bench["id"] = "planted/arc";
    bench["text"] = bench["text"].get<std::string>() +
                    "\nWhich statement best explains why photosynthesis is the foundation of most food webs? Sunlight.";
    docs += bench.dump() + "\n";
    // A near duplicate of document 6: two words changed in its first sentence.
    json near = json::parse(real[6]);
    near["id"] = "planted/near-duplicate";
    std::string t = near["text"];
    const size_t sp = t.find(' ', 40);
    t.replace(sp, 1, " indeed truly ");
    near["text"] = t;
    docs += near.dump() + "\n";
    docs += "\n{\"id\": \"planted/short\", \"text\": \"Too short to keep.\", \"extra\": [1, 2.50, {\"k\": null}]}\n";
    write_bytes(path("docs.jsonl"), docs);
    arc_ = kData + "/eval/arc/arc_easy.llmfoundry.jsonl";
  }

  std::string clean(const std::string& out, const std::string& extra = "") {
    return "data clean --input " + path("docs.jsonl") + " --out " + out + " --decontaminate " + arc_ + " " + extra;
  }

  std::string arc_;
};

TEST_F(CleanCli, CleansKeepsFieldsAndFeedsPrepare) {
  auto r = run(clean(path("out"), "--threads 2 --json"), false);
  ASSERT_EQ(r.code, 0) << r.out;
  json s = last_json_line(r.out);
  ASSERT_FALSE(s.is_discarded()) << r.out;
  EXPECT_EQ(s["documents_in"], 36);
  json removed = s["removed"];
  EXPECT_EQ(removed["exact_dedup:duplicate"]["documents"], 2) << removed.dump();
  EXPECT_EQ(removed["c4:lorem_ipsum"]["documents"], 1) << removed.dump();
  EXPECT_EQ(removed["minhash:near_duplicate"]["documents"], 1) << removed.dump();
  EXPECT_EQ(removed["decontaminate:arc_easy"]["documents"], 1) << removed.dump();
  // 4 words: its top 2-gram ("Too short", 9 of 18 characters) fails the repetition filter, which
  // runs first as in FineWeb's pipeline.
  EXPECT_EQ(removed["gopher_repetition:top_2_gram"]["documents"], 1) << removed.dump();

  // Every output record is an input record with its other fields as they were; ids are unique.
  std::map<std::string, json> inputs;
  for (const auto& l : lines_of(path("docs.jsonl")))
    if (!l.empty()) inputs.emplace(json::parse(l)["id"].get<std::string>(), json::parse(l));
  std::set<std::string> ids, input_lines;
  for (const auto& l : lines_of(path("docs.jsonl"))) input_lines.insert(l);
  int64_t docs = 0, verbatim = 0;
  for (const auto& e : fs::directory_iterator(path("out"))) {
    if (e.path().filename().string().rfind("shard_", 0) != 0) continue;
    for (const auto& l : lines_of(e.path().string())) {
      json j = json::parse(l);
      verbatim += input_lines.count(l);  // unchanged text: the input line byte for byte
      const std::string id = j["id"];
      ASSERT_TRUE(inputs.count(id)) << id;
      EXPECT_TRUE(ids.insert(id).second) << "duplicate id " << id;
      json in = inputs[id];
      in.erase("text");
      j.erase("text");
      EXPECT_EQ(j, in);
      ++docs;
    }
  }
  EXPECT_EQ(docs, s["documents_out"].get<int64_t>());
  EXPECT_GT(verbatim, 0);
  EXPECT_FALSE(ids.count("planted/lorem"));
  EXPECT_FALSE(ids.count("planted/arc"));
  EXPECT_FALSE(ids.count("planted/whitespace-variant"));
  EXPECT_FALSE(ids.count("planted/near-duplicate"));
  EXPECT_TRUE(ids.count(json::parse(lines_of(path("docs.jsonl"))[6])["id"].get<std::string>()));

  // The report names the benchmark item found; removed samples carry their reason.
  json rep = json::parse(read_bytes(path("out/clean_report.json")));
  const json& dec = rep["stages"].back();
  EXPECT_EQ(dec["stage"], "decontaminate");
  EXPECT_EQ(dec["extra"]["files"][0]["found"][0]["line"], 1);
  EXPECT_EQ(dec["extra"]["files"][0]["task"], "arc_easy");
  EXPECT_TRUE(rep["stages"][0]["extra"]["histograms"].contains("gopher_quality.words"));
  std::set<std::string> reasons;
  for (const auto& l : lines_of(path("out/removed_sample.jsonl"))) reasons.insert(json::parse(l)["reason"].get<std::string>());
  EXPECT_TRUE(reasons.count("c4:lorem_ipsum"));
  EXPECT_TRUE(reasons.count("decontaminate:arc_easy"));
  EXPECT_FALSE(fs::exists(path("out.tmp")));

  // `data prepare` reads the output directory as it is.
  const std::string gpt2 = kData + "/tokenizers/gpt2";
  if (!fs::exists(gpt2)) GTEST_SKIP() << "no shared GPT-2 tokenizer";
  auto p = run("data prepare --tokenizer " + gpt2 + " --input " + path("out") + " --out " + path("ds") + " --json", false);
  ASSERT_EQ(p.code, 0) << p.out;
  EXPECT_EQ(last_json_line(p.out)["documents"], s["documents_out"]) << p.out;
}

TEST_F(CleanCli, DecontaminationCanOnlyReport) {
  write_bytes(path("report.toml"), "[decontaminate]\naction = \"report\"\n[minhash]\nenabled = false\n");
  auto r = run(clean(path("out"), "--json --config " + path("report.toml")), false);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_FALSE(last_json_line(r.out)["removed"].contains("decontaminate:arc_easy")) << r.out;
  json rep = json::parse(read_bytes(path("out/clean_report.json")));
  const json& dec = rep["stages"].back();
  ASSERT_EQ(dec["stage"], "decontaminate");
  ASSERT_EQ(dec["extra"]["flagged"].size(), 1u) << dec.dump();
  EXPECT_EQ(dec["extra"]["flagged"][0]["item"]["line"], 1);
  EXPECT_NE(read_bytes(path("out/shard_00000.jsonl")).find("\"planted/arc\""), std::string::npos);
  // MinHash off: the near duplicate stays.
  EXPECT_NE(read_bytes(path("out/shard_00000.jsonl")).find("\"planted/near-duplicate\""), std::string::npos);
}

TEST_F(CleanCli, SameOutputForAnyWorkerCount) {
  write_bytes(path("small_batches.toml"), "[run]\nbatch_docs = 3\n[exact_dedup]\nlines = true\n");
  write_bytes(path("big_batches.toml"), "[run]\nbatch_docs = 1000\n[exact_dedup]\nlines = true\n");
  ASSERT_EQ(run(clean(path("w1"), "--threads 1 --config " + path("big_batches.toml"))).code, 0);
  ASSERT_EQ(run(clean(path("w4"), "--threads 4 --config " + path("small_batches.toml"))).code, 0);
  ASSERT_EQ(run(clean(path("w3"), "--threads 3 --config " + path("big_batches.toml"))).code, 0);
  for (const std::string d : {"w4", "w3"}) {
    EXPECT_EQ(read_bytes(path(d + "/shard_00000.jsonl")), read_bytes(path("w1/shard_00000.jsonl"))) << d;
    EXPECT_EQ(read_bytes(path(d + "/removed_sample.jsonl")), read_bytes(path("w1/removed_sample.jsonl"))) << d;
  }
  json a = json::parse(read_bytes(path("w1/clean_report.json"))), b = json::parse(read_bytes(path("w3/clean_report.json")));
  EXPECT_EQ(a["stages"], b["stages"]);
  EXPECT_GT(read_bytes(path("w1/shard_00000.jsonl")).size(), 100000u);
}

// clean_report.json's "timing" (pipeline.h): every stage run, then `write`, with its wall seconds,
// the bytes it read (the stage's own count) and their rate; the run's total and peak RSS.
TEST_F(CleanCli, ReportsStageTimesAndPeakMemory) {
  auto r = run(clean(path("out"), "--threads 1 --json"), false);
  ASSERT_EQ(r.code, 0) << r.out;
  json rep = json::parse(read_bytes(path("out/clean_report.json")));
  ASSERT_TRUE(rep.contains("timing")) << rep.dump();
  const json& t = rep["timing"];
  EXPECT_EQ(t["workers"], 1);
  std::vector<std::string> names;
  double sum = 0;
  for (const auto& s : t["stages"]) {
    const std::string name = s["stage"];
    names.push_back(name);
    ASSERT_TRUE(s.contains("seconds")) << s.dump();
    const double sec = s["seconds"], mbs = s["mb_per_s"];
    const int64_t bytes = s["bytes_in"];
    EXPECT_GT(sec, 0) << name;
    EXPECT_LT(sec, 600) << name;
    EXPECT_GT(bytes, 100000) << name;  // the fixture's ~36 real documents
    EXPECT_NEAR(mbs, bytes / 1e6 / sec, 1e-6 * mbs) << name;
    sum += sec;
  }
  EXPECT_EQ(names, (std::vector<std::string>{"filter", "exact_dedup", "minhash", "decontaminate", "write"}));
  for (size_t i = 0; i + 1 < names.size(); ++i) EXPECT_EQ(t["stages"][i]["bytes_in"], rep["stages"][i]["bytes_in"]) << names[i];
  EXPECT_EQ(t["stages"][4]["bytes_in"], rep["bytes_out"]);
  EXPECT_GE(t["total_seconds"].get<double>(), sum);
  // The whole process, lmtrain's binary and the documents included: more than 1 MB, far less than 4 GB.
  EXPECT_GT(t["peak_rss_bytes"].get<int64_t>(), int64_t{1} << 20);
  EXPECT_LT(t["peak_rss_bytes"].get<int64_t>(), int64_t{4} << 30);
  // The --json summary carries the same object.
  EXPECT_EQ(last_json_line(r.out)["timing"], t);
}

struct FileId {
  ino_t ino;
  int64_t mtime_ns;
  bool operator==(const FileId&) const = default;
};
FileId file_id(const std::string& p) {
  struct stat st {};
  EXPECT_EQ(::stat(p.c_str(), &st), 0) << p;
  return {st.st_ino, static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec};
}

TEST_F(CleanCli, ResumesAfterKill) {
  ASSERT_EQ(run(clean(path("ref"), "--threads 2")).code, 0);
  const std::string out = path("out");
  // Killed inside the first stage: nothing finished, the rerun (killed after the stage) redoes it.
  const std::string bin = std::string(LMTRAIN_BIN) + " ";
  const int k0 = std::system(("LMT_CLEAN_FAULT=during:filter:10 " + bin + clean(out, "--threads 2") + " >/dev/null 2>&1").c_str());
  EXPECT_NE(k0, 0);
  EXPECT_FALSE(fs::exists(out));
  EXPECT_FALSE(fs::exists(out + ".tmp/filter/DONE"));
  ASSERT_TRUE(fs::exists(out + ".tmp/filter/records.tsv"));
  auto r1 = run(clean(out, "--threads 2"));
  ASSERT_EQ(r1.code, 0) << r1.out;  // redoes the unfinished stage and finishes
  EXPECT_EQ(read_bytes(out + "/shard_00000.jsonl"), read_bytes(path("ref/shard_00000.jsonl")));
  EXPECT_EQ(json::parse(read_bytes(out + "/clean_report.json"))["stages"], json::parse(read_bytes(path("ref/clean_report.json")))["stages"]);

  // Killed after the filter stage, then inside exact_dedup: the finished stage is not redone.
  const std::string out2 = path("out2");
  std::system(("LMT_CLEAN_FAULT=after:filter " + bin + clean(out2, "--threads 2") + " >/dev/null 2>&1").c_str());
  EXPECT_FALSE(fs::exists(out2));
  ASSERT_TRUE(fs::exists(out2 + ".tmp/filter/DONE"));
  const FileId before = file_id(out2 + ".tmp/filter/records.tsv");
  std::system(("LMT_CLEAN_FAULT=during:exact_dedup:5 " + bin + clean(out2, "--threads 2") + " >/dev/null 2>&1").c_str());
  EXPECT_FALSE(fs::exists(out2));
  EXPECT_FALSE(fs::exists(out2 + ".tmp/exact_dedup/DONE"));
  EXPECT_TRUE(file_id(out2 + ".tmp/filter/records.tsv") == before);
  auto r2 = run(clean(out2, "--threads 1 --json"), false);
  ASSERT_EQ(r2.code, 0) << r2.out;
  EXPECT_EQ(last_json_line(r2.out)["resumed_stages"], json::array({"filter"}));
  const json resumed_timing = last_json_line(r2.out)["timing"]["stages"][0];  // skipped: no time of its own
  EXPECT_EQ(resumed_timing["stage"], "filter");
  EXPECT_EQ(resumed_timing["resumed"], true);
  EXPECT_FALSE(resumed_timing.contains("seconds"));
  EXPECT_EQ(read_bytes(out2 + "/shard_00000.jsonl"), read_bytes(path("ref/shard_00000.jsonl")));
  EXPECT_EQ(read_bytes(out2 + "/removed_sample.jsonl"), read_bytes(path("ref/removed_sample.jsonl")));

  // Killed inside, then after the MinHash stage: the rerun skips filter, exact_dedup and minhash.
  const std::string out4 = path("out4");
  std::system(("LMT_CLEAN_FAULT=during:minhash:7 " + bin + clean(out4, "--threads 2") + " >/dev/null 2>&1").c_str());
  EXPECT_FALSE(fs::exists(out4 + ".tmp/minhash/DONE"));
  std::system(("LMT_CLEAN_FAULT=after:minhash " + bin + clean(out4, "--threads 3") + " >/dev/null 2>&1").c_str());
  ASSERT_TRUE(fs::exists(out4 + ".tmp/minhash/DONE"));
  auto r4 = run(clean(out4, "--json"), false);
  ASSERT_EQ(r4.code, 0) << r4.out;
  EXPECT_EQ(last_json_line(r4.out)["resumed_stages"], json::array({"filter", "exact_dedup", "minhash"}));
  EXPECT_EQ(read_bytes(out4 + "/shard_00000.jsonl"), read_bytes(path("ref/shard_00000.jsonl")));

  // A leftover run with other settings is refused, not mixed in.
  std::system(("LMT_CLEAN_FAULT=after:filter " + bin + clean(path("out3"), "") + " >/dev/null 2>&1").c_str());
  write_bytes(path("other.toml"), "[c4]\nenabled = false\n");
  auto r3 = run(clean(path("out3"), "--config " + path("other.toml")));
  EXPECT_EQ(r3.code, 1);
  EXPECT_NE(r3.out.find("unfinished run with other inputs or settings"), std::string::npos) << r3.out;
}

TEST_F(CleanCli, MalformedInputNamesFileAndLine) {
  write_bytes(path("bad.jsonl"), "{\"text\": \"fine\"}\n\n{\"text\": broken}\n");
  auto r = run("data clean --input " + path("bad.jsonl") + " --out " + path("o"));
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.out.find(path("bad.jsonl") + ":3: not a JSON object"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("hint:"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(path("o")));
  write_bytes(path("nofield.jsonl"), "{\"body\": \"x\"}\n");
  auto f = run("data clean --input " + path("nofield.jsonl") + " --out " + path("o"));
  EXPECT_EQ(f.code, 1);
  EXPECT_NE(f.out.find(":1: no string field 'text'"), std::string::npos) << f.out;
  // --text-field picks another field.
  auto g = run("data clean --input " + path("nofield.jsonl") + " --out " + path("o2") + " --text-field body --json", false);
  EXPECT_EQ(g.code, 0) << g.out;
}

TEST_F(CleanCli, ExitCodes) {
  fs::create_directories(path("exists"));
  write_bytes(path("exists/keep.txt"), "mine");
  auto e = run(clean(path("exists")));
  EXPECT_EQ(e.code, 1);
  EXPECT_NE(e.out.find("already exists"), std::string::npos) << e.out;
  EXPECT_EQ(read_bytes(path("exists/keep.txt")), "mine");
  write_bytes(path("minhash.toml"), "[minhash]\nunit = \"byte\"\n");
  auto m = run(clean(path("m"), "--config " + path("minhash.toml")));
  EXPECT_EQ(m.code, 1);
  EXPECT_NE(m.out.find("minhash.unit"), std::string::npos) << m.out;
  write_bytes(path("typo.toml"), "[gopher_quality]\nmin_doc_word = 3\n");
  auto t = run(clean(path("t"), "--config " + path("typo.toml")));
  EXPECT_EQ(t.code, 1);
  EXPECT_NE(t.out.find("did you mean 'gopher_quality.min_doc_words'"), std::string::npos) << t.out;
  EXPECT_EQ(run("data clean --input " + path("docs.jsonl")).code, 2);  // --out is required
  EXPECT_EQ(run(clean(path("w"), "--threads -1")).code, 1);
  EXPECT_EQ(run("data clean --input " + path("nope.jsonl") + " --out " + path("n")).code, 1);
  EXPECT_EQ(run(clean(path("d"), "") + " --decontaminate " + path("docs.jsonl")).code, 1);  // not an eval file
  for (const std::string d : {"m", "t", "w", "n", "d"}) EXPECT_FALSE(fs::exists(path(d))) << d;
}

}  // namespace

namespace {

// Progress (issue #19, lmt/progress) goes to stderr, one display per stage; off a terminal it is
// plain lines: the filter stage's documents read (its total is not known in advance), then each later
// stage's documents done of those the previous stage kept. stdout keeps the --json summary alone.
TEST_F(CleanCli, ProgressPerStageOnStderr) {
  const std::string cmd = std::string(LMTRAIN_BIN) + " " + clean(path("out"), "--workers 2 --json") + " 2>" + path("err.txt");
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  ASSERT_EQ(pclose(p), 0) << out;
  const json s = json::parse(out, nullptr, false);  // stdout: exactly one JSON object
  ASSERT_FALSE(s.is_discarded()) << out;
  const std::string err = read_bytes(path("err.txt"));
  EXPECT_EQ(err.find('\r'), std::string::npos) << err;
  std::vector<std::string> filter, dedup, decon;
  std::istringstream in(err);
  for (std::string l; std::getline(in, l);) {
    if (l.rfind("clean filter ", 0) == 0) filter.push_back(l);
    if (l.rfind("clean exact_dedup ", 0) == 0) dedup.push_back(l);
    if (l.rfind("clean decontaminate ", 0) == 0) decon.push_back(l);
  }
  ASSERT_FALSE(filter.empty()) << err;
  EXPECT_EQ(filter.back().rfind("clean filter " + std::to_string(s["documents_in"].get<int>()) + " | ", 0), 0u) << filter.back();
  ASSERT_FALSE(dedup.empty()) << err;
  ASSERT_FALSE(decon.empty()) << err;
  // The last stage reads what the one before kept and keeps documents_out minus its own removals.
  const int removed_by_decon = s["removed"]["decontaminate:arc_easy"]["documents"].get<int>();
  const std::string total = std::to_string(s["documents_out"].get<int>() + removed_by_decon);
  EXPECT_EQ(decon.back().rfind("clean decontaminate " + total + "/" + total + " 100% | ", 0), 0u) << decon.back();
  EXPECT_NE(decon.back().find(" docs/s | "), std::string::npos) << decon.back();
}

}  // namespace
