#pragma once
// RunConfig: what `foxhunt train --config FILE` reads. TOML, validated strictly:
//   - every key must be known (a misspelled key is an error naming it, not a silent default);
//   - every value has a type and an allowed range or set, and a bad one is named with both:
//       "replay.alpha = -1: must be a number in [0, 10]";
//   - all problems are reported at once (std::invalid_argument, one line each).
// resolved_toml() gives the complete configuration with every default filled in; the run
// directory keeps it (config.resolved.toml) so a run can be reproduced from its own folder.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "actors/pipeline_actors.hpp"
#include "rl/envs/market_config.hpp"

namespace foxhunt::actors {

struct RunConfig {
  struct Run {
    std::string name = "run";
    std::uint64_t seed = 1;
    std::int64_t total_env_steps = 500'000;
    int device = 0;
    bool deterministic = false;          // PipelineConfig::deterministic: operations follow the counts
  } run;
  struct Env {
    std::string kind = "cartpole";       // cartpole | ou_market | market
    std::int64_t num_envs = 64;
    std::int64_t steps_per_slot = 1;     // environment steps per transition slot (rollout length)
    // ou_market and market: a market config file (configs/markets/*.toml, rl/envs/market_config.hpp).
    // load_run_config resolves a relative path against the run config's folder (and stores it
    // absolute, so the resolved config of a run works from anywhere). Required for kind = market;
    // for ou_market "" means the inline OU keys below (one asset, levels -1/0/1, pnl reward).
    std::string market;
    // ou_market without `market` only (rejected beside `market`)
    double kappa = 5.0, theta = 0.0, sigma = 0.2, dt = 1.0 / 252.0, fee_bps = 5.0;
    std::int64_t episode_length = 256;
  } env;
  struct Replay {
    std::int64_t capacity = 100'000;
    std::int64_t batch_size = 128;
    bool prioritized = true;
    double alpha = 0.6, beta = 0.4, beta_final = 1.0;
    std::int64_t n_step = 3;
    double gamma = 0.99;
  } replay;
  struct Learner {
    std::vector<std::int64_t> hidden{256, 256};
    double lr = 1e-3;
    bool dueling = true, double_dqn = true;
    std::string loss = "huber";          // huber | mse
    double grad_clip = 10.0;
    std::string target = "hard";         // hard | polyak
    double tau = 0.005;                  // polyak only
    double epsilon_start = 1.0, epsilon_final = 0.05;
    std::int64_t epsilon_decay_steps = 100'000;
  } learner;
  struct Pipeline {
    double replay_ratio = 0.25;          // updates per environment step
    std::int64_t learning_starts = 1'000;
    std::int64_t ratio_slack = 8;
    int slots = 4;                       // collector transition slots in flight
    int batches = 3;                     // sampled batches in flight
    std::int64_t sync_every = 100;       // updates per target sync / policy publication
  } pipeline;
  struct Checkpoint {
    std::int64_t every_env_steps = 50'000;  // 0: only at stop
  } checkpoint;
  struct Logging {
    std::int64_t progress_interval_ms = 500;
    bool tensorboard = true;
    bool jsonl = true;
    bool timeline = true;
    std::string level = "info";          // trace | debug | info | warn | error
  } logging;

  // The pipeline's view (resumed counters are set by the caller).
  PipelineConfig pipeline_config() const;
};

// Parses and validates TOML text; `source` names it in messages. Throws std::invalid_argument
// listing every problem ("<source>: <key> ..."). env.market is kept as written (relative paths
// are then relative to the working directory) and not opened: load_run_config does both.
RunConfig parse_run_config(const std::string& toml_text, const std::string& source = "config");
// Reads a file: parse_run_config, then env.market resolved against the file's folder (stored
// absolute) and checked with market_config(); problems name env.market and the market file's key.
RunConfig load_run_config(const std::filesystem::path& file);
// The market environment of a run (env.kind ou_market or market): the env.market file, or the
// inline OU keys. Throws std::invalid_argument naming env.kind / env.market (and, from the market
// file, its own key) when the market cannot run in the DQN pipeline (e.g. continuous actions).
rl::MarketConfig market_config(const RunConfig& c);
// The whole configuration as TOML, defaults included (parse_run_config(resolved_toml(c)) == c).
std::string resolved_toml(const RunConfig& c);

}  // namespace foxhunt::actors
