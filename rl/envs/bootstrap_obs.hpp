#pragma once
// The observation a transition bootstraps from. A vector env resets finished episodes inside its
// step (the next obs of such a row is the new episode's first), so the transition's own last
// observation comes from final_obs: a truncated episode bootstraps from it, and a terminated one
// stores it (its bootstrap term is zero).
#include <cuda_runtime.h>

#include <cstdint>

namespace foxhunt::rl {

// bootstrap[i, :] = (terminated[i] | truncated[i]) ? final_obs[i, :] : next_obs[i, :]   (N, obs_dim)
void select_bootstrap_obs(float* bootstrap, const float* next_obs, const float* final_obs,
                          const std::uint8_t* terminated, const std::uint8_t* truncated, std::int64_t num_envs,
                          std::int64_t obs_dim, cudaStream_t stream);

}  // namespace foxhunt::rl
