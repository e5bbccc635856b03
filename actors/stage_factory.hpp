#pragma once
// Builds the stages of a run from its configuration, by learner.kind: the one place that knows
// which rl/ and models/ classes implement the roles. `resume` is a checkpoint directory whose
// state the stages load.
#include <filesystem>
#include <memory>
#include <optional>

#include "actors/pipeline_shared.hpp"
#include "actors/ppo_pipeline.hpp"
#include "actors/run_config.hpp"
#include "gpu/data_parallel.hpp"
#include "gpu/linear.hpp"
#include "rl/dqn/learner.hpp"
#include "rl/envs/vec_env.hpp"
#include "rl/replay/config.hpp"

namespace foxhunt::actors {

// The DQN pieces of a run config, for an environment of obs_dim observations and `branches` x
// `actions` discrete actions (also used by tests that build a synchronous reference).
rl::DqnLearnerConfig dqn_learner_config(const RunConfig& c, std::int64_t obs_dim, std::int64_t branches,
                                        std::int64_t actions);
rl::ReplayConfig dqn_replay_config(const RunConfig& c, std::int64_t obs_dim, std::int64_t branches);
// ceil(replay_ratio * (total_env_steps - learning_starts)), at least 1: the beta anneal length.
std::int64_t expected_updates(const RunConfig& c);
// replay.beta_anneal_updates, or expected_updates(c) when it is 0 (the default).
std::int64_t beta_anneal_updates(const RunConfig& c);

// learner.math (validated by load_run_config) as gpu/linear's arithmetic.
gpu::LinearMath learner_linear_math(const RunConfig& c);

// Logs the run's feature extractor: its checkpoint, family, output and `columns`, and whether it is
// frozen or fine-tuned (at what learning-rate scale).
void log_features(const RunConfig& c, const pretrain::FeatureSource& source, std::int64_t columns);

// The run's environment with num_envs copies: CartPole-v1 (env.kind cartpole) or rl::MarketEnv
// from market_config(config) (market; a replay market with its bars loaded), behind an
// rl::ObservationFilter when env.observe is given (its set-up upload runs on `stream`). `split` is
// the part of a replay market's [split] it replays (rl::split_market): training runs on the train
// part and never reads a later bar; evaluation passes validation or test. Every trainer and
// `foxhunt eval` build their environments here. Throws std::invalid_argument naming the key (a
// split the market does not have, a CSV that no longer loads: with its file and line).
std::unique_ptr<rl::VecEnv> make_env(const RunConfig& config, std::int64_t num_envs,
                                     rl::Split split = rl::Split::train, cudaStream_t stream = nullptr);

// Throws std::runtime_error naming what is missing when a configured stage cannot be built
// (e.g. an environment kind not wired yet, or no CUDA device).
struct StageOptions {
  std::int64_t stats_every = 10'000;  // env steps per window of episode statistics (cleared after each)
  std::int64_t metrics_every = 100;   // updates between learner metrics publications
  // A data-parallel run's replica (gpu/data_parallel.hpp): the learner joins it (takes rank 0's
  // weights, all-reduces its gradients). Inactive by default: a run of one GPU.
  gpu::DataParallel data_parallel{};
};
// The DQN stages (learner.kind = "dqn").
PipelineStages make_stages(const RunConfig& config, const std::optional<std::filesystem::path>& resume,
                           const StageOptions& options = {});
// The PPO stages (learner.kind = "ppo"): a collector with pipeline.policy_lag + 1 rollout slots
// and the learner. `resume`: a checkpoint of either PPO loop (actors or sync).
PpoStages make_ppo_stages(const RunConfig& config, const std::optional<std::filesystem::path>& resume,
                          const StageOptions& options = {});
// Rollouts per window of episode statistics: ceil(options.stats_every / rows), as the
// synchronous loop's windows.
std::int64_t ppo_stats_every(const RunConfig& config, const StageOptions& options);

// The agent of a run by learner.kind, running under `pipeline` (its total_env_steps: where this
// run, or segment, ends; start: the resumed counts; checkpoint_every). `dqn`, when given,
// receives a DQN run's stages (tests look at them).
std::shared_ptr<StageSet> make_stage_set(const RunConfig& config, const std::optional<std::filesystem::path>& resume,
                                         const StageOptions& options, const PipelineConfig& pipeline,
                                         PipelineStages* dqn = nullptr);

}  // namespace foxhunt::actors
