#include "rl/ppo/reward_norm.hpp"

#include <string>

#include "gpu/check.hpp"
#include "gpu/reduce.cuh"

namespace foxhunt::rl::ppo {
namespace {

constexpr int kThreads = 1024;
constexpr double kInitialCount = 1e-4, kEpsilon = 1e-8;

__global__ void reset_kernel(float* __restrict__ returns, double* __restrict__ moments, std::int64_t n) {
  for (std::int64_t i = threadIdx.x; i < n; i += blockDim.x) returns[i] = 0.f;
  if (threadIdx.x == 0) {
    moments[0] = kInitialCount;
    moments[1] = 0.0;
    moments[2] = 1.0;
  }
}

__global__ void __launch_bounds__(kThreads) apply_kernel(float* __restrict__ rewards, float* __restrict__ returns,
                                                         double* __restrict__ moments,
                                                         const std::uint8_t* __restrict__ terminated,
                                                         const std::uint8_t* __restrict__ truncated, std::int64_t n,
                                                         float gamma) {
  __shared__ double scratch[32];
  double sum = 0.0;
  for (std::int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const float g = gamma * returns[i] + rewards[i];
    returns[i] = g;
    sum += g;
  }
  const double batch_mean = gpu::block_sum(sum, scratch) / static_cast<double>(n);
  double sq = 0.0;
  for (std::int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const double d = returns[i] - batch_mean;
    sq += d * d;
  }
  const double batch_var = gpu::block_sum(sq, scratch) / static_cast<double>(n);
  // Every thread merges the same numbers (no barrier needed to share them); thread 0 stores.
  const double count = moments[0], mean = moments[1], var = moments[2];
  const double bn = static_cast<double>(n), total = count + bn, delta = batch_mean - mean;
  const double new_var = (var * count + batch_var * bn + delta * delta * count * bn / total) / total;
  __syncthreads();  // every thread has read the old moments
  if (threadIdx.x == 0) {
    moments[0] = total;
    moments[1] = mean + delta * bn / total;
    moments[2] = new_var;
  }
  const float inv_std = static_cast<float>(1.0 / sqrt(new_var + kEpsilon));
  for (std::int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    rewards[i] *= inv_std;
    if (terminated[i] != 0 || (truncated != nullptr && truncated[i] != 0)) returns[i] = 0.f;
  }
}

}  // namespace

RewardNormalizer::RewardNormalizer(std::int64_t num_envs, float gamma, cudaStream_t stream)
    : num_envs_(num_envs), gamma_(gamma), returns_(static_cast<std::size_t>(num_envs)), moments_(3) {
  FH_EXPECT(num_envs > 0, "RewardNormalizer: num_envs must be > 0; got " + std::to_string(num_envs));
  reset(stream);
}

void RewardNormalizer::reset(cudaStream_t stream) {
  reset_kernel<<<1, kThreads, 0, stream>>>(returns_.data(), moments_.data(), num_envs_);
  FH_CHECK_LAUNCH();
}

void RewardNormalizer::apply(float* rewards, const std::uint8_t* terminated, const std::uint8_t* truncated,
                             cudaStream_t stream) {
  FH_EXPECT(rewards != nullptr && terminated != nullptr, "RewardNormalizer::apply: null pointer");
  apply_kernel<<<1, kThreads, 0, stream>>>(rewards, returns_.data(), moments_.data(), terminated, truncated, num_envs_,
                                           gamma_);
  FH_CHECK_LAUNCH();
}

}  // namespace foxhunt::rl::ppo
