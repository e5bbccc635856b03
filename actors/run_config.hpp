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
#include "rl/dqn/config.hpp"
#include "rl/envs/market_config.hpp"

namespace foxhunt::actors {

struct RunConfig {
  struct Run {
    std::string name = "run";
    std::uint64_t seed = 1;
    std::int64_t total_env_steps = 500'000;
    int device = 0;
    bool deterministic = false;  // PipelineConfig::deterministic: operations follow the counts
  } run;
  struct Env {
    std::string kind = "cartpole";  // cartpole | ou_market | market
    std::int64_t num_envs = 64;
    std::int64_t steps_per_slot = 1;  // environment steps per transition slot (rollout length)
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
    std::int64_t beta_anneal_updates = 0;  // updates of the beta anneal; 0: the run's expected updates
    double priority_eps = 1e-6;            // the replay's p = |delta| + eps
  } replay;
  struct Learner {
    std::vector<std::int64_t> hidden{256, 256};
    double lr = 1e-3;
    bool dueling = true, double_dqn = true;
    std::string loss = "huber";  // huber | mse
    double grad_clip = 10.0;
    std::string target = "hard";  // hard | polyak
    double tau = 0.005;           // polyak only
    double epsilon_start = 1.0, epsilon_final = 0.05;
    std::int64_t epsilon_decay_steps = 100'000;  // 0: epsilon_final at once
    // The DQN family (rl::DqnLearnerConfig / models::QNetworkSpec); the defaults are plain DQN.
    std::string activation = "relu";  // relu | gelu (hidden layers)
    bool noisy = false;               // NoisyNet heads (the collector acts with fresh noise per step)
    double sigma0 = 0.5;
    std::int64_t atoms = 1;              // 1: expected values; >= 2: C51 (one branch only)
    double v_min = -10.0, v_max = 10.0;  // C51 support
    double huber_delta = 1.0;
    double lr_end = -1.0;                // < 0 (absent): lr. Needs lr_anneal_updates > 0 to differ from lr
    std::int64_t lr_anneal_updates = 0;  // applied updates of the linear lr -> lr_end anneal
    double adam_eps = 1e-8, adam_beta1 = 0.9, adam_beta2 = 0.999;
    std::int64_t target_period = 0;  // updates per target update; 0: hard: pipeline.sync_every, polyak: 1
  } learner;
  struct Pipeline {
    double replay_ratio = 0.25;  // updates per environment step
    std::int64_t learning_starts = 1'000;
    std::int64_t ratio_slack = 8;
    int slots = 4;                  // collector transition slots in flight
    int batches = 3;                // sampled batches in flight
    std::int64_t sync_every = 100;  // updates per target sync / policy publication
    // How the host learns that a stage's GPU work completed: "hostfn" (cudaLaunchHostFunc in the
    // stream) or "polled" (one poller thread queries the events: no host function in any stream;
    // 1.04x the slowest stream in bench/pipeline.cu against 1.88x for hostfn on an H200; the
    // CartPole end-to-end test: 3.5-4.2 s against 5.4-16 s, both >= 475).
    std::string completions = "polled";
  } pipeline;
  struct Checkpoint {
    std::int64_t every_env_steps = 50'000;  // 0: only at stop
    std::int64_t keep = 5;                  // newest step_* directories kept (0: all)
    // Which checkpoints carry the replay buffer (replay.safetensors + replay.pending.safetensors):
    // "final" the one at the stop only; "always" the periodic ones too (the run then stops and
    // resumes in-process at each every_env_steps: each periodic checkpoint is a final one, see
    // actors/train_run.hpp); "never" none (a resume starts with an empty buffer).
    std::string replay = "final";
  } checkpoint;
  struct Logging {
    std::int64_t progress_interval_ms = 500;
    bool tensorboard = true;
    bool jsonl = true;
    bool timeline = true;
    std::string level = "info";  // trace | debug | info | warn | error
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
// A file in the synchronous trainer's schema (rl/dqn/config.hpp: [dqn], [network] or [train] at
// the top level) is read with rl::load_dqn_config and translated (run_config_from_dqn, run.name =
// the file's stem); *translated (when given) says so. Tables of both schemas in one file: an error
// naming them.
RunConfig load_run_config(const std::filesystem::path& file, bool* translated = nullptr);
// Which schema a TOML text is in: "dqn" (rl::DqnRunConfig) or "pipeline" (RunConfig). Throws
// std::invalid_argument (naming `source` and the tables) for a TOML syntax error or a mix.
std::string detect_config_schema(const std::string& toml_text, const std::string& source = "config");
// The synchronous trainer's configuration as an actor-pipeline run (every field mapped; one the
// pipeline cannot honour is an error naming the rl::DqnRunConfig key, e.g. `network.branching`).
// train_every/updates_per_train become pipeline.replay_ratio, target_period becomes both
// learner.target_period and pipeline.sync_every (the policy is published with the target).
// A relative market_config stays relative (load_run_config resolves it). The result is validated
// as parse_run_config would (std::invalid_argument, prefixed with `source`).
RunConfig run_config_from_dqn(const rl::DqnRunConfig& d, const std::string& source = "config");
// The market environment of a run (env.kind ou_market or market): the env.market file, or the
// inline OU keys. Throws std::invalid_argument naming env.kind / env.market (and, from the market
// file, its own key) when the market cannot run in the DQN pipeline (e.g. continuous actions).
rl::MarketConfig market_config(const RunConfig& c);
// The whole configuration as TOML, defaults included (parse_run_config(resolved_toml(c)) == c).
std::string resolved_toml(const RunConfig& c);

}  // namespace foxhunt::actors
