#pragma once
// `foxhunt eval`: the greedy policy of a checkpoint on fresh episodes of the run's environment,
// beside baselines. Markets: N environments (one per episode) run episode_length steps from an
// eval seed the training never used; the greedy policy, buy-and-hold and (OU markets) the OU
// oracle see the same price paths (prices do not depend on actions). CartPole: N environments
// run 500 steps (the time limit) and the row holds every episode finished by then.
// Every number leaves the device through the exit module (rl::EpisodeStats), not a copy.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "actors/run_config.hpp"
#include "rl/envs/episode_stats.hpp"

namespace foxhunt::actors {

struct EvalRequest {
  std::filesystem::path checkpoint;             // --checkpoint: checkpoint, run or checkpoint-root directory
  std::optional<std::filesystem::path> config;  // --config: default, the checkpoint's own resolved config
  std::int64_t episodes = 100;                  // --episodes
  std::optional<std::uint64_t> seed;            // --seed: default eval_seed(run.seed)
};

struct EvalPlan {
  std::filesystem::path checkpoint;  // a checkpoint directory (holds learner.*)
  std::filesystem::path config_file;
  RunConfig config;
  std::int64_t episodes = 0;
  std::uint64_t seed = 0;
};

inline constexpr std::int64_t kMaxEvalEpisodes = std::int64_t{1} << 20;

// A seed distinct from every training seed of the run (the training envs use run.seed itself).
std::uint64_t eval_seed(std::uint64_t run_seed);

// Resolves and checks the arguments (no device needed). std::invalid_argument whose message
// names the option: "--checkpoint", "--config", "--episodes".
EvalPlan plan_eval(const EvalRequest& request);

struct EvalRow {
  std::string policy;
  rl::EpisodeStats stats{};
};

struct EvalReport {
  bool market = false;        // market columns (Sharpe, drawdown, turnover) are meaningful
  std::int64_t episodes = 0;  // environments run
  std::int64_t steps = 0;     // steps each environment ran
  std::uint64_t seed = 0;
  std::vector<EvalRow> rows;  // greedy first, then the baselines
};

// Runs on the config's device; std::runtime_error when there is none or the checkpoint does
// not match the config (network shape).
EvalReport evaluate(const EvalPlan& plan);

// The table `foxhunt eval` prints.
std::string format_eval_table(const EvalReport& report);

}  // namespace foxhunt::actors
