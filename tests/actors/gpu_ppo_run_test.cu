// `foxhunt train` and `foxhunt eval` for learner.kind = "ppo" (actors::run_ppo_training,
// plan_eval + evaluate), on the device:
//   resume: a run of N env steps, stopped (final checkpoint) and resumed to 2N, ends bitwise
//     equal to the uninterrupted 2N run (learner.safetensors with Adam's moments, ppo.state,
//     env.state), for a Gaussian policy on 4 continuous assets and a recurrent one on CartPole
//     without velocities (its LSTM state and dones in ppo.state). The learning rate is constant
//     (lr_end = lr): the anneal spans a run's own length;
//   the shipped market configs train and their final checkpoints evaluate:
//     configs/ppo_market.toml, over 4,096 paths: the greedy Sharpe reaches half the OU oracle's,
//     above buy-and-hold, and buy-and-hold's correlation to the reference (itself) reads 1;
//     configs/ppo_continuous_4asset.toml: positive, above buy-and-hold and random.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "actors/evaluate.hpp"
#include "actors/train_run.hpp"
#include "tests/support/file_bytes.hpp"
#include "tests/support/gpu_test.hpp"
#include "tests/support/paths.hpp"

using namespace foxhunt;
using namespace foxhunt::actors;
namespace fs = std::filesystem;

namespace {

using foxhunt::test::bytes_of;
using foxhunt::test::differing_bytes;

std::string ppo_config(std::int64_t total, bool recurrent) {
  const std::string env = recurrent ? std::string("[env]\nkind = \"cartpole\"\nnum_envs = 16\nobserve = [0, 2]\n")
                                    : "[env]\nkind = \"market\"\nmarket = \"" +
                                          (test::configs_dir() / "markets" / "ou4_continuous.toml").string() +
                                          "\"\nnum_envs = 16\n";
  const std::string learner = recurrent ? "hidden = [16]\nlstm_hidden = 16\n" : "hidden = [32, 32]\n";
  return "[run]\nname = \"ppo_resume\"\nseed = 3\ntotal_env_steps = " + std::to_string(total) + "\n" + env +
         "[learner]\nkind = \"ppo\"\nrollout_steps = 32\nminibatches = 4\nlr = 0.001\nlr_end = 0.001\n" + learner +
         "[checkpoint]\nevery_env_steps = 0\n"
         "[logging]\ntimeline = false\ntensorboard = false\nprogress_interval_ms = 100\n";
}

class PpoRun : public test::GpuTest {
 protected:
  fs::path dir_ = fs::temp_directory_path() / ("foxhunt_ppo_run_" + std::to_string(::getpid()));
  void TearDown() override {
    fs::remove_all(dir_);
    test::GpuTest::TearDown();
  }
  TrainOutcome train(const std::string& name, const std::string& text, const std::optional<fs::path>& resume = {}) {
    fs::create_directories(dir_ / name);
    std::ofstream(dir_ / name / "run.toml") << text;
    TrainRequest req;
    req.config = load_run_config(dir_ / name / "run.toml");
    req.run_dir = dir_ / name / "run";
    req.resume = resume;
    req.console = false;
    TrainOutcome out = run_training(req);
    EXPECT_EQ(out.result.outcome.kind, RunOutcome::Kind::completed) << name << ": " << out.result.outcome.reason;
    EXPECT_TRUE(out.result.final_checkpoint.has_value()) << name << ": " << out.result.checkpoint_error;
    return out;
  }
};

TEST_F(PpoRun, ResumeContinuesBitExactly) {
  constexpr std::int64_t kN = 16 * 32 * 12;  // 12 iterations
  for (const bool recurrent : {false, true}) {
    SCOPED_TRACE(recurrent ? "LSTM, CartPole without velocities" : "Gaussian, 4 continuous assets");
    const std::string tag = recurrent ? "lstm_" : "mlp_";
    TrainOutcome half = train(tag + "half", ppo_config(kN, recurrent));
    ASSERT_TRUE(half.result.final_checkpoint);
    const fs::path ckpt = *half.result.final_checkpoint;
    TrainOutcome resumed = train(tag + "resumed", ppo_config(2 * kN, recurrent), ckpt);
    TrainOutcome whole = train(tag + "whole", ppo_config(2 * kN, recurrent));
    ASSERT_TRUE(resumed.result.final_checkpoint && whole.result.final_checkpoint);
    EXPECT_EQ(whole.result.counters.env_steps, 2 * kN);
    EXPECT_EQ(resumed.result.counters.env_steps, whole.result.counters.env_steps);
    EXPECT_EQ(resumed.result.counters.updates, whole.result.counters.updates);
    for (const char* f : {"learner.safetensors", "ppo.state", "env.state"}) {
      EXPECT_EQ(differing_bytes(*resumed.result.final_checkpoint / f, *whole.result.final_checkpoint / f), 0)
          << f << " differs between the resumed and the uninterrupted run";
      EXPECT_GT(differing_bytes(ckpt / f, *whole.result.final_checkpoint / f), 0)
          << f << ": the run after the stop changed nothing";
    }
  }
}

const EvalRow& row(const EvalReport& r, const std::string& policy) {
  for (const auto& x : r.rows)
    if (x.policy == policy) return x;
  throw std::runtime_error("no row " + policy);
}

// Trains the shipped config to its end and evaluates the final checkpoint on `episodes` paths.
EvalReport train_and_evaluate(const std::string& config, const fs::path& dir, std::int64_t episodes = 128) {
  TrainRequest req;
  req.config = load_run_config(test::configs_dir() / (config + ".toml"));
  req.config.checkpoint.every_env_steps = 0;
  req.run_dir = dir / config;
  req.console = false;
  const TrainOutcome out = run_training(req);
  EXPECT_EQ(out.result.outcome.kind, RunOutcome::Kind::completed) << out.result.outcome.reason;
  EvalRequest ereq;
  ereq.checkpoints = {req.run_dir};
  ereq.episodes = episodes;
  const EvalReport report = evaluate(plan_eval(ereq));
  std::printf("%s: %lld env steps, %lld updates\n%s", config.c_str(),
              static_cast<long long>(out.result.counters.env_steps),
              static_cast<long long>(out.result.counters.updates), format_eval_table(report).c_str());
  return report;
}

// Over 4,096 fresh paths; buy-and-hold's correlation to itself (the reference) reads 1.
TEST_F(PpoRun, ShippedMarketConfigReachesHalfTheOracleSharpe) {
  const EvalReport r = train_and_evaluate("ppo_market", dir_, 4096);
  EXPECT_EQ(r.episodes, 4096);
  const int corr = report::column_index(r.report, "corr_reference");
  ASSERT_GE(corr, 0);
  for (std::size_t i = 0; i < r.rows.size(); ++i)
    if (r.rows[i].policy == "buy_and_hold") EXPECT_NEAR(r.report.runs[i].summary[corr].mean, 1.0, 1e-6);
  const double greedy = row(r, "greedy").stats.mean_sharpe, oracle = row(r, "ou_oracle").stats.mean_sharpe;
  EXPECT_GT(oracle, 0.0);
  EXPECT_GE(greedy, 0.5 * oracle);
  EXPECT_GT(greedy, row(r, "buy_and_hold").stats.mean_sharpe);
}

TEST_F(PpoRun, ShippedContinuousConfigLearnsAPositiveSharpe) {
  const EvalReport r = train_and_evaluate("ppo_continuous_4asset", dir_);
  const double greedy = row(r, "greedy").stats.mean_sharpe;
  EXPECT_GT(greedy, 0.0);
  EXPECT_GT(greedy, row(r, "buy_and_hold").stats.mean_sharpe);
  EXPECT_GT(greedy, row(r, "random").stats.mean_sharpe);
}

}  // namespace
