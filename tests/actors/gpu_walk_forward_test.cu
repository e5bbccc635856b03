// Walk-forward on history, on the device: `foxhunt train`'s code path (actors::run_training,
// run.deterministic = true) on a replay market with [split] never reads a bar past the train part.
// Two runs whose CSVs differ in every bar from train_end on (each multiplied by its own random
// factor) end with bitwise equal learners (weights, Adam moments, target, state) and environments
// (collector.env.bin, collector.obs.bin) and replay buffers; a third run whose CSV differs from
// the middle of the train part on ends with different weights, so the comparison can see a change
// of the data it trains on. (That the boundary is exact, bar train_end - 1 read and train_end not,
// is tests/rl/envs_split_test.cpp's, on the host.)
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "actors/gpu_replay_stage.hpp"
#include "actors/evaluate.hpp"
#include "actors/train_run.hpp"
#include "rl/envs/market_config.hpp"
#include "rl/envs/ohlcv_csv.hpp"
#include "tests/support/file_bytes.hpp"
#include "tests/support/gpu_test.hpp"

using namespace foxhunt;
using namespace foxhunt::actors;
namespace fs = std::filesystem;

namespace {

using foxhunt::test::bytes_of;

constexpr int kBars = 1200;
constexpr int kTrainEnd = 600;
constexpr int kValidationEnd = 900;

// Daily bars from 2001-01-01: a random walk of the close (fixed seed), every bar at or after
// `perturb_from` multiplied by its own random factor in [0.5, 2).
std::string daily_bars(int perturb_from) {
  std::mt19937_64 rng(2024);
  std::mt19937_64 other(99);
  std::normal_distribution<double> z(0.0, 0.015);
  std::uniform_real_distribution<double> factor(0.5, 2.0);
  std::string s = "date,open,high,low,close,volume\n";
  double c = 100.0;
  for (int k = 0; k < kBars; ++k) {
    c *= std::exp(z(rng));
    const double f = k >= perturb_from ? factor(other) : 1.0;
    char line[160];
    std::snprintf(line, sizeof line, "%s,%.6f,%.6f,%.6f,%.6f,1000\n",
                  rl::format_timestamp(978307200 + std::int64_t{86400} * k).c_str(), c * f, c * 1.01 * f, c * 0.99 * f,
                  c * f);
    s += line;
  }
  return s;
}

const std::string kMarket = R"([market]
assets = 1
window = 16
episode_length = 64
[process]
kind = "replay"
[replay]
files = ["prices.csv"]
[split]
train_end = )" + std::to_string(kTrainEnd) +
                            "\nvalidation_end = " + std::to_string(kValidationEnd) + R"(
[execution]
fee_bps = 5.0
half_spread_bps = 1.0
slippage = 0.1
[reward]
kind = "log_return"
scale = 100.0
)";

// 64 envs x 160 collects; updates = 0.125 * (10240 - 1024) = 1152. Every schedule is fixed by
// the config (beta constant), so the runs differ only in the data.
const std::string kRun = R"([run]
name = "walk_forward"
seed = 11
total_env_steps = 10240
deterministic = true
[env]
kind = "market"
market = "market.toml"
num_envs = 64
[replay]
capacity = 20000
batch_size = 64
n_step = 3
beta = 0.5
beta_final = 0.5
[learner]
kind = "dqn"
hidden = [64, 64]
lr = 0.001
target = "polyak"
tau = 0.01
epsilon_decay_steps = 5000
[pipeline]
replay_ratio = 0.125
learning_starts = 1024
sync_every = 2
slots = 2
batches = 2
[checkpoint]
every_env_steps = 0
replay = "final"
[logging]
timeline = false
tensorboard = false
jsonl = false
progress_interval_ms = 100
)";

const std::vector<std::string> kLearnerFiles = {"learner.online.safetensors", "learner.target.safetensors",
                                                "learner.state.bin"};
const std::vector<std::string> kEnvFiles = {"collector.env.bin", "collector.obs.bin"};
const std::vector<std::string> kReplayFiles = {GpuReplayStage::kCheckpointFile};

class WalkForward : public test::GpuTest {
 protected:
  fs::path dir_ = fs::temp_directory_path() / ("foxhunt_walk_forward_" + std::to_string(::getpid()));
  void TearDown() override {
    fs::remove_all(dir_);
    test::GpuTest::TearDown();
  }
  // A deterministic run on the market whose CSV is `csv`; the final checkpoint's directory.
  fs::path train(const std::string& name, const std::string& csv) {
    const fs::path d = dir_ / name;
    fs::create_directories(d);
    std::ofstream(d / "prices.csv", std::ios::binary) << csv;
    std::ofstream(d / "market.toml") << kMarket;
    std::ofstream(d / "run.toml") << kRun;
    TrainRequest req;
    req.config = load_run_config(d / "run.toml");
    req.run_dir = d / "run";
    req.console = false;
    std::atomic<int> stop{0};
    req.stop_signal = &stop;
    req.observer = [&](const ProgressSnapshot& s) {
      if (s.seconds > 120.0) stop.store(2);  // a hang fails the test instead of blocking it
    };
    const TrainOutcome out = run_training(req);
    EXPECT_EQ(stop.load(), 0) << name << ": stopped by the test's 120 s guard";
    EXPECT_EQ(out.result.outcome.kind, RunOutcome::Kind::completed) << name << ": " << out.result.outcome.reason;
    EXPECT_EQ(out.result.counters.env_steps, 10240) << name;
    EXPECT_GT(out.result.counters.updates, 1000) << name;
    if (!out.result.final_checkpoint) {
      ADD_FAILURE() << name << ": no final checkpoint: " << out.result.checkpoint_error;
      return {};
    }
    return *out.result.final_checkpoint;
  }
};

TEST_F(WalkForward, TrainingIsBitwiseUnchangedWhenEveryBarPastTheTrainPartChanges) {
  const std::string original = daily_bars(kBars), later = daily_bars(kTrainEnd), inside = daily_bars(kTrainEnd / 2);
  ASSERT_NE(original, later);
  // The market reads as configured: the train part is bars [0, 600).
  {
    fs::create_directories(dir_ / "probe");
    std::ofstream(dir_ / "probe" / "prices.csv", std::ios::binary) << original;
    std::ofstream(dir_ / "probe" / "market.toml") << kMarket;
    const rl::MarketConfig m = rl::load_market_config(dir_ / "probe" / "market.toml");
    ASSERT_EQ(m.split.train_end.bar, kTrainEnd);
    EXPECT_EQ(rl::load_ohlcv(m).bars, kTrainEnd);
  }
  const fs::path a = train("a", original), b = train("b", later), c = train("c", inside);
  ASSERT_FALSE(a.empty() || b.empty() || c.empty());
  for (const auto& files : {kLearnerFiles, kEnvFiles, kReplayFiles})
    for (const auto& f : files) {
      SCOPED_TRACE(f);
      ASSERT_TRUE(fs::exists(a / f) && fs::exists(b / f));
      EXPECT_TRUE(bytes_of(a / f) == bytes_of(b / f)) << f << " depends on bars past split.train_end";
    }
  EXPECT_FALSE(bytes_of(a / "learner.online.safetensors") == bytes_of(c / "learner.online.safetensors"))
      << "a change of train bars left the weights unchanged: the comparison cannot see the data";
}

// `foxhunt eval --split`: the same weights on the two CSVs score the same on the train part and
// differently on the test part, whose bars differ (the default split of a market with [split]).
TEST_F(WalkForward, EvalReplaysTheChosenPart) {
  const fs::path a = train("a", daily_bars(kBars)), b = train("b", daily_bars(kTrainEnd));
  ASSERT_FALSE(a.empty() || b.empty());
  auto greedy_return = [](const fs::path& ckpt, std::optional<rl::Split> split) {
    EvalRequest req;
    req.checkpoints = {ckpt};
    req.episodes = 8;
    req.split = split;
    const EvalPlan plan = plan_eval(req);
    const EvalReport r = evaluate(plan);
    EXPECT_EQ(r.split, split ? *split : rl::Split::test);
    const std::string part = std::string(rl::to_string(r.split)) + " part: bars ";
    EXPECT_EQ(r.report.data.rfind(part, 0), 0u) << "the report names the bars it read: " << r.report.data;
    for (const auto& row : r.rows)
      if (row.policy == "greedy") return row.stats.mean_total_return;
    ADD_FAILURE() << "no greedy row";
    return 0.0;
  };
  EXPECT_EQ(greedy_return(a, rl::Split::train), greedy_return(b, rl::Split::train));
  EXPECT_NE(greedy_return(a, std::nullopt), greedy_return(b, std::nullopt));
}

}  // namespace
