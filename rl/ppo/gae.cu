#include "rl/ppo/gae.hpp"

#include <string>

#include "gpu/check.hpp"
#include "gpu/launch.cuh"

namespace foxhunt::rl::ppo {
namespace {

__global__ void gae_kernel(float* __restrict__ advantages, float* __restrict__ returns,
                           const float* __restrict__ rewards, const float* __restrict__ values,
                           const float* __restrict__ bootstrap, const float* __restrict__ next_value,
                           const std::uint8_t* __restrict__ terminated, const std::uint8_t* __restrict__ truncated,
                           std::int64_t steps, std::int64_t n, float gamma, float gamma_lambda) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    float next_v = next_value[i];  // V of the state after the last row (t == T - 1)
    float last = 0.f;              // A_{t+1}
    for (std::int64_t t = steps - 1; t >= 0; --t) {
      const std::int64_t k = t * n + i;
      const float v = values[k];
      const bool term = terminated[k] != 0;
      const bool trunc = truncated != nullptr && truncated[k] != 0;
      // Selects, not multiplications by 0: an unread bootstrap value may be NaN.
      const float succ = trunc ? bootstrap[k] : next_v;
      const float delta = term ? rewards[k] - v : rewards[k] + gamma * succ - v;
      last = (term || trunc) ? delta : delta + gamma_lambda * last;
      advantages[k] = last;
      returns[k] = last + v;
      next_v = v;
    }
  }
}

}  // namespace

void gae(float* advantages, float* returns, const float* rewards, const float* values, const float* bootstrap_values,
         const float* next_value, const std::uint8_t* terminated, const std::uint8_t* truncated, std::int64_t steps,
         std::int64_t num_envs, float gamma, float lambda, cudaStream_t stream) {
  FH_EXPECT(steps >= 0 && num_envs >= 0,
            "gae: need steps >= 0 and num_envs >= 0; got " + std::to_string(steps) + ", " + std::to_string(num_envs));
  if (steps == 0 || num_envs == 0) return;
  FH_EXPECT(advantages && returns && rewards && values && next_value && terminated, "gae: null pointer");
  FH_EXPECT(truncated == nullptr || bootstrap_values != nullptr, "gae: truncated given without bootstrap_values");
  gae_kernel<<<gpu::grid_stride_blocks(num_envs), gpu::kBlock, 0, stream>>>(
      advantages, returns, rewards, values, bootstrap_values, next_value, terminated, truncated, steps, num_envs, gamma,
      gamma * lambda);
  FH_CHECK_LAUNCH();
}

}  // namespace foxhunt::rl::ppo
