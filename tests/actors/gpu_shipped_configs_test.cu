// The shipped market configs learn when `foxhunt train` runs them (actors::run_training, the actor
// pipeline end to end) and `foxhunt eval` scores the final checkpoint (plan_eval + evaluate on fresh
// episodes of another seed):
//   configs/rainbow_market.toml (Rainbow on the OU market, 5M env steps): the greedy policy's Sharpe
//     net of costs reaches half the OU oracle's on the same price paths and beats buy-and-hold
//     (on an H200: 1.245 against the oracle's 1.341 and buy-and-hold's 0.157, about 40 s);
//   configs/bdq_market.toml (BDQ on 8 OU assets, 2M env steps): a positive Sharpe above
//     buy-and-hold's and the random baseline's level.
// One seed each (the config's): the pipeline overlaps collection and learning by timing, so a run is
// not bit-reproducible (run.deterministic is for resume tests); the margins above are wide.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <string>

#include "actors/evaluate.hpp"
#include "actors/train_run.hpp"
#include "tests/support/gpu_test.hpp"
#include "tests/support/paths.hpp"

using namespace foxhunt;
using namespace foxhunt::actors;
namespace fs = std::filesystem;

namespace {

const fs::path kConfigs = test::configs_dir();

const EvalRow& row(const EvalReport& r, const std::string& policy) {
  for (const auto& x : r.rows)
    if (x.policy == policy) return x;
  throw std::runtime_error("no row " + policy);
}

// Trains the shipped config to its end (a 300 s guard stops a hang) and evaluates the final checkpoint.
EvalReport train_and_evaluate(const std::string& config) {
  const fs::path dir = fs::temp_directory_path() / ("foxhunt_shipped_" + config + std::to_string(::getpid()));
  fs::remove_all(dir);
  TrainRequest req;
  req.config = load_run_config(kConfigs / (config + ".toml"));
  req.config.checkpoint.every_env_steps = 0;  // the final checkpoint only: the test reads that one
  req.config.checkpoint.replay = "never";     // eval reads the learner alone
  req.run_dir = dir;
  req.console = false;
  std::atomic<int> stop{0};
  req.stop_signal = &stop;
  req.observer = [&](const ProgressSnapshot& s) {
    if (s.seconds > 300.0) stop.store(2);
  };
  const TrainOutcome out = run_training(req);
  EXPECT_EQ(stop.load(), 0) << "the run was stopped by the test's 300 s guard";
  EXPECT_EQ(out.result.outcome.kind, RunOutcome::Kind::completed) << out.result.outcome.reason;
  EvalRequest ereq;
  ereq.checkpoints = {dir};
  ereq.episodes = 128;
  const EvalReport report = evaluate(plan_eval(ereq));
  std::printf("%s: %lld env steps, %lld updates\n%s", config.c_str(),
              static_cast<long long>(out.result.counters.env_steps),
              static_cast<long long>(out.result.counters.updates), format_eval_table(report).c_str());
  fs::remove_all(dir);
  return report;
}

class ShippedConfigs : public test::GpuTest {};

TEST_F(ShippedConfigs, RainbowMarketConfigReachesHalfTheOracleSharpe) {
  const EvalReport r = train_and_evaluate("rainbow_market");
  ASSERT_TRUE(r.market);
  const double greedy = row(r, "greedy").stats.mean_sharpe, oracle = row(r, "ou_oracle").stats.mean_sharpe,
               hold = row(r, "buy_and_hold").stats.mean_sharpe;
  EXPECT_GT(oracle, 0.0);
  EXPECT_GE(greedy, 0.5 * oracle) << "greedy " << greedy << ", oracle " << oracle;
  EXPECT_GT(greedy, hold);
}

TEST_F(ShippedConfigs, BdqMarketConfigLearnsAPositiveSharpe) {
  const EvalReport r = train_and_evaluate("bdq_market");
  ASSERT_TRUE(r.market);
  const double greedy = row(r, "greedy").stats.mean_sharpe, hold = row(r, "buy_and_hold").stats.mean_sharpe;
  EXPECT_GT(greedy, 0.0);
  EXPECT_GT(greedy, hold);
}

}  // namespace
