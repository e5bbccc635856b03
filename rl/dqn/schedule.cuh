#pragma once
// Device-side pieces of the DQN state updates shared by rl/dqn/state.cu and rl/dqn/fused.cu.
#include <cuda_runtime.h>

#include <cstdint>

#include "rl/dqn/state.hpp"

namespace foxhunt::rl::detail {

// Linear schedule (rl/dqn/state.hpp linear_schedule), in double so host and device agree.
__host__ __device__ inline float schedule_at(float start, float end, std::int64_t t, std::int64_t duration) {
  if (duration <= 0 || t >= duration) return end;
  const double f = static_cast<double>(t) / static_cast<double>(duration);
  return static_cast<float>(start + (static_cast<double>(end) - start) * f);
}

// dqn_begin_update's work, for one thread.
__device__ inline void begin_update(DqnState* s, const DqnSchedule& sc) {
  s->skip = 0;
  s->dead_units = 0;
  s->params_nonfinite = 0;
  s->noise_counter += 1;
  s->beta = schedule_at(sc.beta_start, sc.beta_end, s->updates_applied, sc.beta_updates);
  s->lr = schedule_at(sc.lr_start, sc.lr_end, s->updates_applied, sc.lr_updates);
}

}  // namespace foxhunt::rl::detail
