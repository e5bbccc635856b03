#include "rl/envs/bootstrap_obs.hpp"

#include "gpu/check.hpp"
#include "gpu/launch.cuh"

namespace foxhunt::rl {
namespace {

__global__ void bootstrap_kernel(float* __restrict__ out, const float* __restrict__ next_obs,
                                 const float* __restrict__ final_obs, const std::uint8_t* __restrict__ terminated,
                                 const std::uint8_t* __restrict__ truncated, std::int64_t n, std::int64_t obs_dim) {
  const std::int64_t total = n * obs_dim;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride) {
    const std::int64_t e = i / obs_dim;
    out[i] = (terminated[e] | truncated[e]) ? final_obs[i] : next_obs[i];
  }
}

}  // namespace

void select_bootstrap_obs(float* bootstrap, const float* next_obs, const float* final_obs,
                          const std::uint8_t* terminated, const std::uint8_t* truncated, std::int64_t num_envs,
                          std::int64_t obs_dim, cudaStream_t stream) {
  FH_EXPECT(num_envs >= 0 && obs_dim >= 1, "select_bootstrap_obs: need num_envs >= 0 and obs_dim >= 1");
  if (num_envs == 0) return;
  FH_EXPECT(bootstrap && next_obs && final_obs && terminated && truncated, "select_bootstrap_obs: null pointer");
  const std::int64_t total = num_envs * obs_dim;
  bootstrap_kernel<<<gpu::grid_stride_blocks(total), gpu::kBlock, 0, stream>>>(
      bootstrap, next_obs, final_obs, terminated, truncated, num_envs, obs_dim);
  FH_CHECK_LAUNCH();
}

}  // namespace foxhunt::rl
