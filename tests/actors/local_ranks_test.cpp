// actors::run_local_ranks refuses a request it cannot run before anything touches a device: no
// ranks, ranks out of order or of another world, two ranks on one device (NCCL needs one GPU each).
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "actors/local_ranks.hpp"

using namespace foxhunt::actors;

namespace {

LocalRank rank(int r, int world, int device) {
  LocalRank x;
  x.config.distributed.rank = r;
  x.config.distributed.world = world;
  x.config.run.device = device;
  x.run_dir = "/nonexistent/rank" + std::to_string(r);
  return x;
}

void expect_refused(const LocalRanksRequest& req, const std::string& what) {
  try {
    (void)run_local_ranks(req);
    ADD_FAILURE() << "accepted; expected a refusal naming " << what;
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
  }
}

TEST(LocalRanksRequest, RefusedBeforeAnyDeviceIsTouched) {
  expect_refused(LocalRanksRequest{}, "no ranks");
  LocalRanksRequest swapped;
  swapped.ranks = {rank(1, 2, 0), rank(0, 2, 1)};
  expect_refused(swapped, "rank 0 has distributed.rank 1");
  LocalRanksRequest world;
  world.ranks = {rank(0, 3, 0), rank(1, 3, 1)};
  expect_refused(world, "world 3 (want 0 of 2)");
  LocalRanksRequest shared;
  shared.ranks = {rank(0, 2, 0), rank(1, 2, 0)};
  expect_refused(shared, "two ranks on device 0");
}

}  // namespace
