// Resuming an N-rank run on M ranks (apps/rank_resume.hpp): which checkpoint each new rank reads
// and which files it takes from rank 0's, on run directories laid out as the ranks write them
// (files of placeholder bytes: the plan reads names, not contents); and the refusals.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <functional>
#include <fstream>
#include <string>
#include <vector>

#include "actors/run_config.hpp"
#include "apps/rank_resume.hpp"

namespace foxhunt::apps {
namespace {

namespace fs = std::filesystem;
using actors::RunConfig;

const char* kStep = "step_000000004096";

RunConfig config_of(const std::string& kind, int world, double lr = 0.001) {
  std::string text = "[run]\ndeterministic = true\ntotal_env_steps = 20000\n[env]\nkind = \"cartpole\"\nnum_envs = 8\n"
                     "[learner]\nkind = \"" + kind + "\"\nhidden = [16]\nlr = " + std::to_string(lr) +
                     "\n[distributed]\nworld = " + std::to_string(world) + "\n";
  return actors::parse_run_config(text, "test");
}

RunConfig as_rank(RunConfig c, int world, int rank) {
  c.distributed.world = world;
  c.distributed.rank = rank;
  return c;
}

void touch(const fs::path& p, const std::string& text = "x") { std::ofstream(p) << text; }

class RankResume : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("foxhunt_rank_resume_" + std::to_string(::getpid()) + "_" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  // An N-rank run as its ranks write it: <run>, <run>.rank<r>, each with checkpoints/<step>.
  fs::path write_run(const RunConfig& cfg, int world, bool dqn = true) {
    const fs::path run = root_ / "run";
    for (int r = 0; r < world; ++r) {
      const fs::path dir = r == 0 ? run : fs::path(run.string() + ".rank" + std::to_string(r));
      const fs::path ck = dir / "checkpoints" / kStep;
      fs::create_directories(ck);
      touch(dir / "config.resolved.toml", actors::resolved_toml(cfg));
      touch(ck / "config.resolved.toml", actors::resolved_toml(cfg));
      touch(ck / "counters.json", "{\"env_steps\": 4096, \"updates\": 100}");
      const std::vector<std::string> files =
          dqn ? std::vector<std::string>{"learner.online.safetensors", "learner.target.safetensors", "learner.state.bin",
                                         "replay.safetensors", "replay.pending.safetensors", "collector.json",
                                         "collector.policy.online.safetensors", "collector.env.bin", "collector.obs.bin"}
              : std::vector<std::string>{"learner.safetensors", "ppo.state", "env.state"};
      for (const auto& f : files) touch(ck / f, "rank " + std::to_string(r) + " " + f);
      touch(dir / "checkpoints" / "latest", kStep);
    }
    return run / "checkpoints" / kStep;
  }
  fs::path root_;
};

TEST_F(RankResume, MoreRanksKeepTheirShardsAndNewRanksTakeRank0sLearner) {
  const RunConfig old = config_of("dqn", 2);
  const fs::path ck0 = write_run(old, 2);
  for (int r = 0; r < 2; ++r) {
    const RankResumePlan p = plan_rank_resume(ck0, as_rank(old, 3, r));
    EXPECT_EQ(p.old_world, 2);
    ASSERT_TRUE(p.own) << "rank " << r;
    EXPECT_EQ(*p.own, (r == 0 ? root_ / "run" : root_ / "run.rank1") / "checkpoints" / kStep);
    EXPECT_TRUE(p.from_rank0.empty());
    EXPECT_TRUE(p.dropped.empty());
  }
  const RankResumePlan p2 = plan_rank_resume(ck0, as_rank(old, 3, 2));
  EXPECT_FALSE(p2.own);
  EXPECT_EQ(p2.from_rank0, (std::vector<std::string>{"config.resolved.toml", "counters.json", "learner.online.safetensors",
                                                     "learner.state.bin", "learner.target.safetensors"}));
  // The new rank's checkpoint: links to rank 0's learner files and counters, no shard, no collector.
  const fs::path dir = materialize_rank_resume(p2, root_ / "new.rank2" / "resume_from_rank0");
  std::ifstream in(dir / "learner.online.safetensors");
  std::string text;
  std::getline(in, text);
  EXPECT_EQ(text, "rank 0 learner.online.safetensors");
  EXPECT_TRUE(fs::exists(dir / "counters.json"));
  EXPECT_FALSE(fs::exists(dir / "replay.safetensors"));
  EXPECT_FALSE(fs::exists(dir / "collector.json"));
  // The own ranks' checkpoint is used in place.
  EXPECT_EQ(materialize_rank_resume(plan_rank_resume(ck0, as_rank(old, 3, 1)), root_ / "unused"),
            root_ / "run.rank1" / "checkpoints" / kStep);
  EXPECT_FALSE(fs::exists(root_ / "unused"));
}

TEST_F(RankResume, FewerRanksDropTheShardsOfTheRest) {
  const RunConfig old = config_of("dqn", 4);
  const fs::path ck0 = write_run(old, 4);
  const RankResumePlan p0 = plan_rank_resume(ck0, as_rank(old, 2, 0));
  EXPECT_EQ(p0.old_world, 4);
  EXPECT_EQ(p0.dropped, (std::vector<int>{2, 3}));
  ASSERT_TRUE(p0.own);
  EXPECT_EQ(*p0.own, ck0);
  const RankResumePlan p1 = plan_rank_resume(ck0, as_rank(old, 2, 1));
  ASSERT_TRUE(p1.own);
  EXPECT_EQ(*p1.own, root_ / "run.rank1" / "checkpoints" / kStep);
}

TEST_F(RankResume, ASingleGpuRunSpreadsOverSeveralRanks) {
  const RunConfig old = config_of("dqn", 1);
  const fs::path ck0 = write_run(old, 1);
  EXPECT_TRUE(plan_rank_resume(ck0, as_rank(old, 2, 0)).own);
  EXPECT_FALSE(plan_rank_resume(ck0, as_rank(old, 2, 1)).own);
}

TEST_F(RankResume, APlacementChangeResumes) {
  // The placement moves the roles' bytes between devices, not the bytes: a checkpoint of either
  // placement resumes under the other (docs/distributed.md, "Placement split").
  const RunConfig old = config_of("dqn", 2);
  const fs::path ck0 = write_run(old, 2);
  RunConfig split = old;
  split.distributed.placement = "split";
  split.distributed.collector_device = 2;
  EXPECT_TRUE(plan_rank_resume(ck0, as_rank(split, 2, 0)).own);
  EXPECT_TRUE(plan_rank_resume(ck0, as_rank(split, 2, 1)).own);
}

void expect_refused(const std::function<void()>& f, const std::string& what) {
  try {
    f();
    ADD_FAILURE() << "not refused; expected: " << what;
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
  }
}

TEST_F(RankResume, RefusesWhatCannotWork) {
  const RunConfig old = config_of("dqn", 2);
  const fs::path ck0 = write_run(old, 2);
  expect_refused([&] { plan_rank_resume(ck0, as_rank(config_of("ppo", 2), 2, 0)); }, "rank 0's run is dqn");
  expect_refused([&] { plan_rank_resume(ck0, as_rank(config_of("dqn", 2, 0.002), 3, 0)); }, "config hash");
  // Another rank's directory given instead of rank 0's.
  expect_refused([&] { plan_rank_resume(root_ / "run.rank1" / "checkpoints" / kStep, as_rank(old, 2, 1)); },
                 "another rank's run directory");
  // A rank of the old run whose directory or checkpoint of the step is gone.
  fs::remove_all(root_ / "run.rank1" / "checkpoints" / kStep);
  expect_refused([&] { plan_rank_resume(ck0, as_rank(old, 2, 1)); }, "rank 1 has no checkpoint");
  fs::remove_all(root_ / "run.rank1");
  expect_refused([&] { plan_rank_resume(ck0, as_rank(old, 3, 1)); }, "rank 1's run directory");
  // Rank 0's run directory gone (a checkpoint path copied from elsewhere).
  expect_refused([&] { plan_rank_resume(root_ / "gone" / "checkpoints" / kStep, as_rank(old, 2, 0)); },
                 "rank 0's run directory");
  // A checkpoint that is not inside a run directory.
  expect_refused([&] { plan_rank_resume(root_ / "loose", as_rank(old, 2, 0)); }, "resumes from rank 0's run directory");
}

TEST_F(RankResume, APpoRunResumesOnAtMostItsRanks) {
  const RunConfig old = config_of("ppo", 2);
  const fs::path ck0 = write_run(old, 2, false);
  const RankResumePlan p = plan_rank_resume(ck0, as_rank(old, 1, 0));
  EXPECT_EQ(p.dropped, (std::vector<int>{1}));
  expect_refused([&] { plan_rank_resume(ck0, as_rank(old, 3, 0)); }, "resumes on at most 2 ranks");
}

TEST(RankResumeFiles, ANewRankNeverTakesAnotherRanksShardOrEnvironments) {
  for (const char* f : {"learner.online.safetensors", "learner.safetensors", "learner.state.bin", "counters.json",
                        "config.resolved.toml"})
    EXPECT_TRUE(is_rank0_file(f)) << f;
  for (const char* f : {"replay.safetensors", "replay.pending.safetensors", "collector.json", "collector.env.bin",
                        "env.state", "ppo.state"})
    EXPECT_FALSE(is_rank0_file(f)) << f;
}

}  // namespace
}  // namespace foxhunt::apps
