#pragma once
// TransitionSlotLayout: how one collector transition slot is laid out in a single device
// allocation, so that a LocalDeviceHandle (one pointer) names a whole (steps, envs) block and the
// replay stage can rebuild the rl::TransitionBatch from it. Each array starts on a 256-byte
// boundary (vector loads).
//   obs (steps, envs, obs_dim) | next_obs (steps, envs, obs_dim) | actions (steps, envs, action_dim)
//   | rewards (steps, envs) f32 | terminated (steps, envs) u8 | truncated (steps, envs) u8
#include <cstddef>
#include <cstdint>

#include "gpu/tensor.hpp"
#include "rl/replay/config.hpp"
#include "rl/replay/transition_batch.hpp"

namespace foxhunt::actors {

struct TransitionSlotLayout {
  std::int64_t steps = 0, envs = 0;
  rl::TransitionLayout layout;
  std::size_t obs = 0, next_obs = 0, actions = 0, rewards = 0, terminated = 0, truncated = 0;
  std::size_t bytes = 0;  // the whole slot

  static TransitionSlotLayout make(std::int64_t steps, std::int64_t envs, const rl::TransitionLayout& layout) {
    FH_EXPECT(steps >= 1 && envs >= 1, "a transition slot needs steps >= 1 and envs >= 1");
    auto align = [](std::size_t x) { return (x + 255) / 256 * 256; };
    TransitionSlotLayout s;
    s.steps = steps;
    s.envs = envs;
    s.layout = layout;
    const std::size_t rows = static_cast<std::size_t>(steps) * static_cast<std::size_t>(envs);
    const std::size_t obs_bytes = rows * static_cast<std::size_t>(layout.obs_dim) * gpu::dtype_size(layout.obs_dtype);
    std::size_t off = 0;
    s.obs = off;
    off = align(off + obs_bytes);
    s.next_obs = off;
    off = align(off + obs_bytes);
    s.actions = off;
    off = align(off + rows * static_cast<std::size_t>(layout.action_dim) * 4);
    s.rewards = off;
    off = align(off + rows * sizeof(float));
    s.terminated = off;
    off = align(off + rows);
    s.truncated = off;
    off = align(off + rows);
    s.bytes = off;
    return s;
  }

  rl::TransitionBatch view(const void* base) const {
    const auto* b = static_cast<const std::byte*>(base);
    rl::TransitionBatch t;
    t.layout = layout;
    t.steps = steps;
    t.envs = envs;
    t.obs = b + obs;
    t.next_obs = b + next_obs;
    t.actions = b + actions;
    t.rewards = reinterpret_cast<const float*>(b + rewards);
    t.terminated = reinterpret_cast<const std::uint8_t*>(b + terminated);
    t.truncated = reinterpret_cast<const std::uint8_t*>(b + truncated);
    return t;
  }
};

}  // namespace foxhunt::actors
