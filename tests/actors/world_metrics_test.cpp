// The aggregate rank 0 writes under world/ (actors/rendezvous.hpp): env steps and rates summed,
// updates the fewest of any rank, the episode return the mean over the ranks that have one.
#include <gtest/gtest.h>

#include "actors/rendezvous.hpp"

namespace foxhunt::actors {
namespace {

TEST(WorldMetrics, SumsStepsAndRatesAndAveragesReturns) {
  const std::vector<RankMetrics> ranks{{0, 1000, 40, 250.0, 3.0, true},
                                       {1, 1200, 39, 300.0, 0.0, false},
                                       {2, 900, 41, 150.5, -1.0, true}};
  const WorldMetrics w = aggregate(ranks);
  EXPECT_EQ(w.ranks, 3);
  EXPECT_EQ(w.env_steps, 3100);
  EXPECT_EQ(w.updates, 39);
  EXPECT_DOUBLE_EQ(w.steps_per_s, 700.5);
  EXPECT_EQ(w.ranks_with_return, 2);
  EXPECT_DOUBLE_EQ(w.episode_return, 1.0);
}

TEST(WorldMetrics, NoRanksAndNoReturns) {
  const WorldMetrics none = aggregate({});
  EXPECT_EQ(none.ranks, 0);
  EXPECT_EQ(none.env_steps, 0);
  const WorldMetrics w = aggregate({{1, 5, 2, 1.0, 7.0, false}});
  EXPECT_EQ(w.ranks_with_return, 0);
  EXPECT_EQ(w.episode_return, 0.0);
  EXPECT_EQ(w.updates, 2);
}

}  // namespace
}  // namespace foxhunt::actors
