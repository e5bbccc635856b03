// CartPole-v1 on the device: one thread per environment, the state kept in registers across the
// `steps` steps of one launch; observations are written as one 16-byte (f32) or 8-byte (bf16)
// store per environment per step, so a warp's stores are contiguous.
#include "rl/envs/cartpole.hpp"

#include <cuda_bf16.h>

#include <string>

#include "gpu/check.hpp"
#include "gpu/launch.cuh"
#include "gpu/philox.cuh"
#include "rl/envs/episode_stats.cuh"
#include "rl/envs/obs_store.cuh"

namespace foxhunt::rl {
namespace {

using C = CartPoleConstants;
constexpr int kEnvBlock = 128;  // small blocks spread small N over more SMs

__device__ __forceinline__ float4 initial_state(std::uint64_t seed, std::uint32_t env, std::uint64_t counter) {
  const float4 u = gpu::uniform4(seed, env, counter);
  return make_float4(gpu::uniform_in(u.x, C::init_low, C::init_high), gpu::uniform_in(u.y, C::init_low, C::init_high),
                     gpu::uniform_in(u.z, C::init_low, C::init_high), gpu::uniform_in(u.w, C::init_low, C::init_high));
}

// One Euler step of Gymnasium's equations, in f32.
__device__ __forceinline__ float4 physics_step(float4 s, std::int32_t action) {
  constexpr float kGravity = static_cast<float>(C::gravity);
  constexpr float kMassPole = static_cast<float>(C::masspole);
  constexpr float kTotalMass = static_cast<float>(C::total_mass);
  constexpr float kLength = static_cast<float>(C::length);
  constexpr float kPoleMassLength = static_cast<float>(C::polemass_length);
  constexpr float kTau = static_cast<float>(C::tau);
  const float force = action == 1 ? static_cast<float>(C::force_mag) : -static_cast<float>(C::force_mag);
  float sintheta, costheta;
  sincosf(s.z, &sintheta, &costheta);
  const float temp = (force + kPoleMassLength * s.w * s.w * sintheta) / kTotalMass;
  const float thetaacc = (kGravity * sintheta - costheta * temp) /
                         (kLength * (4.0f / 3.0f - kMassPole * costheta * costheta / kTotalMass));
  const float xacc = temp - kPoleMassLength * thetaacc * costheta / kTotalMass;
  float4 n;
  n.x = s.x + kTau * s.y;
  n.y = s.y + kTau * xacc;
  n.z = s.z + kTau * s.w;
  n.w = s.w + kTau * thetaacc;
  return n;
}

__device__ __forceinline__ bool is_terminal(float4 s) {
  // Compared in double against Gymnasium's double thresholds.
  const double x = s.x, th = s.z;
  return x < -C::x_threshold || x > C::x_threshold || th < -C::theta_threshold || th > C::theta_threshold;
}

template <class ObsT>
__global__ void __launch_bounds__(kEnvBlock)
    reset_kernel(ObsT* obs, float4* state, std::int32_t* episode_steps, std::uint64_t* counter, EpisodeAccum* accum,
                 std::uint64_t seed, std::int64_t n) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float4 s = initial_state(seed, static_cast<std::uint32_t>(i), 0);
  state[i] = s;
  episode_steps[i] = 0;
  counter[i] = 0;
  accum[i] = EpisodeAccum{};
  store_obs4(obs + i * 4, s);
}

template <class ObsT>
__global__ void __launch_bounds__(kEnvBlock)
    step_kernel(ObsT* obs, float* reward, std::uint8_t* terminated, std::uint8_t* truncated, ObsT* final_obs,
                float4* state, std::int32_t* episode_steps, std::uint64_t* counter, EpisodeAccum* accum,
                const std::int32_t* actions, std::uint64_t seed, std::int64_t n, std::int64_t steps) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float4 s = state[i];
  std::int32_t len = episode_steps[i];
  std::uint64_t c = counter[i];
  for (std::int64_t t = 0; t < steps; ++t) {
    const std::int64_t row = t * n + i;
    s = physics_step(s, actions[row]);
    ++len;
    ++c;
    const bool term = is_terminal(s);
    const bool trunc = len >= C::max_episode_steps;
    if (term || trunc) {
      if (final_obs != nullptr) store_obs4(final_obs + row * 4, s);
      record_episode(accum + i, static_cast<double>(len), static_cast<double>(len));
      s = initial_state(seed, static_cast<std::uint32_t>(i), c);
      len = 0;
    }
    store_obs4(obs + row * 4, s);
    reward[row] = 1.0f;
    terminated[row] = term ? 1 : 0;
    truncated[row] = trunc ? 1 : 0;
  }
  state[i] = s;
  episode_steps[i] = len;
  counter[i] = c;
}

void check_obs_alignment(const void* p, gpu::DType dtype, const char* name) {
  const std::uintptr_t a = reinterpret_cast<std::uintptr_t>(p);
  const std::uintptr_t need = dtype == gpu::DType::f32 ? 16 : 8;
  FH_EXPECT(p == nullptr || a % need == 0, std::string("cartpole: ") + name + " must be " + std::to_string(need) +
                                               "-byte aligned (rows are 4 values)");
}

}  // namespace

void cartpole_reset(void* obs, gpu::DType obs_dtype, float4* state, std::int32_t* episode_steps, std::uint64_t* counter,
                    EpisodeAccum* accum, std::uint64_t seed, std::int64_t n, cudaStream_t stream) {
  FH_EXPECT(n >= 0 && n <= (std::int64_t{1} << 31), "cartpole_reset: n must be in [0, 2^31]");
  if (n == 0) return;
  FH_EXPECT(obs != nullptr, "cartpole_reset: obs must be a device buffer of (N, 4)");
  FH_EXPECT(obs_dtype == gpu::DType::f32 || obs_dtype == gpu::DType::bf16,
            "cartpole_reset: obs_dtype must be f32 or bf16");
  check_obs_alignment(obs, obs_dtype, "obs");
  const int blocks = gpu::ceil_div(n, kEnvBlock);
  if (obs_dtype == gpu::DType::f32)
    reset_kernel<<<blocks, kEnvBlock, 0, stream>>>(static_cast<float*>(obs), state, episode_steps, counter, accum, seed,
                                                   n);
  else
    reset_kernel<<<blocks, kEnvBlock, 0, stream>>>(static_cast<__nv_bfloat16*>(obs), state, episode_steps, counter,
                                                   accum, seed, n);
  FH_CHECK_LAUNCH();
}

void cartpole_step(const StepOutputs& out, float4* state, std::int32_t* episode_steps, std::uint64_t* counter,
                   EpisodeAccum* accum, const std::int32_t* actions, std::uint64_t seed, std::int64_t n,
                   std::int64_t steps, cudaStream_t stream) {
  FH_EXPECT(n >= 0 && n <= (std::int64_t{1} << 31), "cartpole_step: n must be in [0, 2^31]");
  FH_EXPECT(steps >= 1, "cartpole_step: steps must be >= 1");
  if (n == 0) return;
  FH_EXPECT(actions != nullptr, "cartpole_step: actions must be a device buffer of (steps, N) int32");
  check_obs_alignment(out.obs, out.obs_dtype, "out.obs");
  check_obs_alignment(out.final_obs, out.obs_dtype, "out.final_obs");
  const int blocks = gpu::ceil_div(n, kEnvBlock);
  if (out.obs_dtype == gpu::DType::f32)
    step_kernel<<<blocks, kEnvBlock, 0, stream>>>(static_cast<float*>(out.obs), out.reward, out.terminated,
                                                  out.truncated, static_cast<float*>(out.final_obs), state,
                                                  episode_steps, counter, accum, actions, seed, n, steps);
  else
    step_kernel<<<blocks, kEnvBlock, 0, stream>>>(static_cast<__nv_bfloat16*>(out.obs), out.reward, out.terminated,
                                                  out.truncated, static_cast<__nv_bfloat16*>(out.final_obs), state,
                                                  episode_steps, counter, accum, actions, seed, n, steps);
  FH_CHECK_LAUNCH();
}

CartPoleEnv::CartPoleEnv(std::int64_t num_envs)
    : n_(num_envs),
      state_(static_cast<std::size_t>(num_envs > 0 ? num_envs : 0)),
      episode_steps_(static_cast<std::size_t>(num_envs > 0 ? num_envs : 0)),
      counter_(static_cast<std::size_t>(num_envs > 0 ? num_envs : 0)),
      accum_(static_cast<std::size_t>(num_envs > 0 ? num_envs : 0)),
      stats_workspace_(episode_stats_workspace_bytes()) {
  FH_EXPECT(num_envs >= 1 && num_envs <= (std::int64_t{1} << 31), "CartPoleEnv: num_envs must be in [1, 2^31]");
}

void CartPoleEnv::reset(void* obs, gpu::DType obs_dtype, std::uint64_t seed, cudaStream_t stream) {
  seed_ = seed;
  cartpole_reset(obs, obs_dtype, state_.data(), episode_steps_.data(), counter_.data(), accum_.data(), seed, n_,
                 stream);
  started_ = true;
}

void CartPoleEnv::step(const StepOutputs& out, const ActionInput& actions, std::int64_t steps, cudaStream_t stream) {
  FH_EXPECT(started_, "CartPoleEnv::step: call reset() first");
  check_step_args(out, actions, steps);
  cartpole_step(out, state_.data(), episode_steps_.data(), counter_.data(), accum_.data(), actions.discrete, seed_, n_,
                steps, stream);
}

void CartPoleEnv::reduce_stats(EpisodeStats* out, bool clear, cudaStream_t stream) {
  FH_EXPECT(started_, "CartPoleEnv::reduce_stats: call reset() first");
  episode_stats_reduce(out, accum_.data(), n_, clear, stats_workspace_.data(), stats_workspace_.size(), stream);
}

}  // namespace foxhunt::rl
