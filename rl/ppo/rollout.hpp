#pragma once
// Rollout: the device storage of one PPO iteration, T steps x N environments, time-major
// ((t, i) at t * N + i). Gymnasium's same-step autoreset (rl/envs/vec_env.hpp): obs[t] is what
// the policy saw at step t; after a done step the next row holds the new episode's first
// observation and final_obs[t] the old episode's last one, whose value bootstraps a truncation
// (a termination does not bootstrap). A recurrent policy adds its state at the rollout's start
// and the reset masks: resets[t] marks the environments whose episode starts at step t.
#include <cstdint>

#include "gpu/buffer.hpp"
#include "rl/ppo/distributions.hpp"

namespace foxhunt::rl::ppo {

struct Rollout {
  // Allocates (set-up); final_obs is zeroed on `stream`. state_features > 0: a recurrent policy's
  // state (N, state_features) and masks (zeroed).
  Rollout(std::int64_t steps, std::int64_t num_envs, std::int64_t obs_dim, const HeadShape& head,
          std::int64_t state_features, cudaStream_t stream);

  std::int64_t steps, num_envs, obs_dim;
  HeadShape head;
  std::int64_t rows() const noexcept { return steps * num_envs; }

  gpu::DeviceBuffer<float> obs;              // (T, N, C)
  gpu::DeviceBuffer<float> next_obs;         // (N, C): the observation after the last step
  gpu::DeviceBuffer<float> final_obs;        // (T, N, C): rows of finished episodes (zero elsewhere at start)
  gpu::DeviceBuffer<std::int32_t> discrete;  // (T, N, branches), categorical heads
  gpu::DeviceBuffer<float> raw;              // (T, N, dim), gaussian heads: the unbounded sample
  gpu::DeviceBuffer<float> env_actions;      // (N, action width): gaussian: the bounded actions; else scratch
  gpu::DeviceBuffer<float> logp, values, rewards, bootstrap, advantages, returns;  // (T, N)
  gpu::DeviceBuffer<float> next_value;                                             // (N)
  gpu::DeviceBuffer<std::uint8_t> terminated, truncated;                           // (T, N)
  // Recurrent policies only (empty otherwise).
  gpu::DeviceBuffer<float> state;             // (N, S): the acting state, carried across rollouts
  gpu::DeviceBuffer<float> state0;            // (N, S): the state at this rollout's start
  gpu::DeviceBuffer<float> scratch_state;     // (N, S): a copy stepped for bootstrap values
  gpu::DeviceBuffer<std::uint8_t> resets;     // (T, N): episode starts at step t
  gpu::DeviceBuffer<std::uint8_t> last_done;  // (N): the last step ended an episode (the next rollout's resets[0])
};

// Enqueues a copy of every array of `src` (memory of src_device) into `dst` (the same shape, memory
// of dst_device) on `stream`, by cudaMemcpyPeerAsync (a device-local copy when the devices are
// equal): the actor runtime's staging of a rollout slot onto the learner's device.
void copy_rollout(Rollout& dst, int dst_device, const Rollout& src, int src_device, cudaStream_t stream);

}  // namespace foxhunt::rl::ppo
