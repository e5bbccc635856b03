#pragma once
// The replay buffer's small device-resident state. Kernels read and advance it, so a captured
// sample or priority update replays correctly in a CUDA graph; the host never reads it.
#include <cstdint>

namespace foxhunt::rl {

struct ReplayState {
  std::int64_t size = 0;           // stored transitions (written by insert, from the host count)
  std::uint64_t sample_calls = 0;  // Philox counter of the sampler; beta's step when none is given
  float max_priority = 1.0f;       // running max of p^alpha (leaf space): alpha is applied once
  std::uint32_t epoch = 0;         // priority-update generation, high half of the leaf stamps
  std::uint32_t insert_done = 0;   // blocks finished in the current insert (last-block pattern)
  std::uint32_t sample_done = 0;   // blocks finished in the current sample (last-block pattern)
  std::uint32_t update_done = 0;   // blocks finished in the current priority update (last-block pattern)
};
static_assert(sizeof(ReplayState) <= 64, "ReplayState must fit the 64 bytes the config accounts for");

}  // namespace foxhunt::rl
