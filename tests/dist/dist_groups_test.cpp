// Communicator groups under `mpirun -np 2` (ctest registers it so; alone, as world 1, the tests that
// need two ranks skip): Communicator::split gives each group the right size and ranks (ordered by
// key), a collective inside a group involves only that group, a symmetric buffer over a group
// follows the group's ranks, and a Topology of dp = 2 or of dp = 1 × tp = 2 builds the groups and
// coordinates dist/topology.h describes.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "lmt/dist/communicator.h"
#include "lmt/dist/topology.h"

namespace lmt::dist {
namespace {

Communicator* g_world = nullptr;

#define REQUIRE_TWO_RANKS()                                                    \
  if (g_world->world() != 2) GTEST_SKIP() << "needs mpirun -np 2 (ctest runs it so)"

// data[i] = sum over the group's ranks; each rank contributes (world rank + 1) · 10^world rank, so
// the result tells exactly which world ranks took part.
double group_sum_of_world_ranks(Communicator& group) {
  double v = (g_world->rank() + 1) * (g_world->rank() == 0 ? 1.0 : 10.0);
  EXPECT_TRUE(group.all_reduce_sum(&v, 1).ok());
  std::vector<float> f(33, static_cast<float>(g_world->rank() == 0 ? 1 : 20));
  EXPECT_TRUE(group.all_reduce_sum(f.data(), 33).ok());
  for (float x : f) EXPECT_EQ(static_cast<double>(x), v) << "f32 and f64 sums agree";
  return v;
}

TEST(DistGroupsTest, SplitByColorMakesSingletonGroupsThatSumOnlyThemselves) {
  REQUIRE_TWO_RANKS();
  auto g = g_world->split(/*color=*/g_world->rank(), /*key=*/0);
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  EXPECT_EQ((*g)->world(), 1);
  EXPECT_EQ((*g)->rank(), 0);
  EXPECT_EQ(group_sum_of_world_ranks(**g), g_world->rank() == 0 ? 1.0 : 20.0);
  EXPECT_TRUE((*g)->barrier().ok());
  EXPECT_EQ(group_sum_of_world_ranks(*g_world), 21.0) << "the world still sums both ranks";
}

TEST(DistGroupsTest, OneColorWithReversedKeysSwapsTheRanks) {
  REQUIRE_TWO_RANKS();
  auto g = g_world->split(/*color=*/7, /*key=*/-g_world->rank());
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  Communicator& c = **g;
  EXPECT_EQ(c.world(), 2);
  EXPECT_EQ(c.rank(), 1 - g_world->rank());
  EXPECT_EQ(group_sum_of_world_ranks(c), 21.0);
  // Root 0 of the group is world rank 1.
  int token = g_world->rank() == 1 ? 4242 : 0;
  ASSERT_TRUE(c.broadcast(&token, sizeof(token), 0).ok());
  EXPECT_EQ(token, 4242);
  // Sharded layouts follow the group's ranks: group rank r receives slice r.
  const std::vector<int64_t> counts = {3, 5};
  std::vector<float> send(8);
  for (int i = 0; i < 8; ++i) send[static_cast<size_t>(i)] = static_cast<float>(i * (g_world->rank() + 1));
  std::vector<float> recv(static_cast<size_t>(counts[static_cast<size_t>(c.rank())]));
  ASSERT_TRUE(c.reduce_scatter_sum(send.data(), recv.data(), counts).ok());
  const int off = c.rank() == 0 ? 0 : 3;
  for (size_t j = 0; j < recv.size(); ++j) EXPECT_EQ(recv[j], 3.0f * static_cast<float>(off + static_cast<int>(j)));
}

TEST(DistGroupsTest, SymmetricBufferOverAGroupFollowsTheGroupRanks) {
  REQUIRE_TWO_RANKS();
  auto g = g_world->split(0, -g_world->rank());
  ASSERT_TRUE(g.ok()) << g.status().ToString();
  Communicator& c = **g;
  auto made = c.allocate_symmetric(64 * 4);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  auto* f = static_cast<float*>((*made)->data());
  for (int i = 0; i < 64; ++i) f[i] = static_cast<float>(i) * static_cast<float>(g_world->rank() + 1);
  const std::vector<int64_t> counts = {40, 24};  // group rank 0 (world rank 1) owns [0, 40)
  ASSERT_TRUE((*made)->reduce_scatter_sum_f32(0, counts).ok());
  const int lo = c.rank() == 0 ? 0 : 40, hi = c.rank() == 0 ? 40 : 64;
  for (int i = lo; i < hi; ++i) ASSERT_EQ(f[i], 3.0f * static_cast<float>(i)) << i;
  // A singleton group's buffer is private: its all-reduce leaves the values alone.
  auto alone = g_world->split(g_world->rank(), 0);
  ASSERT_TRUE(alone.ok());
  auto own = (*alone)->allocate_symmetric(16 * 4);
  ASSERT_TRUE(own.ok()) << own.status().ToString();
  auto* o = static_cast<float*>((*own)->data());
  for (int i = 0; i < 16; ++i) o[i] = static_cast<float>(g_world->rank() + 1);
  ASSERT_TRUE((*own)->all_reduce_sum_f32(0, 16).ok());
  for (int i = 0; i < 16; ++i) EXPECT_EQ(o[i], static_cast<float>(g_world->rank() + 1));
}

// all_to_all_v: rank r sends (r + 1) · (p + 1) int32 values to rank p, each value 100·r + p + i/1000-ish
// (r·1000 + p·100 + i), so every received block says who sent it, to whom and in which order;
// empty blocks and a self block included.
TEST(DistGroupsTest, AllToAllVDeliversEachBlockToItsRankInOrder) {
  REQUIRE_TWO_RANKS();
  const int r = g_world->rank(), W = g_world->world();
  std::vector<int32_t> send;
  std::vector<int64_t> sb(W), rb(W);
  for (int p = 0; p < W; ++p) {
    const int n = (r + 1) * (p + 1) - (r == 1 && p == 0 ? 2 : 0);  // rank 1 sends nothing to rank 0
    for (int i = 0; i < n; ++i) send.push_back(r * 1000 + p * 100 + i);
    sb[p] = n * 4;
  }
  for (int p = 0; p < W; ++p) rb[p] = 4 * ((p + 1) * (r + 1) - (p == 1 && r == 0 ? 2 : 0));
  std::vector<int32_t> recv(static_cast<size_t>((rb[0] + rb[1]) / 4), -1);
  ASSERT_TRUE(g_world->all_to_all_v(send.data(), sb, recv.data(), rb).ok());
  size_t k = 0;
  for (int p = 0; p < W; ++p)
    for (int i = 0; i < rb[p] / 4; ++i, ++k) EXPECT_EQ(recv[k], p * 1000 + r * 100 + i) << "from " << p << " item " << i;
  EXPECT_EQ(k, recv.size());
  // Counts of the wrong length are refused with the rank named, on every rank (no call is made).
  Status bad = g_world->all_to_all_v(send.data(), {4}, recv.data(), rb);
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.ToString().find("MPI_Alltoallv"), std::string::npos) << bad.ToString();
}

TEST(DistGroupsTest, SoloAllToAllVCopiesAndChecksSizes) {
  SoloCommunicator solo;
  const std::vector<float> in = {1.5f, -2.0f, 3.25f};
  std::vector<float> out(3, 0.0f);
  ASSERT_TRUE(solo.all_to_all_v(in.data(), {12}, out.data(), {12}).ok());
  EXPECT_EQ(out, in);
  EXPECT_EQ(solo.all_to_all_v(in.data(), {12}, out.data(), {8}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(solo.all_to_all_v(in.data(), {12, 0}, out.data(), {12}).code(), StatusCode::kInvalidArgument);
}

TEST(DistGroupsTest, NegativeColorIsRefused) {
  auto g = g_world->split(-1, 0);  // refused before any collective, on every rank
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), StatusCode::kInvalidArgument);
}

TEST(DistGroupsTest, DataParallelTopologyIsTheWholeWorld) {
  const int w = g_world->world();
  auto t = Topology::create(*g_world, {w, 1, 1});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ((*t)->dp_size(), w);
  EXPECT_EQ((*t)->dp_rank(), g_world->rank());
  EXPECT_EQ((*t)->dp().world(), w);
  EXPECT_EQ((*t)->dp().rank(), g_world->rank());
  EXPECT_EQ((*t)->tp().world(), 1);
  EXPECT_EQ((*t)->pp().world(), 1);
  EXPECT_EQ((*t)->world_size(), w);
  if (w == 2) {
    EXPECT_EQ(group_sum_of_world_ranks((*t)->dp()), 21.0);
    EXPECT_EQ(group_sum_of_world_ranks((*t)->tp()), g_world->rank() == 0 ? 1.0 : 20.0);
    EXPECT_EQ(group_sum_of_world_ranks((*t)->pp()), g_world->rank() == 0 ? 1.0 : 20.0);
  }
}

TEST(DistGroupsTest, TensorParallelTopologyPutsBothRanksInOneTpGroup) {
  REQUIRE_TWO_RANKS();
  auto t = Topology::create(*g_world, {1, 2, 1});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ((*t)->coordinates(), (Coordinates{0, g_world->rank(), 0}));
  EXPECT_EQ((*t)->dp_size(), 1);
  EXPECT_EQ((*t)->dp_rank(), 0);
  EXPECT_EQ((*t)->tp_rank(), g_world->rank());
  EXPECT_EQ((*t)->tp().world(), 2);
  EXPECT_EQ((*t)->tp().rank(), g_world->rank());
  EXPECT_EQ((*t)->dp().world(), 1);
  EXPECT_EQ(group_sum_of_world_ranks((*t)->tp()), 21.0);
  EXPECT_EQ(group_sum_of_world_ranks((*t)->dp()), g_world->rank() == 0 ? 1.0 : 20.0) << "dp sums only this rank";
  EXPECT_EQ(group_sum_of_world_ranks((*t)->pp()), g_world->rank() == 0 ? 1.0 : 20.0);
}

TEST(DistGroupsTest, SizesThatDoNotMakeTheWorldAreRefusedOnEveryRank) {
  auto t = Topology::create(*g_world, {g_world->world() + 1, 1, 1});
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().ToString().find("the job has " + std::to_string(g_world->world())), std::string::npos)
      << t.status().ToString();
  EXPECT_TRUE(g_world->barrier().ok()) << "no rank was left inside a split";
}

}  // namespace
}  // namespace lmt::dist

int main(int argc, char** argv) {
  auto comm = lmt::dist::make_communicator();
  if (!comm.ok()) {
    std::fprintf(stderr, "%s\n", comm.status().ToString().c_str());
    return 2;
  }
  lmt::dist::g_world = comm->get();
  ::testing::InitGoogleTest(&argc, argv);
  if (lmt::dist::g_world->rank() != 0) {  // one rank's report is enough; failures still set the exit code
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  return RUN_ALL_TESTS();
}
