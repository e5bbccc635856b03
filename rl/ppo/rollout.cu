#include "rl/ppo/rollout.hpp"

#include <string>

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

namespace {

template <typename T>
void copy_array(gpu::DeviceBuffer<T>& dst, int dst_device, const gpu::DeviceBuffer<T>& src, int src_device,
                const char* name, cudaStream_t stream) {
  FH_EXPECT(dst.size() == src.size(), std::string("copy_rollout: the rollouts' ") + name + " arrays differ in size");
  if (!src.empty()) FH_CHECK(cudaMemcpyPeerAsync(dst.data(), dst_device, src.data(), src_device, src.bytes(), stream));
}

}  // namespace

void copy_rollout(Rollout& dst, int dst_device, const Rollout& src, int src_device, cudaStream_t stream) {
  FH_EXPECT(dst.steps == src.steps && dst.num_envs == src.num_envs && dst.obs_dim == src.obs_dim,
            "copy_rollout: the rollouts differ in shape");
  auto copy = [&](auto member, const char* name) {
    copy_array(dst.*member, dst_device, src.*member, src_device, name, stream);
  };
  copy(&Rollout::obs, "obs");
  copy(&Rollout::next_obs, "next_obs");
  copy(&Rollout::final_obs, "final_obs");
  copy(&Rollout::discrete, "discrete");
  copy(&Rollout::raw, "raw");
  copy(&Rollout::env_actions, "env_actions");
  copy(&Rollout::logp, "logp");
  copy(&Rollout::values, "values");
  copy(&Rollout::rewards, "rewards");
  copy(&Rollout::bootstrap, "bootstrap");
  copy(&Rollout::advantages, "advantages");
  copy(&Rollout::returns, "returns");
  copy(&Rollout::next_value, "next_value");
  copy(&Rollout::terminated, "terminated");
  copy(&Rollout::truncated, "truncated");
  copy(&Rollout::state, "state");
  copy(&Rollout::state0, "state0");
  copy(&Rollout::scratch_state, "scratch_state");
  copy(&Rollout::resets, "resets");
  copy(&Rollout::last_done, "last_done");
}

}  // namespace foxhunt::rl::ppo
