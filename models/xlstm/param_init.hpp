#pragma once
// Host-side parameter initialisation of the xLSTM modules (set-up only: host RNG, uploads).
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "gpu/arena.hpp"

namespace foxhunt::models::xlstm_detail {

// nn.Linear's init U(-1/sqrt(fan_in), 1/sqrt(fan_in)) (also for biases).
inline void init_uniform(gpu::ParameterArena& arena, const std::string& name, std::int64_t fan_in, std::mt19937_64& rng,
                         cudaStream_t stream) {
  const float bound = 1.f / std::sqrt(static_cast<float>(fan_in));
  std::uniform_real_distribution<float> u(-bound, bound);
  std::vector<float> v(static_cast<std::size_t>(arena.entry(name).numel));
  for (auto& x : v) x = u(rng);
  arena.upload_param(name, v, stream);
}

inline void init_constant(gpu::ParameterArena& arena, const std::string& name, float value, cudaStream_t stream) {
  std::vector<float> v(static_cast<std::size_t>(arena.entry(name).numel), value);
  arena.upload_param(name, v, stream);
}

// The reference implementation's forget-gate bias: linspace(3, 6) over the heads, each head's
// units alike (per_head units per head), so the gates start remembering.
inline void init_forget_bias(gpu::ParameterArena& arena, const std::string& name, std::int64_t heads,
                             std::int64_t per_head, cudaStream_t stream) {
  std::vector<float> v(static_cast<std::size_t>(heads * per_head));
  for (std::int64_t h = 0; h < heads; ++h)
    for (std::int64_t u = 0; u < per_head; ++u)
      v[h * per_head + u] = heads > 1 ? 3.f + 3.f * static_cast<float>(h) / static_cast<float>(heads - 1) : 3.f;
  arena.upload_param(name, v, stream);
}

}  // namespace foxhunt::models::xlstm_detail
