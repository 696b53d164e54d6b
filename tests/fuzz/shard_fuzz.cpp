// shard_fuzz: the token shard reader (data/shard.h: ShardReader::open), header, doc index and tokens.
//
// Input: one flag byte, then the shard file's bytes (written to a scratch file). Flag bit 0: the
// target first stores the correct header and data checksums into the bytes, so that mutations get
// past the checksums to the checks behind them (without it, they test the checksums themselves).
// Flag bit 1: Verify::kFull, else kHeader. open() must give a reader or a Status. Checked beyond
// that: every doc index entry is below token_count, strictly increasing, and read() of every token
// stays inside the file (ASan); with kFull, every id is below vocab_size.
// Seeds: shards written by ShardWriter (2- and 4-byte tokens, a document continued from the
// previous shard, an empty one), with every flag.
//   build-fuzz/bin/shard_fuzz -max_total_time=60 -max_len=4096 CORPUS_DIR
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "lmt/base/xxh64.h"
#include "lmt/data/shard.h"

namespace {

using lmt::data::ShardHeader;

void fix_checksums(std::string& bytes) {
  if (bytes.size() < sizeof(ShardHeader)) return;
  ShardHeader h;
  std::memcpy(&h, bytes.data(), sizeof h);
  h.data_checksum = lmt::xxh64(bytes.data() + sizeof h, bytes.size() - sizeof h);
  h.header_checksum = lmt::xxh64(&h, offsetof(ShardHeader, header_checksum));
  std::memcpy(bytes.data(), &h, sizeof h);
}

void write_seeds(const std::string& dir) {
  struct Seed {
    const char* name;
    int64_t vocab;
    int32_t eos;
    std::vector<std::vector<int32_t>> docs;  // each appended as one document
    bool continued;  // the first document started in a previous shard (no doc index entry at 0)
  };
  const Seed seeds[] = {
      {"u16", 300, 0, {{5, 6, 7, 0}, {8, 0}, {299, 1, 2, 0}}, false},
      {"u32", 70000, 69999, {{65536, 3, 69999}, {69998, 69999}}, false},
      {"continued", 50, 1, {{7, 8, 1}, {9, 1}}, true},
      {"empty", 10, 0, {}, false},
  };
  for (const Seed& s : seeds) {
    const std::string tmp = lmt::fuzz::scratch_dir() + "/seed_" + s.name;
    std::remove(tmp.c_str());
    auto w = lmt::data::ShardWriter::create(tmp, {s.vocab, s.eos});
    if (!w.ok()) lmt::fuzz::fail("seed shard: " + w.status().ToString());
    for (size_t d = 0; d < s.docs.size(); ++d) {
      if (d > 0 || !s.continued) w->start_document();
      if (!w->append(s.docs[d]).ok()) lmt::fuzz::fail("seed shard append");
    }
    if (!w->finish().ok()) lmt::fuzz::fail("seed shard finish");
    const std::string bytes = lmt::fuzz::read_file(tmp);
    for (char flags = 0; flags < 4; ++flags)
      lmt::fuzz::write_file(dir + "/" + s.name + "_" + std::to_string(flags), std::string(1, flags) + bytes);
  }
}

}  // namespace

LMT_FUZZ_SEEDS(write_seeds)

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] & 1) fix_checksums(bytes);
  const bool full = data[0] & 2;
  const std::string path = lmt::fuzz::write_scratch("shard.bin", bytes);
  auto r = lmt::data::ShardReader::open(path, full ? lmt::data::Verify::kFull : lmt::data::Verify::kHeader);
  if (!r.ok()) return 0;
  const int64_t n = r->token_count();
  uint64_t prev = 0;
  for (size_t i = 0; i < r->doc_starts().size(); ++i) {
    const uint64_t s = r->doc_starts()[i];
    if (s >= static_cast<uint64_t>(n) || (i > 0 && s <= prev)) lmt::fuzz::fail("doc index entry out of order or range");
    prev = s;
  }
  std::vector<int32_t> ids(static_cast<size_t>(n));
  r->read(0, n, ids.data());
  for (int64_t i = 0; i < n; ++i) {
    if (r->token(i) != ids[static_cast<size_t>(i)]) lmt::fuzz::fail("token() and read() disagree");
    if (full && (ids[static_cast<size_t>(i)] < 0 || ids[static_cast<size_t>(i)] >= r->vocab_size()))
      lmt::fuzz::fail("id outside the vocabulary after Verify::kFull");
  }
  return 0;
}
