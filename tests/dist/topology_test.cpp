// The rank → coordinates mapping of dist/topology.h and the groups it implies, in one process, for
// general sizes (the MPI half, real splits under mpirun -np 2, is dist_groups_test): the layout
// is tp fastest, then dp, then pp (Megatron-LM's order), every group of an axis has exactly that
// axis's size, its members differ only along the axis and are ranked by their coordinate on it.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <vector>

#include "lmt/dist/topology.h"

namespace lmt::dist {
namespace {

const std::vector<ParallelSizes> kSizes = {{1, 1, 1}, {8, 1, 1}, {1, 8, 1}, {1, 1, 8}, {2, 2, 2}, {3, 2, 1}, {2, 3, 4}, {5, 1, 3}};

TEST(TopologyTest, CoordinatesFollowTensorThenDataThenPipeline) {
  const ParallelSizes s{2, 2, 2};  // world 8
  EXPECT_EQ(coordinates_of(0, s), (Coordinates{0, 0, 0}));
  EXPECT_EQ(coordinates_of(1, s), (Coordinates{0, 1, 0}));  // {dp, tp, pp}: tp moves first
  EXPECT_EQ(coordinates_of(2, s), (Coordinates{1, 0, 0}));
  EXPECT_EQ(coordinates_of(3, s), (Coordinates{1, 1, 0}));
  EXPECT_EQ(coordinates_of(5, s), (Coordinates{0, 1, 1}));
  EXPECT_EQ(coordinates_of(7, s), (Coordinates{1, 1, 1}));
  const ParallelSizes dp_only{4, 1, 1};  // today's runs: the data-parallel rank is the world rank
  for (int r = 0; r < 4; ++r) EXPECT_EQ(coordinates_of(r, dp_only), (Coordinates{r, 0, 0}));
}

TEST(TopologyTest, RankOfInvertsCoordinatesOf) {
  for (const ParallelSizes& s : kSizes) {
    const int world = s.dp * s.tp * s.pp;
    std::set<std::vector<int>> seen;
    for (int r = 0; r < world; ++r) {
      const Coordinates c = coordinates_of(r, s);
      EXPECT_TRUE(c.dp >= 0 && c.dp < s.dp && c.tp >= 0 && c.tp < s.tp && c.pp >= 0 && c.pp < s.pp) << r;
      EXPECT_EQ(rank_of(c, s), r);
      seen.insert({c.dp, c.tp, c.pp});
    }
    EXPECT_EQ(seen.size(), static_cast<size_t>(world)) << "every rank has its own coordinates";
  }
}

TEST(TopologyTest, GroupsHaveTheAxisSizeAndDifferOnlyAlongIt) {
  for (const ParallelSizes& s : kSizes) {
    const int world = s.dp * s.tp * s.pp;
    for (ParallelAxis axis : {ParallelAxis::kData, ParallelAxis::kTensor, ParallelAxis::kPipeline}) {
      const int size = axis == ParallelAxis::kData ? s.dp : axis == ParallelAxis::kTensor ? s.tp : s.pp;
      std::map<int, std::vector<int>> members;  // color → ranks, in key order
      for (int r = 0; r < world; ++r) {
        const GroupColor g = group_color(r, s, axis);
        EXPECT_GE(g.color, 0);
        EXPECT_LT(g.color, world / size);
        auto& m = members[g.color];
        if (static_cast<int>(m.size()) <= g.key) m.resize(static_cast<size_t>(g.key) + 1, -1);
        EXPECT_EQ(m[static_cast<size_t>(g.key)], -1) << "two ranks with key " << g.key << " in one group";
        m[static_cast<size_t>(g.key)] = r;
      }
      EXPECT_EQ(members.size(), static_cast<size_t>(world / size));
      for (const auto& [color, ranks] : members) {
        ASSERT_EQ(ranks.size(), static_cast<size_t>(size)) << "color " << color;
        const Coordinates first = coordinates_of(ranks[0], s);
        for (int k = 0; k < size; ++k) {
          const Coordinates c = coordinates_of(ranks[static_cast<size_t>(k)], s);
          // The key is the coordinate along the axis; the other two coordinates are shared.
          const bool ok = axis == ParallelAxis::kData     ? c.dp == k && c.tp == first.tp && c.pp == first.pp
                          : axis == ParallelAxis::kTensor ? c.tp == k && c.dp == first.dp && c.pp == first.pp
                                                          : c.pp == k && c.dp == first.dp && c.tp == first.tp;
          EXPECT_TRUE(ok) << "color " << color << " key " << k;
        }
      }
    }
  }
}

TEST(TopologyTest, SizesThatDoNotMakeTheWorldAreRefusedWithAHint) {
  EXPECT_TRUE(validate_sizes({2, 2, 1}, 4).ok());
  for (const auto& [s, world] : std::vector<std::pair<ParallelSizes, int>>{{{2, 2, 1}, 8}, {{3, 1, 1}, 2}, {{0, 2, 1}, 2}, {{2, -1, 1}, 2}}) {
    const Status st = validate_sizes(s, world);
    ASSERT_EQ(st.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(st.ToString().find("dp " + std::to_string(s.dp) + " × tp " + std::to_string(s.tp)), std::string::npos) << st.ToString();
    EXPECT_NE(st.ToString().find("hint"), std::string::npos) << st.ToString();
  }
  auto s = sizes_for_world(8, 2, 2);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->dp, 2);
  EXPECT_EQ(sizes_for_world(6, 4).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(sizes_for_world(4).value().dp, 4) << "tp = pp = 1: dp is the world";
}

TEST(TopologyTest, SoloWorldHasSoloGroupsAndRefusesLargerSizes) {
  SoloCommunicator world;
  auto t = Topology::create(world, {1, 1, 1});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ((*t)->dp_size(), 1);
  EXPECT_EQ((*t)->dp_rank(), 0);
  EXPECT_EQ((*t)->dp().world(), 1);
  EXPECT_STREQ((*t)->tp().name(), "solo");
  EXPECT_EQ(&(*t)->world(), &world);
  EXPECT_EQ(&(*t)->group(ParallelAxis::kPipeline), &(*t)->pp());
  auto bad = Topology::create(world, {1, 2, 1});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().ToString().find("the job has 1"), std::string::npos) << bad.status().ToString();
  EXPECT_EQ(world.split(-1, 0).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace lmt::dist
