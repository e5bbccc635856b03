#pragma once
// `foxhunt train` for learner.kind = "ppo": rl::ppo::PpoTrainer's synchronous collect -> update
// loop on one stream, with the same run directory as the DQN pipeline (resolved config, progress
// line, metrics.jsonl, TensorBoard, checkpoints, --resume).
//
// A PPO checkpoint directory holds
//   learner.safetensors   the networks and Adam's moments (gpu::ParameterArena)
//   ppo.state             the trainer's device state: the observation after the last step, the
//                         LSTM state and last dones (recurrent), the learner's counters (updates,
//                         Adam steps, permutation draws) and the sampling counter
//   env.state             the environments (actors/env_state.hpp)
//   counters.json         env_steps (iterations x num_envs x rollout_steps) and updates
// so a resumed run continues bitwise where the checkpoint was taken.
#include <filesystem>
#include <vector>

#include "actors/env_shape.hpp"
#include "actors/run_config.hpp"
#include "actors/train_run.hpp"
#include "rl/ppo/config.hpp"

namespace foxhunt::actors {

// The learner's configuration from a run config and its environment's shape.
rl::ppo::PpoConfig ppo_config(const RunConfig& config, const EnvShape& env);

// The arrays of ppo.state as (name, bytes), in file order (the checkpoint validator's list).
std::vector<std::pair<std::string, std::size_t>> ppo_state_arrays(const RunConfig& config, const EnvShape& env);

TrainOutcome run_ppo_training(const TrainRequest& request);

}  // namespace foxhunt::actors
