// actors::run_local_ranks (`foxhunt train --gpus N`): every rank of a data-parallel run in this
// process, one thread and one GPU per rank. On one GPU: one rank through that path (its
// communicator from NcclCommunicator::for_local_devices, its thread, rank 0's world/ scalars) ends
// bit for bit where the plain run ends, and the caller's stop reaches it (final checkpoint
// written). With two GPUs (skipped otherwise): after a deterministic DQN run both ranks hold the
// same learner weights bit for bit.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "actors/local_ranks.hpp"
#include "actors/train_run.hpp"
#include "gpu/data_parallel.hpp"
#include "gpu/device.hpp"
#include "tests/support/file_bytes.hpp"
#include "tests/support/gpu_test.hpp"

using namespace foxhunt;
using namespace foxhunt::actors;
namespace fs = std::filesystem;

namespace {

std::string dqn_config(std::int64_t total) {
  return "[run]\nname = \"local\"\nseed = 3\ntotal_env_steps = " + std::to_string(total) +
         "\ndeterministic = true\n"
         "[env]\nkind = \"cartpole\"\nnum_envs = 64\n"
         "[replay]\ncapacity = 20000\nbatch_size = 64\n"
         "[learner]\nkind = \"dqn\"\nhidden = [64, 64]\nlr = 0.0003\nepsilon_decay_steps = 4000\n"
         "[pipeline]\nreplay_ratio = 0.125\nlearning_starts = 1000\nsync_every = 4\nslots = 2\nbatches = 2\n"
         "[checkpoint]\nevery_env_steps = 0\n"
         "[logging]\ntimeline = false\ntensorboard = false\nprogress_interval_ms = 100\n";
}

class LocalRanks : public test::GpuTest {
 protected:
  fs::path dir_ = fs::temp_directory_path() / ("foxhunt_local_ranks_" + std::to_string(::getpid()));
  void TearDown() override {
    fs::remove_all(dir_);
    test::GpuTest::TearDown();
  }
  RunConfig config(const std::string& name, std::int64_t total) {
    fs::create_directories(dir_ / name);
    std::ofstream(dir_ / name / "run.toml") << dqn_config(total);
    return load_run_config(dir_ / name / "run.toml");
  }
  // Ranks 0..world-1 of `base` on devices 0..world-1, each with its rank's seed, in dir_/name.
  LocalRanksRequest ranks(const RunConfig& base, const std::string& name, int world) {
    LocalRanksRequest req;
    req.console = false;
    for (int r = 0; r < world; ++r) {
      RunConfig c = base;
      c.distributed.world = world;
      c.distributed.rank = r;
      c.run.device = r;
      c.run.seed = gpu::rank_seed(base.run.seed, r);
      req.ranks.push_back(LocalRank{c, dir_ / name / ("rank" + std::to_string(r)), std::nullopt});
    }
    return req;
  }
};

std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST_F(LocalRanks, OneRankEqualsThePlainRunAndWritesWorldScalars) {
  const RunConfig base = config("one", 8192);
  TrainRequest plain;
  plain.config = base;
  plain.run_dir = dir_ / "one" / "plain";
  plain.console = false;
  const TrainOutcome p = run_training(plain);
  ASSERT_TRUE(p.result.final_checkpoint.has_value()) << p.result.checkpoint_error;

  const LocalRanksResult out = run_local_ranks(ranks(base, "one", 1));
  ASSERT_EQ(out.ranks.size(), 1u);
  const LocalRankResult& r0 = out.ranks[0];
  ASSERT_TRUE(r0.ran) << r0.error;
  EXPECT_EQ(out.first_failed, -1) << out.cause;
  EXPECT_EQ(out.exit_code(), 0);
  EXPECT_EQ(r0.result.outcome.kind, RunOutcome::Kind::completed) << r0.result.outcome.reason;
  ASSERT_TRUE(r0.result.final_checkpoint.has_value()) << r0.result.checkpoint_error;
  EXPECT_EQ(r0.result.counters.updates, p.result.counters.updates);
  for (const char* f : {"learner.online.safetensors", "learner.target.safetensors", "learner.state.bin"})
    EXPECT_EQ(test::differing_bytes(*p.result.final_checkpoint / f, *r0.result.final_checkpoint / f), 0) << f;
  // rank 0's metrics carry the world/ aggregate (here: itself)
  const std::string metrics = read_text(dir_ / "one" / "rank0" / "metrics.jsonl");
  EXPECT_NE(metrics.find("world/ranks"), std::string::npos) << metrics.substr(0, 400);
  EXPECT_NE(metrics.find("world/env_steps"), std::string::npos);
}

TEST_F(LocalRanks, TheCallersStopReachesTheRankWhichWritesItsCheckpoint) {
  const RunConfig base = config("stop", std::int64_t{1} << 30);  // far more than the test runs
  LocalRanksRequest req = ranks(base, "stop", 1);
  std::atomic<int> stop{0};
  req.stop_signal = &stop;
  req.observer = [&stop](int, const ProgressSnapshot& s) {
    if (s.updates_done > 0) stop.store(2);  // as SIGTERM
  };
  const LocalRanksResult out = run_local_ranks(req);
  const LocalRankResult& r0 = out.ranks.at(0);
  ASSERT_TRUE(r0.ran) << r0.error;
  EXPECT_EQ(out.first_failed, -1) << out.cause;
  EXPECT_EQ(r0.result.outcome.kind, RunOutcome::Kind::stopped) << r0.result.outcome.reason;
  EXPECT_TRUE(r0.result.final_checkpoint.has_value()) << r0.result.checkpoint_error;
  EXPECT_LT(r0.result.counters.env_steps, std::int64_t{1} << 30);
  EXPECT_EQ(out.exit_code(), 0);
}

TEST_F(LocalRanks, TwoRanksOnTwoGpusHoldTheSameWeights) {
  std::string why;
  const int devices = gpu::device_count(&why);
  if (devices < 2)
    GTEST_SKIP() << "needs >= 2 CUDA devices (one rank per device; two ranks sharing one GPU are not a valid NCCL "
                    "setup), found "
                 << devices << (why.empty() ? "" : ": " + why);
  const LocalRanksResult out = run_local_ranks(ranks(config("two", 8192), "two", 2));
  ASSERT_EQ(out.first_failed, -1) << out.cause;
  for (const LocalRankResult& r : out.ranks) {
    ASSERT_TRUE(r.ran) << r.error;
    ASSERT_TRUE(r.result.final_checkpoint.has_value()) << r.result.checkpoint_error;
    EXPECT_GT(r.result.counters.updates, 10);
  }
  EXPECT_EQ(out.ranks[0].result.counters.updates, out.ranks[1].result.counters.updates);
  for (const char* f : {"learner.online.safetensors", "learner.target.safetensors"})
    EXPECT_EQ(test::differing_bytes(*out.ranks[0].result.final_checkpoint / f, *out.ranks[1].result.final_checkpoint / f),
              0)
        << f;
}

}  // namespace
