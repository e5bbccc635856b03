#pragma once
// CartPole-v1 vectorized on the device, with Gymnasium's dynamics and constants
// (gymnasium/envs/classic_control/cartpole.py): Euler integration, termination at |x| > 2.4 or
// |theta| > 12 degrees, truncation after 500 steps (TimeLimit), reward 1 on every step including
// the terminating one, initial state U(-0.05, 0.05)^4. Action 1 pushes right, any other value
// pushes left (Gymnasium: `force_mag if action == 1 else -force_mag`).
// The state is kept in f32 (Gymnasium keeps float64 and returns float32 observations).
//
// Observation (4 values): x, x_dot, theta, theta_dot. Actions: int32 (T, N), Discrete(2).
// Reset draws: uniform4(seed, env index, counter) where counter is the environment's total step
// count at the reset (0 for reset()), so every reset of every environment has its own draw.
#include <cstdint>

#include "gpu/buffer.hpp"
#include "rl/envs/vec_env.hpp"

namespace foxhunt::rl {

struct CartPoleConstants {
  static constexpr double gravity = 9.8;
  static constexpr double masscart = 1.0;
  static constexpr double masspole = 0.1;
  static constexpr double total_mass = masspole + masscart;
  static constexpr double length = 0.5;  // half the pole's length
  static constexpr double polemass_length = masspole * length;
  static constexpr double force_mag = 10.0;
  static constexpr double tau = 0.02;  // seconds between state updates
  static constexpr double theta_threshold = 12.0 * 2.0 * 3.14159265358979323846 / 360.0;
  static constexpr double x_threshold = 2.4;
  static constexpr int max_episode_steps = 500;
  static constexpr float init_low = -0.05f;
  static constexpr float init_high = 0.05f;
  static constexpr int obs_dim = 4;
};

// ---- launchers (state buffers are the caller's; the class below owns them) ----------------
// state (N) float4 {x, x_dot, theta, theta_dot}; episode_steps (N); counter (N) total steps.

// Fresh episodes for every environment from `seed`; obs (N, 4) in obs_dtype; accum zeroed.
void cartpole_reset(void* obs, gpu::DType obs_dtype, float4* state, std::int32_t* episode_steps, std::uint64_t* counter,
                    EpisodeAccum* accum, std::uint64_t seed, std::int64_t n, cudaStream_t stream);

// `steps` steps of n environments; see VecEnv for the output layout and autoreset.
void cartpole_step(const StepOutputs& out, float4* state, std::int32_t* episode_steps, std::uint64_t* counter,
                   EpisodeAccum* accum, const std::int32_t* actions,  // (steps, n)
                   std::uint64_t seed, std::int64_t n, std::int64_t steps, cudaStream_t stream);

class CartPoleEnv final : public VecEnv {
 public:
  explicit CartPoleEnv(std::int64_t num_envs);

  std::int64_t num_envs() const override { return n_; }
  std::int64_t obs_dim() const override { return CartPoleConstants::obs_dim; }
  ActionSpace action_space() const override { return ActionSpace{ActionSpace::Kind::discrete, 1, 2, 0, 0.0f, 0.0f}; }

  void reset(void* obs, gpu::DType obs_dtype, std::uint64_t seed, cudaStream_t stream) override;
  void step(const StepOutputs& out, const ActionInput& actions, std::int64_t steps, cudaStream_t stream) override;
  void reduce_stats(EpisodeStats* out, bool clear, cudaStream_t stream) override;

  // Device state, for tests and for policies that read it.
  const float4* state() const { return state_.data(); }

  // Every array the step kernel reads or writes, mutable: what a checkpoint saves and restores
  // for an exact resume (actors/env_state.cpp). Each holds num_envs() elements. The seed and the
  // started flag are not listed: they come from reset() with the run's seed.
  struct MutableState {
    float4* state;                // {x, x_dot, theta, theta_dot}
    std::int32_t* episode_steps;  // steps of the running episode (truncation at 500)
    std::uint64_t* counter;       // total steps: the Philox counter of the next reset draw
    EpisodeAccum* accum;          // episode statistics accumulators
  };
  MutableState mutable_state() { return {state_.data(), episode_steps_.data(), counter_.data(), accum_.data()}; }

 private:
  std::int64_t n_;
  std::uint64_t seed_ = 0;
  bool started_ = false;
  gpu::DeviceBuffer<float4> state_;
  gpu::DeviceBuffer<std::int32_t> episode_steps_;
  gpu::DeviceBuffer<std::uint64_t> counter_;
  gpu::DeviceBuffer<EpisodeAccum> accum_;
  gpu::DeviceBuffer<std::byte> stats_workspace_;
};

}  // namespace foxhunt::rl
