// [distributed]: defaults, values, every bad value an error naming the key and what is allowed,
// the relations (rank < world, DQN over several ranks only deterministic, no [[agent]] tables;
// placement "split" for DQN and for PPO through the actors (not PPO's synchronous loop),
// collector_device only with it, its device per rank); the coordinator address; the config hash
// (the same for every rank, different for any other key); the per-rank seeds.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "actors/run_config.hpp"
#include "config/error.hpp"
#include "gpu/data_parallel.hpp"

using namespace foxhunt::actors;

namespace {

constexpr const char* kBase = "[run]\ndeterministic = true\n[env]\nkind = \"cartpole\"\n[learner]\nkind = \"dqn\"\n";

std::string error_of(const std::string& text) {
  try {
    parse_run_config(text);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(DistributedConfigTest, DefaultsAreOneGpu) {
  const RunConfig c = parse_run_config(kBase);
  EXPECT_EQ(c.distributed.world, 1);
  EXPECT_EQ(c.distributed.rank, 0);
  EXPECT_EQ(c.distributed.coordinator, "127.0.0.1:29400");
  EXPECT_EQ(c.distributed.bucket_bytes, 0);
  EXPECT_EQ(c.distributed.placement, "all");
  EXPECT_EQ(c.distributed.collector_device, -1);
  EXPECT_EQ(c.distributed.timeout_ms, 60'000);
}

TEST(DistributedConfigTest, ReadsValuesAndRoundTrips) {
  const RunConfig c = parse_run_config(std::string(kBase) +
                                       "[distributed]\nworld = 4\nrank = 3\ncoordinator = \"node7:31000\"\n"
                                       "bucket_bytes = 1048576\ntimeout_ms = 2500\n");
  EXPECT_EQ(c.distributed.world, 4);
  EXPECT_EQ(c.distributed.rank, 3);
  EXPECT_EQ(c.distributed.coordinator, "node7:31000");
  EXPECT_EQ(c.distributed.bucket_bytes, 1'048'576);
  EXPECT_EQ(c.distributed.timeout_ms, 2500);
  const RunConfig back = parse_run_config(resolved_toml(c), "resolved");
  EXPECT_EQ(resolved_toml(back), resolved_toml(c));
}

TEST(DistributedConfigTest, BadValuesNameTheKey) {
  const auto with = [](const std::string& table) { return std::string(kBase) + "[distributed]\n" + table; };
  struct Case {
    std::string text, key, hint;
  };
  const Case cases[] = {
      {with("world = 0\n"), "distributed.world", "1024"},
      {with("world = 2\nrank = 2\n"), "distributed.rank", "distributed.world"},
      {with("coordinator = \"localhost\"\n"), "distributed.coordinator", "host:port"},
      {with("coordinator = \"localhost:0\"\n"), "distributed.coordinator", "65535"},
      {with("coordinator = \"localhost:http\"\n"), "distributed.coordinator", "port"},
      {with("bucket_bytes = 6\n"), "distributed.bucket_bytes", "multiple of 4"},
      {with("placement = \"columns\"\n"), "distributed.placement", "\"split\""},
      {with("placement = \"split\"\ncollector_device = -2\n"), "distributed.collector_device", "-1"},
      {with("placement = \"split\"\ncollector_device = 1024\n"), "distributed.collector_device", "1023"},
      {with("collector_device = 1\n"), "distributed.collector_device", "distributed.placement"},
      {with("timeout_ms = 5\n"), "distributed.timeout_ms", "100"},
      {with("worlds = 2\n"), "distributed.worlds", "world"},
  };
  for (const auto& c : cases) {
    const std::string e = error_of(c.text);
    SCOPED_TRACE(c.text);
    EXPECT_NE(e.find(c.key), std::string::npos) << e;
    EXPECT_NE(e.find(c.hint), std::string::npos) << e;
  }
}

TEST(DistributedConfigTest, DqnOverSeveralRanksNeedsDeterministicUpdates) {
  const std::string e =
      error_of("[run]\n[env]\nkind = \"cartpole\"\n[learner]\nkind = \"dqn\"\n[distributed]\nworld = 2\n");
  EXPECT_NE(e.find("run.deterministic"), std::string::npos) << e;
  EXPECT_NE(e.find("distributed.world"), std::string::npos) << e;
  // PPO's updates follow the counts in every mode.
  EXPECT_EQ(error_of("[run]\n[env]\nkind = \"cartpole\"\n[learner]\nkind = \"ppo\"\n[distributed]\nworld = 2\n"), "");
}

TEST(DistributedConfigTest, SplitPlacementReadsTheCollectorDeviceAndRoundTrips) {
  const RunConfig c = parse_run_config(std::string(kBase) + "[distributed]\nplacement = \"split\"\ncollector_device = 2\n");
  EXPECT_EQ(c.distributed.placement, "split");
  EXPECT_EQ(c.distributed.collector_device, 2);
  const RunConfig back = parse_run_config(resolved_toml(c), "resolved");
  EXPECT_EQ(back.distributed.placement, "split");
  EXPECT_EQ(back.distributed.collector_device, 2);
  EXPECT_EQ(resolved_toml(back), resolved_toml(c));
  // The resolved "all" config keeps collector_device as a comment: it parses back.
  const RunConfig all = parse_run_config(kBase);
  EXPECT_EQ(resolved_toml(parse_run_config(resolved_toml(all), "resolved")), resolved_toml(all));
}

TEST(DistributedConfigTest, CollectorDevicePerRank) {
  RunConfig c = parse_run_config(kBase);
  c.run.device = 3;
  EXPECT_EQ(collector_device(c), 3);  // "all": the run's device
  c.distributed.placement = "split";
  EXPECT_EQ(collector_device(c), 3);  // -1: the run's device too (the copy path on one GPU)
  c.distributed.collector_device = 4;
  c.distributed.world = 4;
  c.distributed.rank = 2;
  EXPECT_EQ(collector_device(c), 6);  // collector_device + rank
  c.distributed.placement = "all";
  EXPECT_EQ(collector_device(c), 3);
}

TEST(DistributedConfigTest, SplitPlacementTakesPpoThroughTheActorsOnly) {
  const std::string ppo = "[run]\n[env]\nkind = \"cartpole\"\n[learner]\nkind = \"ppo\"\n";
  const std::string split = "[distributed]\nplacement = \"split\"\ncollector_device = 1\n";
  for (const int lag : {0, 1}) {
    const RunConfig c =
        parse_run_config(ppo + "[pipeline]\nmode = \"actors\"\npolicy_lag = " + std::to_string(lag) + "\n" + split);
    EXPECT_EQ(c.distributed.placement, "split");
    EXPECT_EQ(c.distributed.collector_device, 1);
    EXPECT_EQ(c.pipeline.policy_lag, lag);
  }
  // The synchronous loop (PPO's default mode, or named) has no stages to place.
  for (const std::string mode : {"", "[pipeline]\nmode = \"sync\"\n"}) {
    const std::string e = error_of(ppo + mode + split);
    EXPECT_NE(e.find("distributed.placement"), std::string::npos) << e;
    EXPECT_NE(e.find("pipeline.mode"), std::string::npos) << e;
    EXPECT_NE(e.find("\"actors\""), std::string::npos) << e;
  }
  std::string agents;
  try {
    (void)parse_agents_config(
        "[run]\ntotal_env_steps = 10000\n[env]\nkind = \"cartpole\"\n[distributed]\nplacement = \"split\"\n"
        "[[agent]]\nname = \"a\"\n[agent.learner]\nkind = \"dqn\"\n"
        "[[agent]]\nname = \"b\"\n[agent.learner]\nkind = \"dqn\"\n");
  } catch (const std::invalid_argument& x) {
    agents = x.what();
  }
  EXPECT_NE(agents.find("distributed.placement"), std::string::npos) << agents;
  EXPECT_NE(agents.find("runs of one agent"), std::string::npos) << agents;
}

TEST(DistributedConfigTest, CoordinatorAddress) {
  EXPECT_EQ(coordinator_address("127.0.0.1:29400"), (std::pair<std::string, std::uint16_t>{"127.0.0.1", 29400}));
  EXPECT_EQ(coordinator_address("::1:7"), (std::pair<std::string, std::uint16_t>{"::1", 7}));
  EXPECT_THROW(coordinator_address(":80"), std::invalid_argument);
  EXPECT_THROW(coordinator_address("host:65536"), std::invalid_argument);
  EXPECT_THROW(coordinator_address("host:"), std::invalid_argument);
}

TEST(DistributedConfigTest, ConfigHashIgnoresRankAndDeviceOnly) {
  RunConfig a = parse_run_config(std::string(kBase) + "[distributed]\nworld = 2\n");
  RunConfig b = a;
  b.distributed.rank = 1;
  b.run.device = 1;
  EXPECT_EQ(distributed_config_hash(a), distributed_config_hash(b));
  EXPECT_EQ(distributed_config_hash(a).size(), 16u);
  RunConfig c = a;
  c.learner.lr *= 2;
  EXPECT_NE(distributed_config_hash(a), distributed_config_hash(c));
  RunConfig d = a;
  d.distributed.world = 3;
  EXPECT_NE(distributed_config_hash(a), distributed_config_hash(d));
  // Ranks must agree on the placement (a resume may change it: apps/rank_resume.cpp).
  RunConfig e = a;
  e.distributed.placement = "split";
  EXPECT_NE(distributed_config_hash(a), distributed_config_hash(e));
}

TEST(DistributedConfigTest, RankSeedsAreDistinctAndRankZeroKeepsTheSeed) {
  using foxhunt::gpu::rank_seed;
  for (const std::uint64_t seed : {0ull, 1ull, 12345ull}) {
    EXPECT_EQ(rank_seed(seed, 0), seed);
    std::set<std::uint64_t> seen{seed};
    for (int r = 1; r < 256; ++r) EXPECT_TRUE(seen.insert(rank_seed(seed, r)).second) << "rank " << r;
  }
}
