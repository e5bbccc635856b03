#include "rl/ppo/rollout.hpp"

#include "gpu/check.hpp"

namespace foxhunt::rl::ppo {
namespace {

std::size_t count(std::int64_t a, std::int64_t b = 1, std::int64_t c = 1) {
  return static_cast<std::size_t>(a * b * c);
}

}  // namespace

Rollout::Rollout(std::int64_t t, std::int64_t n, std::int64_t c, const HeadShape& h, std::int64_t state_features,
                 cudaStream_t stream)
    : steps(t), num_envs(n), obs_dim(c), head(h) {
  FH_EXPECT(t >= 1 && n >= 1 && c >= 1, "Rollout: steps, num_envs and obs_dim must be >= 1");
  const bool gaussian = h.kind == HeadShape::Kind::gaussian;
  obs = gpu::DeviceBuffer<float>(count(t, n, c));
  next_obs = gpu::DeviceBuffer<float>(count(n, c));
  final_obs = gpu::DeviceBuffer<float>(count(t, n, c));
  final_obs.zero(stream);
  if (gaussian)
    raw = gpu::DeviceBuffer<float>(count(t, n, h.dim));
  else
    discrete = gpu::DeviceBuffer<std::int32_t>(count(t, n, h.branches));
  env_actions = gpu::DeviceBuffer<float>(count(n, h.action_width()));
  for (auto* b : {&logp, &values, &rewards, &bootstrap, &advantages, &returns})
    *b = gpu::DeviceBuffer<float>(count(t, n));
  next_value = gpu::DeviceBuffer<float>(count(n));
  terminated = gpu::DeviceBuffer<std::uint8_t>(count(t, n));
  truncated = gpu::DeviceBuffer<std::uint8_t>(count(t, n));
  if (state_features > 0) {
    for (auto* b : {&state, &state0, &scratch_state}) {
      *b = gpu::DeviceBuffer<float>(count(n, state_features));
      b->zero(stream);
    }
    resets = gpu::DeviceBuffer<std::uint8_t>(count(t, n));
    last_done = gpu::DeviceBuffer<std::uint8_t>(count(n));
    resets.zero(stream);
    last_done.zero(stream);
  }
}

}  // namespace foxhunt::rl::ppo
