// dataset_manifest_fuzz: a prepared dataset's manifest.json (data/manifest.h: read_manifest) and
// its agreement with the shards (data/dataset.h: Dataset::open).
//
// Input: manifest.json, written into a scratch dataset directory whose shards are fixed (train: two
// shards, a document continuing from the first into the second; val: one; dataset_fixture.h).
// read_manifest() and Dataset::open() of both splits (Verify::kFull) must succeed or give a Status.
// Checked beyond that: an opened split reads back every token (read() across shard boundaries),
// each below vocab_size, and the token count is the manifest's.
// Seeds: the fixture's true manifest (which must open), and variants of it, built here.
//   build-fuzz/bin/dataset_manifest_fuzz -max_total_time=60 -max_len=4096 CORPUS_DIR
#include <cstdint>
#include <string>
#include <vector>

#include "dataset_fixture.h"
#include "fuzz_util.h"
#include "lmt/data/dataset.h"

namespace {

const std::string& fixture_dir() {
  static const std::string dir = [] {
    const std::string d = lmt::fuzz::scratch_dir() + "/dataset";
    lmt::fuzz::write_dataset_shards(d);
    return d;
  }();
  return dir;
}

void write_seeds(const std::string& dir) {
  const std::string seed_dir = lmt::fuzz::scratch_dir() + "/seed_dataset";
  const lmt::data::Manifest m = lmt::fuzz::write_dataset_shards(seed_dir);
  nlohmann::json j = lmt::data::manifest_to_json(m);
  lmt::fuzz::write_file(seed_dir + "/manifest.json", j.dump());
  for (const char* split : {"train", "val"})
    if (auto d = lmt::data::Dataset::open(seed_dir, split, lmt::data::Verify::kFull); !d.ok())
      lmt::fuzz::fail("the fixture's own manifest does not open: " + d.status().ToString());
  lmt::fuzz::write_file(dir + "/manifest.json", j.dump(2));
  lmt::fuzz::write_file(dir + "/manifest_compact.json", j.dump());
  nlohmann::json no_val = j;
  no_val["splits"]["val"] = {{"documents", 0}, {"tokens", 0}, {"shards", nlohmann::json::array()}};
  lmt::fuzz::write_file(dir + "/manifest_no_val.json", no_val.dump(1));
  nlohmann::json swapped = j;
  std::swap(swapped["splits"]["train"]["shards"][0], swapped["splits"]["train"]["shards"][1]);
  lmt::fuzz::write_file(dir + "/manifest_swapped.json", swapped.dump(1));
}

void check_split(const std::string& split) {
  auto d = lmt::data::Dataset::open(fixture_dir(), split, lmt::data::Verify::kFull);
  if (!d.ok()) return;
  const int64_t n = (*d)->token_count();
  if (n != (*d)->manifest().split(split)->tokens) lmt::fuzz::fail(split + ": token count differs from the manifest");
  std::vector<int32_t> ids(static_cast<size_t>(n));
  (*d)->read(0, n, ids.data());
  for (int32_t id : ids)
    if (id < 0 || id >= (*d)->vocab_size()) lmt::fuzz::fail(split + ": id " + std::to_string(id) + " out of range");
  (void)(*d)->document_count();
}

}  // namespace

LMT_FUZZ_SEEDS(write_seeds)

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  lmt::fuzz::write_file(fixture_dir() + "/manifest.json", lmt::fuzz::as_view(data, size));
  auto m = lmt::data::read_manifest(fixture_dir());
  if (!m.ok()) return 0;
  (void)lmt::data::manifest_to_json(*m).dump();
  check_split("train");
  check_split("val");
  return 0;
}
