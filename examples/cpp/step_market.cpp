// Loads a market config, steps N environments for T steps with uniformly random actions and prints
// the statistics of the episodes that finished.
//   step_market <market.toml> [num_envs = 1024] [steps = 512]
// Without a CUDA device it checks the config, says why it cannot step, and exits 0.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "gpu/buffer.hpp"
#include "gpu/device.hpp"
#include "gpu/exit.hpp"
#include "rl/envs/market.hpp"
#include "rl/envs/market_config.hpp"
#include "rl/envs/market_params.hpp"

using namespace foxhunt;

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s <market.toml> [num_envs] [steps]\n", argv[0]);
    return 2;
  }
  const std::int64_t n = argc > 2 ? std::atoll(argv[2]) : 1024;
  const std::int64_t steps = argc > 3 ? std::atoll(argv[3]) : 512;
  rl::MarketConfig config;
  try {
    config = rl::load_market_config(argv[1]);
  } catch (const rl::ConfigError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  std::printf("%s: %s, %d assets, %s actions, obs_dim %d\n", argv[1], rl::to_string(config.process), config.assets,
              rl::to_string(config.action), rl::market_obs_dim(config));
  std::string why;
  if (gpu::device_count(&why) == 0) {
    std::printf("no CUDA device (%s): config checked, nothing stepped\n", why.c_str());
    return 0;
  }

  auto env = rl::make_market_env(config, n);
  const rl::ActionSpace space = env->action_space();
  cudaStream_t stream = nullptr;
  FH_CHECK(cudaStreamCreate(&stream));
  // A rollout's worth of actions drawn on the host and uploaded once (set-up, not a hot path).
  const std::size_t count = static_cast<std::size_t>(steps * n * space.width());
  gpu::DeviceBuffer<std::int32_t> discrete;
  gpu::DeviceBuffer<float> continuous;
  rl::ActionInput actions;
  std::mt19937 rng(1);
  if (space.kind == rl::ActionSpace::Kind::discrete) {
    std::uniform_int_distribution<int> pick(0, space.choices - 1);
    std::vector<std::int32_t> host(count);
    for (auto& a : host) a = pick(rng);
    discrete = gpu::DeviceBuffer<std::int32_t>(count);
    discrete.upload(std::span<const std::int32_t>(host), stream);
    FH_CHECK(cudaStreamSynchronize(stream));
    actions.discrete = discrete.data();
  } else {
    std::uniform_real_distribution<float> pick(-1.0f, 1.0f);
    std::vector<float> host(count);
    for (auto& a : host) a = pick(rng);
    continuous = gpu::DeviceBuffer<float>(count);
    continuous.upload(std::span<const float>(host), stream);
    FH_CHECK(cudaStreamSynchronize(stream));
    actions.continuous = continuous.data();
  }

  const std::size_t rows = static_cast<std::size_t>(steps * n);
  gpu::DeviceBuffer<float> obs(rows * static_cast<std::size_t>(env->obs_dim())), reward(rows);
  gpu::DeviceBuffer<std::uint8_t> terminated(rows), truncated(rows);
  env->reset(obs.data(), gpu::DType::f32, 7, stream);
  env->step({obs.data(), reward.data(), terminated.data(), truncated.data(), nullptr, gpu::DType::f32}, actions, steps,
            stream);
  gpu::ExitSlot<rl::EpisodeStats> stats;
  env->export_stats(stats, false, stream);
  const rl::EpisodeStats s = stats.wait();
  std::printf("%lld envs x %lld steps: %.0f episodes, mean return %.5f, mean Sharpe %.3f, mean max drawdown %.4f\n",
              static_cast<long long>(n), static_cast<long long>(steps), s.episodes, s.mean_return, s.mean_sharpe,
              s.mean_max_drawdown);
  FH_CHECK(cudaStreamDestroy(stream));
  return 0;
}
