#pragma once
// The benchmark market (issue 3, "Bench"): the fixed, fast market every speed number refers to.
//   single asset, log price x follows Ornstein-Uhlenbeck (kappa 5, theta 0, sigma 0.2, dt 1/252),
//   stepped with the exact transition x' = theta + (x - theta) e^{-kappa dt} + sd z,
//   sd = sigma sqrt((1 - e^{-2 kappa dt}) / (2 kappa));
//   actions int32 (T, N) in {0, 1, 2} = position {-1, 0, +1} (out-of-range values are clamped);
//   reward = position * (e^{x' - x} - 1) - 5e-4 * |position - previous position|;
//   256-step episodes, then truncated = 1 (never terminated) and an on-device reset:
//   x drawn from the stationary law N(theta, sigma^2 / (2 kappa)), position 0, window zeros;
//   observation (33 values, written every step) = the last 32 log returns divided by
//   sigma sqrt(dt) (oldest first, newest last; zeros before the episode's first returns),
//   then the position.
// Philox: step k (1-based, per environment) uses block (seed, env, k): words x, y give the price
// noise, words z, w the reset draw when that step ends the episode; reset() uses counter 0.
// docs/envs.md explains the kernel's design (state in registers, window in registers, coalesced
// observation rows staged through shared memory).
#include <cstdint>

#include "gpu/buffer.hpp"
#include "rl/envs/vec_env.hpp"

namespace foxhunt::rl {

struct BenchMarketConstants {
  static constexpr double kappa = 5.0;
  static constexpr double theta = 0.0;
  static constexpr double sigma = 0.2;
  static constexpr double dt = 1.0 / 252.0;
  static constexpr double fee = 5e-4;  // 5 bps of traded notional (position units of equity)
  static constexpr int episode_length = 256;
  static constexpr int window = 32;
  static constexpr int obs_dim = window + 1;
  static constexpr int actions = 3;
};

// Device state of n environments (struct of arrays, owned by BenchMarketEnv).
struct BenchMarketState {
  float* log_price = nullptr;            // (n)
  float* position = nullptr;             // (n) in {-1, 0, 1}
  float* episode_return = nullptr;       // (n) sum of rewards so far
  std::int32_t* episode_step = nullptr;  // (n)
  std::uint64_t* counter = nullptr;      // (n) steps taken by the environment
  float* window = nullptr;               // (window, n) normalized log returns, oldest first
  EpisodeAccum* accum = nullptr;         // (n)
};

void bench_market_reset(void* obs, gpu::DType obs_dtype, const BenchMarketState& state, std::uint64_t seed,
                        std::int64_t n, cudaStream_t stream);

void bench_market_step(const StepOutputs& out, const BenchMarketState& state,
                       const std::int32_t* actions,  // (steps, n)
                       std::uint64_t seed, std::int64_t n, std::int64_t steps, cudaStream_t stream);

// Minimum bytes one call moves: per env-step the action read and every output written once
// (final_obs only at episode ends, not counted), plus the state read and written once per call.
std::int64_t bench_market_bytes(std::int64_t n, std::int64_t steps, gpu::DType obs_dtype);

class BenchMarketEnv final : public VecEnv {
 public:
  explicit BenchMarketEnv(std::int64_t num_envs);

  std::int64_t num_envs() const override { return n_; }
  std::int64_t obs_dim() const override { return BenchMarketConstants::obs_dim; }
  ActionSpace action_space() const override {
    return ActionSpace{ActionSpace::Kind::discrete, 1, BenchMarketConstants::actions, 0, 0.0f, 0.0f};
  }
  void reset(void* obs, gpu::DType obs_dtype, std::uint64_t seed, cudaStream_t stream) override;
  void step(const StepOutputs& out, const ActionInput& actions, std::int64_t steps, cudaStream_t stream) override;
  void reduce_stats(EpisodeStats* out, bool clear, cudaStream_t stream) override;

  const BenchMarketState& state() const { return state_; }

 private:
  std::int64_t n_;
  std::uint64_t seed_ = 0;
  bool started_ = false;
  gpu::DeviceBuffer<float> log_price_, position_, episode_return_, window_;
  gpu::DeviceBuffer<std::int32_t> episode_step_;
  gpu::DeviceBuffer<std::uint64_t> counter_;
  gpu::DeviceBuffer<EpisodeAccum> accum_;
  gpu::DeviceBuffer<std::byte> stats_workspace_;
  BenchMarketState state_;
};

}  // namespace foxhunt::rl
