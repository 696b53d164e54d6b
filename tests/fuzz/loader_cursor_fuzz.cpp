// loader_cursor_fuzz: the data loader's resume cursor (data/loader.h: Loader::restore), the part of
// a checkpoint's trainer_state.json that says where the data stream continues.
//
// Input: the cursor as JSON. It is parsed (nlohmann, without exceptions) and given to restore() of
// a loader over two fixture datasets in two stages (dataset_fixture.h; batch 2, seq 8, shuffled);
// restore() must accept it or give a Status. Checked beyond that: after an accepted cursor, next()
// yields batches whose ids are below vocab_size (or a Status), and the loader's own cursor() is
// accepted by restore() again.
// Seeds: the loader's cursors after 0, 1, 5 and 40 batches (stage and epoch changes), built here.
//   build-fuzz/bin/loader_cursor_fuzz -max_total_time=60 -max_len=4096 CORPUS_DIR
#include <cstdint>
#include <memory>
#include <string>

#include "dataset_fixture.h"
#include "fuzz_util.h"
#include "lmt/data/loader.h"

namespace {

std::unique_ptr<lmt::data::Loader> open_loader(const std::string& root) {
  lmt::data::LoaderOptions o;
  for (const char* name : {"a", "b"}) {
    const std::string dir = root + "/" + name;
    const lmt::data::Manifest m = lmt::fuzz::write_dataset_shards(dir);
    lmt::fuzz::write_file(dir + "/manifest.json", lmt::data::manifest_to_json(m).dump());
  }
  o.stages = {{0, {{root + "/a", 1.0}, {root + "/b", 2.0}}}, {64, {{root + "/b", 1.0}}}};
  o.batch = 2;
  o.seq = 8;
  o.seed = 1234;
  o.prefetch = false;
  auto loader = lmt::data::Loader::open(o);
  if (!loader.ok()) lmt::fuzz::fail("the fixture loader does not open: " + loader.status().ToString());
  return std::move(loader).value();
}

lmt::data::Loader& loader() {
  static std::unique_ptr<lmt::data::Loader> l = open_loader(lmt::fuzz::scratch_dir() + "/datasets");
  return *l;
}

void write_seeds(const std::string& dir) {
  auto l = open_loader(lmt::fuzz::scratch_dir() + "/seed_datasets");
  lmt::data::Batch batch;
  int done = 0;
  for (int at : {0, 1, 5, 40}) {
    for (; done < at; ++done)
      if (!l->next(&batch).ok()) lmt::fuzz::fail("the fixture loader fails");
    lmt::fuzz::write_file(dir + "/cursor_" + std::to_string(at) + ".json", l->cursor().dump(1));
  }
}

}  // namespace

LMT_FUZZ_SEEDS(write_seeds)

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const nlohmann::json j = nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  lmt::data::Loader& l = loader();
  if (!l.restore(j).ok()) return 0;
  lmt::data::Batch batch;
  for (int i = 0; i < 3; ++i) {
    if (!l.next(&batch).ok()) break;
    for (int32_t id : batch.tokens)
      if (id < 0 || id >= l.vocab_size()) lmt::fuzz::fail("id " + std::to_string(id) + " out of range");
  }
  const nlohmann::json again = l.cursor();
  if (auto s = l.restore(again); !s.ok()) lmt::fuzz::fail("the loader's own cursor is refused: " + s.ToString());
  return 0;
}
