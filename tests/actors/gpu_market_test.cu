// End to end on the device with the market collector: `foxhunt train`'s code path
// (actors::run_training) on the OU market file configs/markets/ou_mean_reversion.toml runs 200k
// env steps, writes metrics (JSONL, TensorBoard) and a final checkpoint carrying its config, moves
// nothing device-to-host in steady state (the metrics leave through exit slots, not copies), and
// `foxhunt eval`'s code path (plan_eval + evaluate) runs on that fresh checkpoint and prints the
// table. A CartPole checkpoint gets the mean-return table. Learning is not asserted here (200k
// steps is short): gpu_train_test.cu asserts learning on CartPole.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "actors/dqn_stages.hpp"
#include "actors/evaluate.hpp"
#include "actors/train_run.hpp"
#include "gpu/transfer_audit.hpp"
#include "tests/support/gpu_test.hpp"
#include "tests/support/paths.hpp"

using namespace foxhunt;
using namespace foxhunt::actors;
namespace fs = std::filesystem;

namespace {

const fs::path kMarkets = foxhunt::test::configs_dir() / "markets";

std::string market_run_config(const std::string& name) {
  return R"(
[run]
name = ")" +
         name + R"("
seed = 3
total_env_steps = 200000
[env]
kind = "market"
market = ")" +
         (kMarkets / "ou_mean_reversion.toml").lexically_normal().string() + R"("
num_envs = 256
steps_per_slot = 1
[replay]
capacity = 200000
batch_size = 256
n_step = 3
gamma = 0.99
[learner]
kind = "dqn"
hidden = [128, 128]
lr = 0.0003
target = "polyak"
tau = 0.005
epsilon_decay_steps = 100000
[pipeline]
replay_ratio = 0.0625
learning_starts = 10000
sync_every = 4
[checkpoint]
every_env_steps = 0
[logging]
progress_interval_ms = 100
timeline = false
)";
}

RunConfig write_and_load(const fs::path& dir, const std::string& text) {
  fs::create_directories(dir);
  std::ofstream(dir / "run.toml") << text;
  return load_run_config(dir / "run.toml");
}

std::string slurp(const fs::path& f) {
  std::ifstream in(f);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

class ActorMarket : public test::GpuTest {};

TEST_F(ActorMarket, ShortMarketRunWritesMetricsAndCheckpointWithNoDeviceToHostCopies) {
  const fs::path dir = fs::temp_directory_path() / ("foxhunt_actor_market_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  TrainRequest req;
  req.config = write_and_load(dir, market_run_config("market_test"));
  req.run_dir = dir / "run";
  req.console = false;
  req.stage_options.stats_every = 25'600;  // 100 collects of 256 envs
  std::atomic<int> stop{0};
  req.stop_signal = &stop;

  // Steady state: learning on, no checkpoint (final only), between 40k and 160k env steps.
  std::string audit_why;
  bool audit_possible = gpu::TransferAudit::available(&audit_why);
  gpu::TransferAudit audit;
  bool audit_started = false, audit_done = false;
  gpu::TransferCounts counts;
  req.observer = [&](const ProgressSnapshot& s) {
    if (s.seconds > 120.0) stop.store(2);  // a hang fails the test instead of blocking it
    if (!audit_possible) return;
    if (!audit_started && s.counters.env_steps >= 40'000) {
      try {
        audit.start();
        audit_started = true;
      } catch (const std::exception& e) {
        audit_why = e.what();
        audit_possible = false;
      }
    } else if (audit_started && !audit_done && s.counters.env_steps >= 160'000) {
      counts = audit.stop();
      audit_done = true;
    }
  };
  TrainOutcome out = run_training(req);
  if (audit.running()) audit.stop();
  const RunResult& r = out.result;
  ASSERT_EQ(r.outcome.kind, RunOutcome::Kind::completed) << r.outcome.reason << " (stop flag " << stop.load() << ")";
  EXPECT_GE(r.counters.env_steps, 200'000);
  EXPECT_GT(r.counters.updates, 0);
  EXPECT_GT(r.counters.policy_version, 0);
  ASSERT_TRUE(r.final_checkpoint.has_value()) << r.checkpoint_error;
  for (const char* f : {"learner.online.safetensors", "learner.target.safetensors", "learner.state.bin",
                        "counters.json", "config.resolved.toml"})
    EXPECT_TRUE(fs::exists(*r.final_checkpoint / f)) << f;
  EXPECT_EQ(CheckpointStore::read_counters(*r.final_checkpoint).env_steps, r.counters.env_steps);

  // Metrics: JSONL lines with episode statistics and losses, and a TensorBoard events file.
  const std::string jsonl = slurp(req.run_dir / "metrics.jsonl");
  EXPECT_NE(jsonl.find("\"episode/return\""), std::string::npos);
  EXPECT_NE(jsonl.find("\"train/loss\""), std::string::npos);
  bool events = false;
  if (fs::is_directory(req.run_dir / "tensorboard"))
    for (const auto& e : fs::directory_iterator(req.run_dir / "tensorboard"))
      events = events || (e.path().filename().string().rfind("events.out.tfevents", 0) == 0 && fs::file_size(e) > 0);
  EXPECT_TRUE(events) << "no TensorBoard events file under " << (req.run_dir / "tensorboard");
  // The collector's last statistics window is readable and finite. It may hold no finished
  // episode: the window is cleared at each export and can end less than one 256-step episode
  // after the last one (seen on an H200); the JSONL above proves episodes were reported.
  auto collector = std::dynamic_pointer_cast<DqnCollectorStage>(out.stages.collector);
  ASSERT_NE(collector, nullptr);
  rl::EpisodeStats st{};
  ASSERT_TRUE(collector->episode_stats().try_read(st));
  EXPECT_TRUE(std::isfinite(st.mean_return) && std::isfinite(st.mean_sharpe));  // 0 with no episode

  if (!audit_possible) {
    std::printf("  transfer audit skipped: %s\n", audit_why.c_str());
  } else {
    ASSERT_TRUE(audit_done) << "the run ended before the audit window closed";
    std::printf("  transfer audit (40k..160k env steps): %s\n", counts.str().c_str());
    EXPECT_EQ(counts.device_to_host, 0) << counts.str();
    EXPECT_EQ(counts.dropped_records, 0u);
  }

  // foxhunt eval on the fresh checkpoint: the run directory finds the checkpoint and its config.
  EvalRequest ereq;
  ereq.checkpoints = {req.run_dir};
  ereq.episodes = 64;
  const EvalPlan plan = plan_eval(ereq);
  EXPECT_TRUE(fs::equivalent(plan.targets.at(0).checkpoint, *r.final_checkpoint));
  const EvalReport report = evaluate(plan);
  const std::string table = format_eval_table(report);
  std::printf("%s", table.c_str());
  ASSERT_TRUE(report.market);
  ASSERT_EQ(report.rows.size(), 5u);  // greedy, buy_and_hold, flat, ou_oracle, random
  EXPECT_EQ(report.rows[0].policy, "greedy");
  EXPECT_EQ(report.rows[1].policy, "buy_and_hold");
  EXPECT_EQ(report.rows[3].policy, "ou_oracle");
  EXPECT_EQ(report.rows[4].policy, "random");
  ASSERT_EQ(report.report.runs.size(), report.rows.size());
  for (const auto& row : report.rows) {
    SCOPED_TRACE(row.policy);
    // One episode per environment in episode_length steps (an early termination would add a
    // partial one only if the new episode also ended: not with min_equity 0.1 in 256 steps).
    EXPECT_EQ(row.stats.episodes, 64.0);
    EXPECT_TRUE(std::isfinite(row.stats.mean_return) && std::isfinite(row.stats.mean_sharpe) &&
                std::isfinite(row.stats.mean_max_drawdown) && std::isfinite(row.stats.mean_turnover));
    EXPECT_GE(row.stats.mean_max_drawdown, 0.0);
    EXPECT_NE(table.find(row.policy), std::string::npos);
  }
  // Flat never trades; buy-and-hold trades once per episode (the first step).
  EXPECT_EQ(report.rows[2].stats.mean_turnover, 0.0);
  EXPECT_GT(report.rows[1].stats.mean_turnover, 0.0);
  EXPECT_NE(table.find("Sharpe"), std::string::npos);
  // The report's files, beside the checkpoint by default.
  EXPECT_TRUE(fs::equivalent(plan.report_dir.parent_path(), *r.final_checkpoint));
  const auto files = write_eval_report(report, plan.report_dir);
  for (const char* f : {"report.json", "equity.csv", "episodes.csv", "report.html"})
    EXPECT_TRUE(fs::is_regular_file(plan.report_dir / f)) << f;
  EXPECT_EQ(files.size(), 5u);  // and the TensorBoard events file
  fs::remove_all(dir);
}

TEST_F(ActorMarket, EvalOfACartPoleCheckpointPrintsMeanReturn) {
  const fs::path dir = fs::temp_directory_path() / ("foxhunt_actor_eval_cartpole_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  TrainRequest req;
  req.config = write_and_load(dir, R"(
[run]
name = "eval_cartpole"
total_env_steps = 12000
[env]
kind = "cartpole"
num_envs = 8
[replay]
capacity = 10000
batch_size = 128
prioritized = false
[learner]
kind = "dqn"
[pipeline]
replay_ratio = 0.1
learning_starts = 10000
[checkpoint]
every_env_steps = 0
[logging]
timeline = false
)");
  req.run_dir = dir / "run";
  req.console = false;
  TrainOutcome out = run_training(req);
  ASSERT_EQ(out.result.outcome.kind, RunOutcome::Kind::completed) << out.result.outcome.reason;
  ASSERT_TRUE(out.result.final_checkpoint.has_value()) << out.result.checkpoint_error;
  EvalRequest ereq;
  ereq.checkpoints = {*out.result.final_checkpoint};
  ereq.episodes = 16;
  const EvalReport report = evaluate(plan_eval(ereq));
  const std::string table = format_eval_table(report);
  std::printf("%s", table.c_str());
  EXPECT_FALSE(report.market);
  ASSERT_EQ(report.rows.size(), 1u);
  EXPECT_EQ(report.steps, 500);
  // Every environment ends at least one episode within the 500-step limit; returns are in [1, 500].
  EXPECT_GE(report.rows[0].stats.episodes, 16.0);
  EXPECT_GE(report.rows[0].stats.mean_return, 1.0);
  EXPECT_LE(report.rows[0].stats.mean_return, 500.0);
  EXPECT_NE(table.find("mean return"), std::string::npos);
  EXPECT_EQ(table.find("Sharpe"), std::string::npos);
  fs::remove_all(dir);
}

}  // namespace
