#pragma once
// RewardNormalizer: PPO's reward scaling as Gymnasium's NormalizeReward and SB3's
// VecNormalize(norm_reward) do it. Each environment keeps a discounted return G = gamma * G + r;
// the running variance of G over every environment and step so far (Chan et al.'s parallel
// update of count, mean and variance, float64 on the device, starting from count 1e-4, mean 0,
// variance 1) divides the step's rewards: r / sqrt(var + 1e-8). G restarts at 0 after a done
// step. Only the rollout's copy is scaled: episode statistics keep the environment's rewards.
//
// One block per step: the batch mean and variance of the N returns are reduced in a fixed order
// (deterministic), then merged, so N up to ~1e5 costs a few microseconds.
#include <cuda_runtime.h>

#include <cstdint>

#include "gpu/buffer.hpp"

namespace foxhunt::rl::ppo {

class RewardNormalizer {
 public:
  // Allocates and resets (set-up) on `stream`.
  RewardNormalizer(std::int64_t num_envs, float gamma, cudaStream_t stream);

  // The initial statistics and zero returns.
  void reset(cudaStream_t stream);
  // rewards (N) scaled in place after their step; terminated, truncated (N) end returns.
  void apply(float* rewards, const std::uint8_t* terminated, const std::uint8_t* truncated, cudaStream_t stream);

  // Checkpointed state: the per-environment returns (N floats) and {count, mean, var} (3 doubles).
  float* returns() noexcept { return returns_.data(); }
  const gpu::DeviceBuffer<float>& returns_buffer() const noexcept { return returns_; }
  double* moments() noexcept { return moments_.data(); }
  const gpu::DeviceBuffer<double>& moments_buffer() const noexcept { return moments_; }
  std::int64_t num_envs() const noexcept { return num_envs_; }

 private:
  std::int64_t num_envs_;
  float gamma_;
  gpu::DeviceBuffer<float> returns_;
  gpu::DeviceBuffer<double> moments_;
};

}  // namespace foxhunt::rl::ppo
