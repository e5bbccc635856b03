#pragma once
// `foxhunt train` for learner.kind = "ppo" with pipeline.mode = "sync": rl::ppo::PpoTrainer's
// synchronous collect -> update loop on one stream (pipeline.mode = "actors": the actor runtime,
// actors/ppo_pipeline.hpp, through run_training), with the same run directory as the DQN pipeline (resolved config, progress
// line, metrics.jsonl, TensorBoard, checkpoints, --resume).
//
// A PPO checkpoint directory holds
//   learner.safetensors   the networks and Adam's moments (gpu::ParameterArena)
//   ppo.state             the trainer's device state: the observation after the last step, the
//                         LSTM state and last dones (recurrent), the learner's counters (updates,
//                         Adam steps, permutation draws), the sampling counter and ([features])
//                         the feature extractor's per-environment state
//   features/             [features]: the pretrained extractor (RunConfig's kKeptFeaturesDir)
//   features.safetensors  [features] mode = "finetune": the fine-tuned extractor and its Adam
//                         moments (pretrain/tuned_features.hpp: the extractor's arena; no per-env state)
//   env.state             the environments (actors/env_state.hpp)
//   counters.json         env_steps (iterations x num_envs x rollout_steps) and updates
// so a resumed run continues bitwise where the checkpoint was taken.
#include <filesystem>
#include <vector>

#include "actors/env_shape.hpp"
#include "actors/env_state.hpp"
#include "actors/run_config.hpp"
#include "actors/train_run.hpp"
#include "rl/ppo/config.hpp"
#include "rl/ppo/reward_norm.hpp"
#include "rl/ppo/rollout.hpp"

namespace foxhunt::actors {

// A checkpoint's fine-tuned extractor ([features] mode = "finetune").
inline constexpr const char* kTunedFeaturesFile = "features.safetensors";
// The critic's fine-tuned extractor of its own ([features] shared = false; the actor's is
// kTunedFeaturesFile).
inline constexpr const char* kTunedCriticFeaturesFile = "features_critic.safetensors";

// The learner's configuration from a run config and its environment's shape.
rl::ppo::PpoConfig ppo_config(const RunConfig& config, const EnvShape& env);

// The arrays of ppo.state as (name, bytes), in file order (the checkpoint validator's list).
std::vector<std::pair<std::string, std::size_t>> ppo_state_arrays(const RunConfig& config, const EnvShape& env);

// The spans of ppo.state, in file order: the carried rollout state (next_obs; LSTM state and
// last dones), the learner's counters, the sampling counter, the reward normalizer's state and,
// with [features], the extractor's per-environment state (features_state: its span, or null).
std::vector<DeviceSpan> ppo_state_spans(rl::ppo::Rollout& carry, std::uint64_t* learner_counters,
                                        std::uint64_t* act_counter, rl::ppo::RewardNormalizer* reward_norm,
                                        const DeviceSpan* features_state = nullptr);

// Iterations (updates) of a run: total_env_steps / (num_envs x rollout_steps), at least 1.
std::int64_t ppo_iterations(const RunConfig& config);

TrainOutcome run_ppo_training(const TrainRequest& request);

}  // namespace foxhunt::actors
