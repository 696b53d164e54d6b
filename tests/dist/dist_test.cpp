// Data parallelism under `mpirun -np 2` (ctest registers it so; alone it runs as world 1):
// the communicator's collectives give the right sums and slices; the loader's rank slices are
// disjoint and together make up one process's batch; W ranks × micro-batch b train exactly like one
// process × W·b (per-step losses within 1e-5 relative, the same final parameters) for ZeRO 0, 1 and 2;
// a checkpoint saved by W ranks (ZeRO-1, sharded optimizer state) resumes in one process, and one
// saved by one process resumes on W ranks. ZeRO-1 with Muon, whose shards must not split a matrix,
// matches too. Every ZeRO stage is checked over shared memory and over MPI messages.
//
// Tolerance: fp32 training; the two layouts differ only in summation order (each rank's mean over
// b·T tokens, then the sum across ranks, vs one mean over W·b·T tokens), ~1e-7 relative per step;
// 1e-5 leaves room for a few AdamW steps amplifying that. Parameters: |Δ| <= 1e-6 + 1e-4·|p| (AdamW
// normalises each element, so an element with a near-zero gradient can move a little differently);
// on AVX2-only CPUs, whose GEMMs round by the row count, 5e-5 + 1e-4·|p| (test::data_parallel_param_abs).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sched.h>
#include <unistd.h>

#include "lmt/base/bf16.h"
#include "lmt/base/rng.h"
#include "lmt/base/xxh64.h"
#include "common/mpi_trainer_runs.h"
#include "common/synthetic_dataset.h"
#include "lmt/data/dataset_writer.h"
#include "lmt/dist/communicator.h"
#include "lmt/train/trainer.h"

namespace lmt {
namespace {
namespace fs = std::filesystem;

dist::Communicator* g_comm = nullptr;
constexpr int64_t kVocab = 64;
constexpr int64_t kB = 2;  // micro-batch per rank; the single-process reference uses kB · world

class DistTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { root_ = test::make_shared_run_root(*g_comm, "lmt_dist", kVocab); }
  static void TearDownTestSuite() { test::remove_shared_run_root(*g_comm, root_); }

  config::Config recipe_config(int64_t steps, int64_t micro_batch, int zero, const std::string& optim = "adamw",
                               bool shared_memory = true) {
    config::Config c = config::Config::defaults();
    for (const char* kv : {"model.n_layers=2", "model.d_model=32", "model.n_heads=4", "model.n_kv_heads=2",
                           "model.head_dim=8", "model.ffn_hidden=64", "model.max_seq_len=64", "train.seq_len=32",
                           "train.dtype=fp32", "optim.lr=3e-3", "schedule.warmup_steps=2", "eval.batches=2",
                           "checkpoint.async=false", "dist.bucket_mb=0.01"})
      EXPECT_TRUE(c.apply_override(kv).ok()) << kv;
    EXPECT_TRUE(c.apply_override("data.path=" + (root_ / "data").string()).ok());
    EXPECT_TRUE(c.apply_override("train.max_steps=" + std::to_string(steps)).ok());
    EXPECT_TRUE(c.apply_override("train.micro_batch=" + std::to_string(micro_batch)).ok());
    EXPECT_TRUE(c.apply_override("train.zero=" + std::to_string(zero)).ok());
    EXPECT_TRUE(c.apply_override("optim.name=" + optim).ok());
    // Muon's Newton–Schulz in f32: the reduced gradients differ from one process's in the last bits
    // (another summation order), and bf16 GEMM operands turn that into bf16-sized differences
    // (~1e-4 in the loss by step 3), beyond this test's tolerances. Sharded bf16 Muon is pinned bit
    // for bit elsewhere (optimizer_test: ShardedStepsEqualAWholeStepBitForBit, default bf16).
    if (optim == "muon") {
      EXPECT_TRUE(c.apply_override("optim.muon_ns_dtype=fp32").ok());
    }
    EXPECT_TRUE(c.apply_override(std::string("dist.shared_memory=") + (shared_memory ? "true" : "false")).ok());
    // Every other step logs per-layer gradient norms, which need the full reduced gradients even
    // where ZeRO-1 would otherwise reduce only its shard (ZeRO-2 refuses the key).
    if (zero < 2) {
      EXPECT_TRUE(c.apply_override("metrics.layer_grad_norm_every=2").ok());
    }
    return c;
  }

  static std::unique_ptr<train::Trainer> make(const config::Config& c, const fs::path& run, dist::Communicator* comm,
                                              bool resume = false) {
    return test::make_trainer(c, run, comm, resume);
  }

  static std::map<int64_t, nlohmann::json> steps_of(const fs::path& run) {
    std::map<int64_t, nlohmann::json> out;
    std::ifstream in(run / "metrics.jsonl");
    std::string line;
    while (std::getline(in, line)) {
      auto j = nlohmann::json::parse(line);
      if (j.contains("loss")) out[j["step"].get<int64_t>()] = j;
    }
    return out;
  }

  // A single-process run of `steps` steps with micro-batch kB · world, private to this rank.
  std::unique_ptr<train::Trainer> reference(const std::string& name, int64_t steps, const std::string& optim = "adamw") {
    dist::SoloCommunicator solo;
    auto t = make(recipe_config(steps, kB * g_comm->world(), 0, optim), root_ / (name + "_rank" + std::to_string(g_comm->rank())), &solo);
    EXPECT_TRUE(t && t->run().ok());
    return t;
  }

  static void expect_same_run(const fs::path& a, const fs::path& b, int64_t steps) {
    auto sa = steps_of(a), sb = steps_of(b);
    ASSERT_EQ(sa.size(), static_cast<size_t>(steps));
    ASSERT_EQ(sb.size(), static_cast<size_t>(steps));
    for (int64_t s = 1; s <= steps; ++s) {
      const double la = sa[s]["loss"].get<double>(), lb = sb[s]["loss"].get<double>();
      EXPECT_NEAR(la, lb, 1e-5 * std::abs(la)) << "step " << s;
      EXPECT_EQ(sa[s]["tokens"], sb[s]["tokens"]) << "step " << s;
      if (sa[s].contains("layer_grad_norms") && sb[s].contains("layer_grad_norms")) {
        const auto na = sa[s]["layer_grad_norms"].get<std::vector<double>>();
        const auto nb = sb[s]["layer_grad_norms"].get<std::vector<double>>();
        ASSERT_EQ(na.size(), nb.size());
        for (size_t l = 0; l < na.size(); ++l) EXPECT_NEAR(na[l], nb[l], 1e-4 * na[l]) << "step " << s << " layer " << l;
      }
    }
  }

  static void expect_same_params(train::Trainer& a, train::Trainer& b) {
    const float* pa = a.model().params().as<float>();
    const float* pb = b.model().params().as<float>();
    const int64_t n = a.model().params().numel();
    ASSERT_EQ(n, b.model().params().numel());
    double worst = 0, worst_abs = 0;
    int64_t at = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double d = std::abs(double(pa[i]) - pb[i]);
      worst_abs = std::max(worst_abs, d);
      if (d - 1e-4 * std::abs(double(pa[i])) > worst) {
        worst = d - 1e-4 * std::abs(double(pa[i]));
        at = i;
      }
    }
    EXPECT_LE(worst, test::data_parallel_param_abs(1e-6))
        << "parameter " << at << ": " << pa[at] << " vs " << pb[at] << " (largest |difference| " << worst_abs << ")";
  }

  void ddp_matches_one_process(int zero, const std::string& optim = "adamw", bool shared_memory = true) {
    const int64_t steps = 6;
    const std::string name = "z" + std::to_string(zero) + optim + (shared_memory ? "_shm" : "_mpi");
    auto ref = reference("ref_" + name, steps, optim);
    ASSERT_TRUE(ref);
    const fs::path run = root_ / ("ddp_" + name);
    auto t = make(recipe_config(steps, kB, zero, optim, shared_memory), run, g_comm);
    ASSERT_TRUE(t);
    Status s = t->run();
    ASSERT_TRUE(s.ok()) << s.ToString();
    ASSERT_TRUE(g_comm->barrier().ok());
    expect_same_run(root_ / ("ref_" + name + "_rank" + std::to_string(g_comm->rank())), run, steps);
    expect_same_params(*ref, *t);  // every rank holds the full, identical parameters
    if (g_comm->world() > 1) {
      EXPECT_EQ(steps_of(run)[1].value("world", 1), g_comm->world());
    }
  }

  static fs::path root_;
};
fs::path DistTest::root_;

TEST_F(DistTest, AllReduceSumsOverRanks) {
  const int w = g_comm->world(), r = g_comm->rank();
  std::vector<float> v(1000);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(r + 1) * static_cast<float>(i);
  ASSERT_TRUE(g_comm->all_reduce_sum(v.data(), static_cast<int64_t>(v.size())).ok());
  const float ranks_sum = static_cast<float>(w * (w + 1) / 2);
  for (size_t i = 0; i < v.size(); ++i) ASSERT_EQ(v[i], ranks_sum * static_cast<float>(i)) << i;

  std::vector<float> a(37, static_cast<float>(r + 1)), b(5, 1.0f);
  auto ra = g_comm->all_reduce_sum_async(a.data(), 37);
  auto rb = g_comm->all_reduce_sum_async(b.data(), 5);
  ASSERT_TRUE(rb->wait().ok());
  ASSERT_TRUE(ra->wait().ok());
  for (float x : a) EXPECT_EQ(x, ranks_sum);
  for (float x : b) EXPECT_EQ(x, static_cast<float>(w));

  double d = 0.5 * (r + 1);
  ASSERT_TRUE(g_comm->all_reduce_sum(&d, 1).ok());
  EXPECT_DOUBLE_EQ(d, 0.5 * ranks_sum);
}

TEST_F(DistTest, ReduceScatterAndAllGatherUseTheCountsLayout) {
  const int w = g_comm->world(), r = g_comm->rank();
  std::vector<int64_t> counts(w);
  for (int i = 0; i < w; ++i) counts[i] = 3 + 2 * i;  // uneven slices
  const auto off = dist::offsets_of(counts);
  std::vector<float> send(off[w]);
  for (int64_t i = 0; i < off[w]; ++i) send[i] = static_cast<float>(i * (r + 1));
  std::vector<float> recv(counts[r], -1.0f);
  ASSERT_TRUE(g_comm->reduce_scatter_sum(send.data(), recv.data(), counts).ok());
  const float ranks_sum = static_cast<float>(w * (w + 1) / 2);
  for (int64_t j = 0; j < counts[r]; ++j) EXPECT_EQ(recv[j], ranks_sum * static_cast<float>(off[r] + j)) << j;

  std::vector<float> buf(off[w], -1.0f);
  for (int64_t j = 0; j < counts[r]; ++j) buf[off[r] + j] = static_cast<float>(100 * r + j);
  ASSERT_TRUE(g_comm->all_gather_async(buf.data(), counts)->wait().ok());
  for (int q = 0; q < w; ++q)
    for (int64_t j = 0; j < counts[q]; ++j) EXPECT_EQ(buf[off[q] + j], static_cast<float>(100 * q + j));
  // 16-bit elements (ZeRO-3 gathers bf16 blocks so): the same layout, half the bytes.
  std::vector<uint16_t> b16(off[w], 0xffff);
  for (int64_t j = 0; j < counts[r]; ++j) b16[off[r] + j] = static_cast<uint16_t>(1000 * r + j);
  ASSERT_TRUE(g_comm->all_gather_async(b16.data(), counts)->wait().ok());
  for (int q = 0; q < w; ++q)
    for (int64_t j = 0; j < counts[q]; ++j) EXPECT_EQ(b16[off[q] + j], static_cast<uint16_t>(1000 * q + j));

  int64_t token = r == 0 ? 424242 : 0;
  ASSERT_TRUE(g_comm->broadcast(&token, sizeof(token), 0).ok());
  EXPECT_EQ(token, 424242);
  EXPECT_TRUE(g_comm->barrier().ok());
  EXPECT_FALSE(g_comm->all_gather(buf.data(), std::vector<int64_t>(w + 1, 1)).ok()) << "wrong number of counts";
}

TEST_F(DistTest, DefaultThreadsShareTheCoresAmongLocalRanks) {
  cpu_set_t set;
  ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  const int allowed = CPU_COUNT(&set), online = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  EXPECT_EQ(dist::default_threads_per_rank(1), std::min(allowed, online));
  EXPECT_EQ(dist::default_threads_per_rank(online), 1);
  EXPECT_EQ(dist::default_threads_per_rank(4 * online), 1) << "never fewer than one thread";
  if (allowed == online && online >= 2) {
    EXPECT_EQ(dist::default_threads_per_rank(2), online / 2);
  }
}

TEST_F(DistTest, RanksSeeDisjointRowsThatMakeUpOneProcessBatch) {
  const int w = 2;  // checked in-process: the loader's slicing needs no MPI
  auto opts = [&](int rank, int world, int64_t batch) {
    data::LoaderOptions o;
    o.stages = {data::DataStage{0, {data::DataSource{(root_ / "data").string(), 1.0}}}};
    o.seq = 32;
    o.batch = batch;
    o.seed = 7;
    o.rank = rank;
    o.world = world;
    o.prefetch = false;
    return o;
  };
  auto one = data::Loader::open(opts(0, 1, kB * w));
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  std::vector<std::unique_ptr<data::Loader>> ranks;
  for (int r = 0; r < w; ++r) {
    auto l = data::Loader::open(opts(r, w, kB));
    ASSERT_TRUE(l.ok());
    ranks.push_back(std::move(*l));
  }
  for (int step = 0; step < 5; ++step) {
    data::Batch b1;
    ASSERT_TRUE((*one)->next(&b1).ok());
    std::multiset<std::vector<int32_t>> whole, parts;
    std::vector<std::set<std::vector<int32_t>>> per_rank(w);
    for (int64_t i = 0; i < b1.B; ++i) whole.insert({b1.tokens.begin() + i * 32, b1.tokens.begin() + (i + 1) * 32});
    for (int r = 0; r < w; ++r) {
      data::Batch b;
      ASSERT_TRUE(ranks[r]->next(&b).ok());
      for (int64_t i = 0; i < b.B; ++i) {
        std::vector<int32_t> row(b.tokens.begin() + i * 32, b.tokens.begin() + (i + 1) * 32);
        parts.insert(row);
        per_rank[r].insert(row);
      }
    }
    EXPECT_EQ(whole, parts) << "step " << step;
    for (const auto& row : per_rank[0]) EXPECT_EQ(per_rank[1].count(row), 0u) << "a row on both ranks, step " << step;
  }
}

// Shared memory (dist.shared_memory, the default on one node) and MPI messages (several nodes).
TEST_F(DistTest, Zero0MatchesOneProcessWithTheGlobalBatch) { ddp_matches_one_process(0); }
TEST_F(DistTest, Zero1MatchesOneProcessWithTheGlobalBatch) { ddp_matches_one_process(1); }
TEST_F(DistTest, Zero2MatchesOneProcessWithTheGlobalBatch) { ddp_matches_one_process(2); }
TEST_F(DistTest, Zero0OverMpiMessagesMatchesOneProcess) { ddp_matches_one_process(0, "adamw", false); }
TEST_F(DistTest, Zero1OverMpiMessagesMatchesOneProcess) { ddp_matches_one_process(1, "adamw", false); }
TEST_F(DistTest, Zero2OverMpiMessagesMatchesOneProcess) { ddp_matches_one_process(2, "adamw", false); }

// bf16: ZeRO-1 over shared memory gathers the mirror's shards instead of converting the whole model.
// Every rank must end with identical parameters and a mirror equal to their bf16 rounding.
TEST_F(DistTest, Bf16Zero1KeepsTheMirrorAndReplicasIdentical) {
  for (bool shm : {true, false}) {
    config::Config c = recipe_config(4, kB, /*zero=*/1, "adamw", shm);
    ASSERT_TRUE(c.apply_override("train.dtype=bf16").ok());
    auto t = make(c, root_ / (shm ? "bf16_shm" : "bf16_mpi"), g_comm);
    ASSERT_TRUE(t);
    Status s = t->run();
    ASSERT_TRUE(s.ok()) << s.ToString();
    const model::Transformer& m = t->model();
    const float* p = m.params().as<float>();
    const bf16* mirror = m.compute_mirror().as<bf16>();
    const int64_t n = m.params().numel();
    int64_t wrong = 0, first = -1;
    for (int64_t i = 0; i < n; ++i)
      if (mirror[i].bits != bf16::round_from_float(p[i]) && wrong++ == 0) first = i;
    EXPECT_EQ(wrong, 0) << (shm ? "shared memory" : "MPI") << ": mirror differs from bf16(params) first at " << first;
    uint64_t h = xxh64(p, static_cast<size_t>(n) * sizeof(float)), h0 = h;
    ASSERT_TRUE(g_comm->broadcast(&h0, sizeof(h0), 0).ok());
    EXPECT_EQ(h, h0) << "rank " << g_comm->rank() << "'s parameters differ from rank 0's";
  }
}

// The collectives of symmetric memory (dist/symmetric_buffer.h) on awkward, uneven ranges.
TEST_F(DistTest, SymmetricBufferCollectivesReadThePeersParts) {
  const int w = g_comm->world(), r = g_comm->rank();
  const int64_t n = 10007;  // f32 elements; odd, so slices are unaligned
  auto made = g_comm->allocate_symmetric(n * 4 + 3);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  dist::SymmetricBuffer& b = **made;
  float* f = static_cast<float*>(b.data());
  ASSERT_EQ(reinterpret_cast<uintptr_t>(f) % 64, 0u);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(f[i], 0.0f) << "zero-filled";
  // Small integers and halves: every sum is exact, whatever the order.
  auto fill = [&] {
    for (int64_t i = 0; i < n; ++i) f[i] = static_cast<float>(i % 97) * static_cast<float>(r + 1) + 0.5f * static_cast<float>(r);
  };
  auto expected = [&](int64_t i) { return static_cast<float>(i % 97) * static_cast<float>(w * (w + 1) / 2) + 0.25f * static_cast<float>(w * (w - 1)); };
  // all-reduce of [5, n - 2): the ends are left alone.
  fill();
  const float before_end = f[n - 1];
  ASSERT_TRUE(b.all_reduce_sum_f32(5, n - 7).ok());
  for (int64_t i = 5; i < n - 2; ++i) ASSERT_EQ(f[i], expected(i)) << i;
  EXPECT_EQ(f[n - 1], before_end);
  // Inexact sums (random values differ per rank) still come out bitwise the same on every rank.
  Rng rng(100 + static_cast<uint64_t>(r));
  for (int64_t i = 0; i < n; ++i) f[i] = static_cast<float>(rng.uniform()) - 0.5f;
  ASSERT_TRUE(b.all_reduce_sum_f32(0, n).ok());
  uint64_t h = xxh64(f, static_cast<size_t>(n) * 4), h0 = h;
  ASSERT_TRUE(g_comm->broadcast(&h0, sizeof(h0), 0).ok());
  EXPECT_EQ(h, h0) << "every rank holds bitwise the same sums";

  // reduce-scatter into uneven slices starting at element 3.
  fill();
  std::vector<int64_t> counts(w);
  for (int q = 0; q < w; ++q) counts[q] = 1000 + 333 * q;
  const auto off = dist::offsets_of(counts);
  ASSERT_TRUE(b.reduce_scatter_sum_f32(3, counts).ok());
  for (int64_t j = 0; j < counts[r]; ++j) ASSERT_EQ(f[3 + off[r] + j], expected(3 + off[r] + j)) << j;

  // all-gather of uneven byte slices starting at byte 1.
  auto* bytes = static_cast<uint8_t*>(b.data());
  std::vector<int64_t> bc(w);
  for (int q = 0; q < w; ++q) bc[q] = 17 + 5 * q;
  const auto boff = dist::offsets_of(bc);
  for (int64_t j = 0; j < bc[r]; ++j) bytes[1 + boff[r] + j] = static_cast<uint8_t>(31 * r + j);
  ASSERT_TRUE(b.all_gather_bytes(1, bc).ok());
  for (int q = 0; q < w; ++q)
    for (int64_t j = 0; j < bc[q]; ++j) ASSERT_EQ(bytes[1 + boff[q] + j], static_cast<uint8_t>(31 * q + j)) << q;

  // A range past the end is refused, naming the collective (every rank checks before the barrier).
  Status bad = b.all_reduce_sum_f32(1, n);
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.ToString().find("all_reduce_sum_f32"), std::string::npos) << bad.ToString();
}
// Muon orthogonalises whole matrices: the shard cuts must not split one (optim::balanced_cuts).
TEST_F(DistTest, Zero1WithMuonMatchesOneProcess) { ddp_matches_one_process(1, "muon"); }

TEST_F(DistTest, ShardedCheckpointResumesInOneProcess) {
  const int64_t steps = 6, w = g_comm->world();
  auto ref = reference("ref_resume", steps);
  ASSERT_TRUE(ref);
  const fs::path run = root_ / "saved_by_ranks";
  {
    auto t = make(recipe_config(steps, kB, /*zero=*/1), run, g_comm);
    ASSERT_TRUE(t);
    Status s = t->run(/*stop_after=*/3);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  ASSERT_TRUE(g_comm->barrier().ok());
  if (g_comm->rank() == 0) {  // continue alone, with the same global batch
    dist::SoloCommunicator solo;
    auto t = make(recipe_config(steps, kB * w, /*zero=*/0), run, &solo, /*resume=*/true);
    ASSERT_TRUE(t);
    EXPECT_EQ(t->step(), 3);
    Status s = t->run();
    ASSERT_TRUE(s.ok()) << s.ToString();
    expect_same_run(root_ / "ref_resume_rank0", run, steps);
    expect_same_params(*ref, *t);
  }
  ASSERT_TRUE(g_comm->barrier().ok());
}

// The reverse: one process (micro-batch W·b) saves, then W ranks (b each, ZeRO-1: the full optimizer
// state is sliced on loading) resume and continue exactly like the uninterrupted single process.
TEST_F(DistTest, OneProcessCheckpointResumesOnAllRanks) {
  const int64_t steps = 6, w = g_comm->world();
  auto ref = reference("ref_reverse", steps);
  ASSERT_TRUE(ref);
  const fs::path run = root_ / "saved_by_one";
  if (g_comm->rank() == 0) {
    dist::SoloCommunicator solo;
    auto t = make(recipe_config(steps, kB * w, /*zero=*/0), run, &solo);
    ASSERT_TRUE(t);
    Status s = t->run(/*stop_after=*/3);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  ASSERT_TRUE(g_comm->barrier().ok());
  auto t = make(recipe_config(steps, kB, /*zero=*/1), run, g_comm, /*resume=*/true);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->step(), 3);
  Status s = t->run();
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_TRUE(g_comm->barrier().ok());
  expect_same_run(root_ / ("ref_reverse_rank" + std::to_string(g_comm->rank())), run, steps);
  expect_same_params(*ref, *t);
}

TEST_F(DistTest, ResumingWithAnotherGlobalBatchIsRefusedWithAHint) {
  const fs::path run = root_ / "global_batch";
  {
    auto t = make(recipe_config(4, kB, /*zero=*/0), run, g_comm);
    ASSERT_TRUE(t);
    ASSERT_TRUE(t->run(/*stop_after=*/2).ok());
  }
  ASSERT_TRUE(g_comm->barrier().ok());
  if (g_comm->rank() == 0 && g_comm->world() > 1) {  // alone with the per-rank micro-batch: half the global batch
    dist::SoloCommunicator solo;
    auto c = recipe_config(4, kB, 0);
    auto recipe = train::recipe_from_config(c, "test.toml");
    ASSERT_TRUE(recipe.ok());
    auto t = train::Trainer::create(*recipe, c.to_toml(), run.string(), /*resume=*/true, &solo);
    ASSERT_FALSE(t.ok());
    EXPECT_EQ(t.status().code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(t.status().ToString().find("global batch"), std::string::npos) << t.status().ToString();
    EXPECT_NE(t.status().ToString().find("train.micro_batch"), std::string::npos) << t.status().ToString();
  }
  ASSERT_TRUE(g_comm->barrier().ok());
}

TEST_F(DistTest, BadZeroStageAndBucketSizeNameTheKey) {
  for (const auto& [kv, key] : {std::pair<std::string, std::string>{"train.zero=4", "train.zero"},
                                {"dist.bucket_mb=-1", "dist.bucket_mb"}}) {
    config::Config c = recipe_config(2, kB, 0);
    const Status s = c.apply_override(kv);  // refused where it is set: the key's range (config/schema.cpp)
    ASSERT_FALSE(s.ok()) << kv;
    EXPECT_NE(s.ToString().find("--set " + kv + ": key '" + key + "'"), std::string::npos) << s.ToString();
    EXPECT_NE(s.ToString().find("hint"), std::string::npos) << s.ToString();
  }
}

}  // namespace
}  // namespace lmt

int main(int argc, char** argv) { return lmt::test::mpi_test_main(argc, argv, &lmt::g_comm); }
