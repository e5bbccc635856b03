#pragma once
// `foxhunt eval`: the policies of one or more checkpoints on fresh episodes of the run's
// environment, beside baselines, written up as a backtest report (docs/eval.md).
// Markets: N environments (one episode each) run episode_length steps from an eval seed the
// training never used; every checkpoint's policy (actors/eval_policy.hpp), buy-and-hold, flat,
// random and (OU markets) the OU oracle see the same price paths (prices do not depend on
// actions), once per cost multiplier (fees, half-spread and slippage scaled). Each step is
// recorded on the device (rl::MarketTrace); rl/eval/metrics.hpp turns the record into per-episode
// metrics and mean curves, which leave the device through the exit module with the environment's
// own rl::EpisodeStats; the host adds bootstrap intervals and the aggregates across checkpoints
// (report/). CartPole: N environments run 500 steps (the time limit) and the row holds every
// episode finished by then.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "actors/run_config.hpp"
#include "rl/envs/market_config.hpp"
#include "report/report.hpp"
#include "rl/envs/episode_stats.hpp"

namespace foxhunt::actors {

struct EvalRequest {
  // --checkpoint, repeatable: a checkpoint, run or checkpoint-root directory, the directory of a run
  // of several agents (<run>/agents/<name>/: every agent's latest checkpoint, in name order), or a
  // directory of run directories (a multi-seed parent: each run's latest checkpoint, in name order).
  std::vector<std::filesystem::path> checkpoints;
  std::optional<std::filesystem::path> config;   // --config: for every checkpoint; default, each one's resolved config
  std::int64_t episodes = 100;                   // --episodes
  std::optional<std::uint64_t> seed;             // --seed: default eval_seed(run.seed of the first checkpoint)
  std::vector<double> cost_multipliers = {1.0};  // --cost-multipliers
  std::optional<std::filesystem::path> report_dir;  // --report-dir
  // --split: the part of a replay market's [split] replayed; default test when the market has a
  // [split], else the whole market (train: simulated markets and CartPole have no other part).
  std::optional<rl::Split> split;
};

struct EvalTarget {
  std::filesystem::path checkpoint;  // a checkpoint directory (holds learner.*)
  // The agent's name when the checkpoint is an agent's of a run of several agents (it lies in
  // <run>/agents/<name>/checkpoints/), else "".
  std::string agent;
  std::filesystem::path config_file;
  RunConfig config;
};

struct EvalPlan {
  std::vector<EvalTarget> targets;  // at least one; all on the same environment
  std::int64_t episodes = 0;
  std::uint64_t seed = 0;
  std::vector<double> cost_multipliers;
  rl::Split split = rl::Split::train;
  // --report-dir, else <the run>/eval when the first --checkpoint was a run of several agents,
  // <the multi-seed parent>/eval when it was one, else <first checkpoint directory>/eval.
  std::filesystem::path report_dir;
};

inline constexpr std::int64_t kMaxEvalEpisodes = std::int64_t{1} << 20;
inline constexpr double kMaxCostMultiplier = 1000.0;

// A seed distinct from every training seed of the run (the training envs use run.seed itself).
std::uint64_t eval_seed(std::uint64_t run_seed);

// "0,1,2,5": non-negative finite numbers up to kMaxCostMultiplier, each once.
// std::invalid_argument whose message names --cost-multipliers and the allowed values.
std::vector<double> parse_cost_multipliers(const std::string& text);

// The name of the agent whose checkpoint `checkpoint` is (<run>/agents/<name>/checkpoints/<dir>),
// else "".
std::string agent_of_checkpoint(const std::filesystem::path& checkpoint);

// Resolves and checks the arguments (no device needed). std::invalid_argument whose message
// names the option: "--checkpoint", "--config", "--episodes", "--cost-multipliers".
EvalPlan plan_eval(const EvalRequest& request);

struct EvalRow {
  std::string policy;
  int checkpoint = -1;  // index into plan.targets; -1 for baselines
  double cost_multiplier = 1.0;
  rl::EpisodeStats stats{};
};

struct EvalReport {
  bool market = false;        // market columns (Sharpe, drawdown, turnover) are meaningful
  std::int64_t episodes = 0;  // environments run
  std::int64_t steps = 0;     // steps each environment ran
  std::uint64_t seed = 0;
  rl::Split split = rl::Split::train;  // the part of a replay market evaluated
  // Per cost multiplier: each checkpoint's policy, then buy_and_hold, flat, regime_oracle (GBM
  // markets of >= 2 regimes without jumps), ou_oracle (OU
  // markets), random.
  std::vector<EvalRow> rows;
  report::Report report;  // runs[i] is rows[i]; summarized (intervals and aggregates filled)
};

// Runs on the first config's device; std::runtime_error when there is none or a checkpoint does
// not match its config (network shape).
EvalReport evaluate(const EvalPlan& plan);

// The table `foxhunt eval` prints.
std::string format_eval_table(const EvalReport& report);

// report.json, equity.csv, episodes.csv, report.html (report/report.hpp) and, for markets, the
// mean curves as TensorBoard scalars under dir/tensorboard (tag eval/<run>/costs_x<m>/<curve>,
// step = environment step). Returns the files written.
std::vector<std::filesystem::path> write_eval_report(const EvalReport& report, const std::filesystem::path& dir);

}  // namespace foxhunt::actors
