#pragma once
// DqnBatch: what the learner reads from replay, as device pointers (B = size rows). The replay
// writes these buffers in place each sample, so one captured update graph serves every replay.
#include <cstdint>

namespace foxhunt::rl {

struct DqnBatch {
  const float* obs = nullptr;             // (B, obs_dim)
  const std::int32_t* actions = nullptr;  // (B, D) action index per branch
  const float* returns = nullptr;         // (B) n-step discounted reward sum, cut at the episode end
  const float* discounts = nullptr;       // (B) gamma^k of the bootstrap, 0 when the episode terminated
  const float* next_obs = nullptr;        // (B, obs_dim) the observation k steps later
  const float* weights = nullptr;         // (B) importance-sampling weights; nullptr = uniform replay
  const std::int32_t* indices = nullptr;  // (B) replay slots (for the priority update); may be nullptr
  std::int64_t size = 0;                  // B
};

}  // namespace foxhunt::rl
