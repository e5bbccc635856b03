// The benchmark market kernel. One thread per environment keeps the whole state in registers for
// the `steps` steps of a launch, including the 32-return window (a register array shifted by one
// each step: fully unrolled, so no local memory). Each step the block stages its rows (33 floats
// per environment, stride 33 words: conflict-free) in shared memory and writes them out as one
// contiguous, 16-byte-vectorized span, so the observation write is coalesced although a row is
// 132 bytes. docs/envs.md has the byte count and the design notes.
#include "rl/envs/bench_market.hpp"

#include <cuda_bf16.h>

#include <cmath>
#include <string>

#include "gpu/check.hpp"
#include "gpu/launch.cuh"
#include "gpu/philox.cuh"
#include "rl/envs/episode_stats.cuh"
#include "rl/envs/obs_store.cuh"

namespace foxhunt::rl {
namespace {

using K = BenchMarketConstants;
constexpr int kThreads = 128;  // environments per block
constexpr int kW = K::window;
constexpr int kD = K::obs_dim;

struct Params {
  float theta;          // OU mean of the log price
  float decay;          // e^{-kappa dt}
  float noise_sd;       // sigma sqrt((1 - e^{-2 kappa dt}) / (2 kappa))
  float stationary_sd;  // sigma / sqrt(2 kappa)
  float inv_ret_scale;  // 1 / (sigma sqrt(dt))
  float fee;
};

Params make_params() {
  const double decay = std::exp(-K::kappa * K::dt);
  Params p;
  p.theta = static_cast<float>(K::theta);
  p.decay = static_cast<float>(decay);
  p.noise_sd = static_cast<float>(K::sigma * std::sqrt((1.0 - decay * decay) / (2.0 * K::kappa)));
  p.stationary_sd = static_cast<float>(K::sigma / std::sqrt(2.0 * K::kappa));
  p.inv_ret_scale = static_cast<float>(1.0 / (K::sigma * std::sqrt(K::dt)));
  p.fee = static_cast<float>(K::fee);
  return p;
}

template <class ObsT>
__global__ void __launch_bounds__(kThreads)
    reset_kernel(ObsT* obs, BenchMarketState st, Params p, std::uint64_t seed, std::int64_t n) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) {
    const uint4 bits = gpu::random_bits4(seed, static_cast<std::uint32_t>(i), 0);
    st.log_price[i] = p.theta + p.stationary_sd * gpu::normal2(bits.z, bits.w).x;
    st.position[i] = 0.0f;
    st.episode_return[i] = 0.0f;
    st.episode_step[i] = 0;
    st.counter[i] = 0;
    for (int k = 0; k < kW; ++k) st.window[k * n + i] = 0.0f;
    st.accum[i] = EpisodeAccum{};
  }
  // The first observation is all zeros (empty window, flat): written as one coalesced sweep.
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t e = i; e < n * kD; e += stride) store_obs(obs + e, 0.0f);
}

template <class ObsT>
__global__ void __launch_bounds__(kThreads)
    step_kernel(ObsT* obs, float* reward, std::uint8_t* terminated, std::uint8_t* truncated, ObsT* final_obs,
                BenchMarketState st, const std::int32_t* actions, Params p, std::uint64_t seed, std::int64_t n,
                std::int64_t steps) {
  __shared__ __align__(16) float stage[kThreads * kD];
  const std::int64_t block_start = static_cast<std::int64_t>(blockIdx.x) * kThreads;
  const std::int64_t i = block_start + threadIdx.x;
  const bool active = i < n;
  const int rows = static_cast<int>(n - block_start < kThreads ? n - block_start : kThreads);

  float x = 0.0f, pos = 0.0f, ep_return = 0.0f;
  std::int32_t ep_step = 0;
  std::uint64_t c = 0;
  float w[kW];
  if (active) {
    x = st.log_price[i];
    pos = st.position[i];
    ep_return = st.episode_return[i];
    ep_step = st.episode_step[i];
    c = st.counter[i];
#pragma unroll
    for (int k = 0; k < kW; ++k) w[k] = st.window[k * n + i];
  } else {
#pragma unroll
    for (int k = 0; k < kW; ++k) w[k] = 0.0f;
  }

  for (std::int64_t t = 0; t < steps; ++t) {
    const std::int64_t row = t * n + i;
    if (active) {
      int a = actions[row];
      a = a < 0 ? 0 : (a > 2 ? 2 : a);
      const float new_pos = static_cast<float>(a - 1);
      const float cost = p.fee * fabsf(new_pos - pos);
      ++c;
      const uint4 bits = gpu::random_bits4(seed, static_cast<std::uint32_t>(i), c);
      const float z = gpu::normal2(bits.x, bits.y).x;
      const float x_new = p.theta + (x - p.theta) * p.decay + p.noise_sd * z;
      const float r = x_new - x;
      const float rew = new_pos * expm1f(r) - cost;
      x = x_new;
      pos = new_pos;
      ep_return += rew;
      ++ep_step;
#pragma unroll
      for (int k = 0; k < kW - 1; ++k) w[k] = w[k + 1];
      w[kW - 1] = r * p.inv_ret_scale;
      const bool done = ep_step >= K::episode_length;
      if (done) {
        if (final_obs != nullptr) {
          ObsT* f = final_obs + row * kD;
#pragma unroll
          for (int k = 0; k < kW; ++k) store_obs(f + k, w[k]);
          store_obs(f + kW, pos);
        }
        record_episode(st.accum + i, ep_return, ep_step);
        x = p.theta + p.stationary_sd * gpu::normal2(bits.z, bits.w).x;
        pos = 0.0f;
        ep_return = 0.0f;
        ep_step = 0;
#pragma unroll
        for (int k = 0; k < kW; ++k) w[k] = 0.0f;
      }
      reward[row] = rew;
      terminated[row] = 0;
      truncated[row] = done ? 1 : 0;
      float* s = stage + threadIdx.x * kD;  // stride 33 words: the 32 banks see distinct words
#pragma unroll
      for (int k = 0; k < kW; ++k) s[k] = w[k];
      s[kW] = pos;
    }
    __syncthreads();
    block_store_staged(obs + (t * n + block_start) * kD, stage, rows * kD);
    __syncthreads();  // the stage is rewritten next step
  }

  if (active) {
    st.log_price[i] = x;
    st.position[i] = pos;
    st.episode_return[i] = ep_return;
    st.episode_step[i] = ep_step;
    st.counter[i] = c;
#pragma unroll
    for (int k = 0; k < kW; ++k) st.window[k * n + i] = w[k];
  }
}

}  // namespace

std::int64_t bench_market_bytes(std::int64_t n, std::int64_t steps, gpu::DType obs_dtype) {
  const std::int64_t per_step = 4 /*action*/ + kD * static_cast<std::int64_t>(gpu::dtype_size(obs_dtype)) +
                                4 /*reward*/ + 1 /*terminated*/ + 1 /*truncated*/;
  const std::int64_t state = 4 + 4 + 4 + 4 + 8 + 4 * kW;  // price, position, return, step, counter, window
  return n * steps * per_step + 2 * n * state;
}

void bench_market_reset(void* obs, gpu::DType obs_dtype, const BenchMarketState& state, std::uint64_t seed,
                        std::int64_t n, cudaStream_t stream) {
  FH_EXPECT(n >= 0 && n <= (std::int64_t{1} << 31), "bench_market_reset: n must be in [0, 2^31]");
  if (n == 0) return;
  FH_EXPECT(obs != nullptr, "bench_market_reset: obs must be a device buffer of (N, 33)");
  FH_EXPECT(obs_dtype == gpu::DType::f32 || obs_dtype == gpu::DType::bf16,
            "bench_market_reset: obs_dtype must be f32 or bf16");
  const int blocks = gpu::ceil_div(n, kThreads);
  const Params p = make_params();
  if (obs_dtype == gpu::DType::f32)
    reset_kernel<<<blocks, kThreads, 0, stream>>>(static_cast<float*>(obs), state, p, seed, n);
  else
    reset_kernel<<<blocks, kThreads, 0, stream>>>(static_cast<__nv_bfloat16*>(obs), state, p, seed, n);
  FH_CHECK_LAUNCH();
}

void bench_market_step(const StepOutputs& out, const BenchMarketState& state, const std::int32_t* actions,
                       std::uint64_t seed, std::int64_t n, std::int64_t steps, cudaStream_t stream) {
  FH_EXPECT(n >= 0 && n <= (std::int64_t{1} << 31), "bench_market_step: n must be in [0, 2^31]");
  FH_EXPECT(steps >= 1, "bench_market_step: steps must be >= 1");
  if (n == 0) return;
  FH_EXPECT(actions != nullptr, "bench_market_step: actions must be a device buffer of (steps, N) int32");
  const int blocks = gpu::ceil_div(n, kThreads);
  const Params p = make_params();
  if (out.obs_dtype == gpu::DType::f32)
    step_kernel<<<blocks, kThreads, 0, stream>>>(static_cast<float*>(out.obs), out.reward, out.terminated,
                                                 out.truncated, static_cast<float*>(out.final_obs), state, actions, p,
                                                 seed, n, steps);
  else
    step_kernel<<<blocks, kThreads, 0, stream>>>(static_cast<__nv_bfloat16*>(out.obs), out.reward, out.terminated,
                                                 out.truncated, static_cast<__nv_bfloat16*>(out.final_obs), state,
                                                 actions, p, seed, n, steps);
  FH_CHECK_LAUNCH();
}

namespace {
std::size_t count_of(std::int64_t n) { return static_cast<std::size_t>(n > 0 ? n : 0); }
}  // namespace

BenchMarketEnv::BenchMarketEnv(std::int64_t num_envs)
    : n_(num_envs),
      log_price_(count_of(num_envs)),
      position_(count_of(num_envs)),
      episode_return_(count_of(num_envs)),
      window_(count_of(num_envs) * kW),
      episode_step_(count_of(num_envs)),
      counter_(count_of(num_envs)),
      accum_(count_of(num_envs)),
      stats_workspace_(episode_stats_workspace_bytes()) {
  FH_EXPECT(num_envs >= 1 && num_envs <= (std::int64_t{1} << 31), "BenchMarketEnv: num_envs must be in [1, 2^31]");
  state_ = BenchMarketState{log_price_.data(), position_.data(), episode_return_.data(), episode_step_.data(),
                            counter_.data(),   window_.data(),   accum_.data()};
}

void BenchMarketEnv::reset(void* obs, gpu::DType obs_dtype, std::uint64_t seed, cudaStream_t stream) {
  seed_ = seed;
  bench_market_reset(obs, obs_dtype, state_, seed, n_, stream);
  started_ = true;
}

void BenchMarketEnv::step(const StepOutputs& out, const ActionInput& actions, std::int64_t steps, cudaStream_t stream) {
  FH_EXPECT(started_, "BenchMarketEnv::step: call reset() first");
  check_step_args(out, actions, steps);
  bench_market_step(out, state_, actions.discrete, seed_, n_, steps, stream);
}

void BenchMarketEnv::reduce_stats(EpisodeStats* out, bool clear, cudaStream_t stream) {
  FH_EXPECT(started_, "BenchMarketEnv::reduce_stats: call reset() first");
  episode_stats_reduce(out, accum_.data(), n_, clear, stats_workspace_.data(), stats_workspace_.size(), stream);
}

}  // namespace foxhunt::rl
