#pragma once
// Device pieces shared by the head kernels (rl/ppo/distributions.cu) and the policy loss
// (rl/ppo/loss.cu), so that both compute a row's log-prob and entropy with the same code:
// the lane layout, fixed-order group sums and the per-branch / per-dimension terms.
//
// Lane layout: a group of `lanes` threads (a power of two <= 32, the smallest covering the
// branches or dimensions) serves one row; lane `sub` of the group takes branches (dimensions)
// sub, sub + lanes, ... (at most kPerLane of them), sums its terms in that order, and the group
// adds its lanes with an xor butterfly, so every lane ends with the same bits.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "gpu/launch.cuh"
#include "rl/ppo/distributions.hpp"

namespace foxhunt::rl::ppo::heads {

inline constexpr int kPerLane = kMaxHeadLanes / 32;  // branches or dimensions one lane handles at most
inline constexpr float kHalfLog2Pi = 0.918938533204672742f;
inline constexpr float kLog2 = 0.693147180559945309f;

// Lanes per row: the smallest power of two >= the branches (dimensions), at most 32.
inline int lanes_per_row(const HeadShape& s) {
  const int n = s.action_width();
  int g = 1;
  while (g < n && g < 32) g <<= 1;
  return g;
}
// Rows one kBlock-thread block covers per pass.
inline std::int64_t rows_per_block(int lanes) { return static_cast<std::int64_t>(gpu::kBlock / lanes); }

// Sum over the `lanes` threads of a group (aligned to a multiple of lanes in the warp). Every lane
// of the warp must call it.
template <class T>
__device__ __forceinline__ T group_sum(T v, int lanes) {
  for (int o = lanes >> 1; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Calls f(row, sub, valid) for every row of this thread's group: warps stride over runs of
// 32 / lanes rows, so the trip count is the same for every lane of a warp (group shuffles inside f
// see all lanes). Lanes of rows past the end get valid == false and must not touch memory.
template <class F>
__device__ __forceinline__ void for_each_row(std::int64_t rows, int lanes, F&& f) {
  const int lane = static_cast<int>(threadIdx.x & 31);
  const std::int64_t per_warp = 32 / lanes;
  const std::int64_t warp = (static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
  const std::int64_t warps = (static_cast<std::int64_t>(gridDim.x) * blockDim.x) >> 5;
  for (std::int64_t base = warp * per_warp; base < rows; base += warps * per_warp) {
    const std::int64_t row = base + lane / lanes;
    f(row, lane & (lanes - 1), row < rows);
  }
}

// One categorical branch of `choices` logits: max, Z = sum exp(l - max), log Z and the entropy
// log Z - sum p (l - max). Choices with exp(l - max) == 0 (-inf logits) add nothing.
struct Branch {
  float max, z, log_z, entropy;
};
__device__ __forceinline__ Branch categorical_branch(const float* l, int choices) {
  float m = l[0];
  for (int k = 1; k < choices; ++k) m = fmaxf(m, l[k]);
  float z = 0.f, es = 0.f;
  for (int k = 0; k < choices; ++k) {
    const float s = l[k] - m;
    const float e = expf(s);
    z += e;
    if (e > 0.f) es += e * s;
  }
  Branch b;
  b.max = m;
  b.z = z;
  b.log_z = logf(z);
  b.entropy = b.log_z - es / z;
  return b;
}
// log p(a) of the branch; NaN for an index outside [0, choices).
__device__ __forceinline__ float categorical_logp(const float* l, int choices, const Branch& b, std::int32_t a) {
  if (a < 0 || a >= choices) return __int_as_float(0x7fffffff);
  return (l[a] - b.max) - b.log_z;
}

// log((high - low) / 2 * (1 - tanh(u)^2)) with log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u)).
__device__ __forceinline__ float tanh_log_jacobian(float u, float low, float high) {
  const float x = -2.f * u;
  const float softplus = fmaxf(x, 0.f) + log1pf(expf(-fabsf(x)));
  return logf(0.5f * (high - low)) + 2.f * (kLog2 - u - softplus);
}

// log-density of one dimension of the stored sample u (of the squashed action for tanh).
__device__ __forceinline__ float gaussian_logp(float u, float mean, float log_std, const HeadShape& s) {
  const float z = (u - mean) / expf(log_std);
  float lp = -0.5f * z * z - log_std - kHalfLog2Pi;
  if (s.bound == HeadShape::Bound::tanh) lp -= tanh_log_jacobian(u, s.low, s.high);
  return lp;
}
__device__ __forceinline__ float gaussian_entropy(float log_std) { return 0.5f + kHalfLog2Pi + log_std; }

// What the environment gets for the unbounded value u.
__device__ __forceinline__ float bound_action(float u, const HeadShape& s) {
  if (s.bound == HeadShape::Bound::tanh) return s.low + (tanhf(u) + 1.f) * 0.5f * (s.high - s.low);
  return fminf(fmaxf(u, s.low), s.high);
}

}  // namespace foxhunt::rl::ppo::heads
