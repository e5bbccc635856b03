#pragma once
// The two batches that cross the replay buffer's boundary, both in device memory:
// TransitionBatch, what a collector inserts (views of its own buffers), and SampledBatch, what the
// learner gets (owned here, all f32 except indices and discrete actions).
#include <cstdint>

#include "gpu/buffer.hpp"
#include "rl/replay/config.hpp"

namespace foxhunt::rl {

// A collector's (steps, envs) block, time-major: row = t * envs + e. `layout` describes these
// arrays; obs_dim and the action must match the buffer's, obs_dtype may be f32 or bf16 (cast on
// insert to the buffer's storage dtype).
struct TransitionBatch {
  TransitionLayout layout;
  std::int64_t steps = 0;
  std::int64_t envs = 0;
  const void* obs = nullptr;                 // (steps, envs, obs_dim) layout.obs_dtype
  const void* next_obs = nullptr;            // (steps, envs, obs_dim): the observation after the
                                             // step (the final one where the episode ended)
  const void* actions = nullptr;             // (steps, envs, action_dim) int32 or f32
  const float* rewards = nullptr;            // (steps, envs)
  const std::uint8_t* terminated = nullptr;  // (steps, envs) 0 / 1
  const std::uint8_t* truncated = nullptr;   // (steps, envs) 0 / 1 (time limit: still bootstraps)
};

// Raw pointers of a sampled batch (the learner's input).
struct SampledBatchView {
  std::int64_t batch = 0;
  std::int32_t* indices = nullptr;  // (batch) slots, for update_priorities
  float* weights = nullptr;         // (batch) IS weights, max 1 (all 1 in uniform mode)
  float* obs = nullptr;             // (batch, obs_dim)
  void* actions = nullptr;          // (batch, action_dim) int32 (discrete kinds) or f32
  float* returns = nullptr;         // (batch) n-step return sum_{k<m} gamma^k r_{t+k}
  float* discounts = nullptr;       // (batch) gamma^m, 0 when the episode terminated inside
  float* next_obs = nullptr;        // (batch, obs_dim) bootstrap observation s_{t+m}
};

// SampledBatch keeps next_obs directly after obs (one (2 batch, obs_dim) buffer [s; s']): a
// double-DQN learner runs its online forward over both as one input, without stacking them first.

class SampledBatch {
 public:
  SampledBatch() = default;
  SampledBatch(std::int64_t batch, const TransitionLayout& layout)
      : batch_(batch),
        indices_(static_cast<std::size_t>(batch)),
        weights_(static_cast<std::size_t>(batch)),
        states_(static_cast<std::size_t>(2 * batch * layout.obs_dim)),
        actions_(static_cast<std::size_t>(batch * layout.action_dim)),
        returns_(static_cast<std::size_t>(batch)),
        discounts_(static_cast<std::size_t>(batch)),
        obs_dim_(layout.obs_dim) {}

  SampledBatchView view() {
    return {batch_,          indices_.data(), weights_.data(),   states_.data(),
            actions_.data(), returns_.data(), discounts_.data(), states_.data() + batch_ * obs_dim_};
  }
  std::int64_t batch() const noexcept { return batch_; }

 private:
  std::int64_t batch_ = 0;
  gpu::DeviceBuffer<std::int32_t> indices_;
  gpu::DeviceBuffer<float> weights_;
  gpu::DeviceBuffer<float> states_;  // [obs; next_obs]
  gpu::DeviceBuffer<std::uint32_t> actions_;
  gpu::DeviceBuffer<float> returns_;
  gpu::DeviceBuffer<float> discounts_;
  std::int64_t obs_dim_ = 0;
};

}  // namespace foxhunt::rl
