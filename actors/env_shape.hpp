#pragma once
// The dimensions of a run's environment, computed on the host from its config (no device): what
// the network, the replay layout and a checkpoint's shapes follow from. `foxhunt check` and the
// checkpoint validator use it where make_env (which allocates device state) cannot run.
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "actors/run_config.hpp"
#include "rl/envs/vec_env.hpp"

namespace foxhunt::actors {

struct EnvShape {
  std::int64_t obs_dim = 0;
  std::int64_t branches = 1;  // discrete action dimensions (one per market asset)
  std::int64_t actions = 2;   // choices per branch
  rl::ActionSpace action;     // the environment's action space (continuous markets: PPO only)
  // The env.num_envs environments' own device state, array by array, as a checkpoint stores it
  // (the names and sizes of actors/env_state.cpp's env_state_spans, in its order).
  std::vector<std::pair<std::string, std::size_t>> state_arrays;
  std::size_t state_bytes() const;
};

// Throws std::invalid_argument naming env.kind / env.market / env.observe when the environment
// cannot run with the config's learner (e.g. continuous market actions under DQN). obs_dim is
// what the agent sees (env.observe's columns when given).
EnvShape env_shape(const RunConfig& config);

}  // namespace foxhunt::actors
