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
#include "gpu/philox.cuh"
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

// The Philox block of (row counter c, sub-block j): word 3 of the counter carries j
// (rl/ppo/distributions.hpp's layout).
__device__ __forceinline__ uint4 draw_block(std::uint64_t seed, std::uint32_t stream_id, std::uint64_t c,
                                            std::uint32_t j) {
  return gpu::philox4x32_10(
      make_uint4(static_cast<std::uint32_t>(c), static_cast<std::uint32_t>(c >> 32), stream_id, j),
      gpu::philox_key(seed));
}
__device__ __forceinline__ std::uint32_t word(const uint4& b, int k) {
  return k == 0 ? b.x : k == 1 ? b.y : k == 2 ? b.z : b.w;
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

// Draws branch (dimension) b of the row whose Philox row counter is c, from head row h, and
// stores it (discrete, or raw and env_action, each pointing at the row's first entry); returns
// its log-prob term.
__device__ __forceinline__ float sample_branch(std::int32_t* discrete, float* raw, float* env_action, const float* h,
                                               const float* log_std, int b, const HeadShape& shape,
                                               std::uint64_t seed, std::uint32_t stream_id, std::uint64_t c) {
  const uint4 bits = draw_block(seed, stream_id, c, static_cast<std::uint32_t>(b >> 2));
  if (!shape.gaussian()) {
    const float* l = h + b * shape.choices;
    const Branch st = categorical_branch(l, shape.choices);
    // Inverse CDF: the running sum repeats Z's sum term by term, so it reaches u * Z <= Z.
    const float target = gpu::u32_to_uniform_open0(word(bits, b & 3)) * st.z;
    int a = shape.choices - 1;
    float cum = 0.f;
    for (int k = 0; k < shape.choices; ++k) {
      cum += expf(l[k] - st.max);
      if (cum >= target) {
        a = k;
        break;
      }
    }
    discrete[b] = a;
    return categorical_logp(l, shape.choices, st, a);
  }
  const float2 n = (b & 2) ? gpu::normal2(bits.z, bits.w) : gpu::normal2(bits.x, bits.y);
  const float z = (b & 1) ? n.y : n.x;
  const float mean = h[b], ls = log_std[b];
  const float u = mean + expf(ls) * z;
  raw[b] = u;
  env_action[b] = bound_action(u, shape);
  return gaussian_logp(u, mean, ls, shape);
}

// d pg / d r of the clipped surrogate pg = max(-a r, -a clamp(r, 1 - eps, 1 + eps)) under
// torch's tie rules for max and clamp; *pg gets the surrogate.
__device__ __forceinline__ float surrogate_slope(float a, float r, float eps, float* pg) {
  const float lo = 1.f - eps, hi = 1.f + eps;
  const float pg1 = -a * r;
  const float pg2 = -a * fminf(fmaxf(r, lo), hi);
  const float inside = (r >= lo && r <= hi) ? 1.f : 0.f;
  *pg = pg1 >= pg2 ? pg1 : pg2;
  if (pg1 > pg2) return -a;
  if (pg1 < pg2) return -a * inside;
  return -a * 0.5f * (1.f + inside);
}

// The value loss term of one row, (v - R)^2 or its clipped max, into *loss; returns its
// derivative in v (same tie rules).
__device__ __forceinline__ float value_term(float v, float old_v, float ret, float clip_eps, bool clip, float* loss) {
  const float e1 = v - ret;
  const float l1 = e1 * e1, g1 = 2.f * e1;
  if (!clip) {
    *loss = l1;
    return g1;
  }
  const float dv = v - old_v;
  const float vc = old_v + fminf(fmaxf(dv, -clip_eps), clip_eps);
  const float e2 = vc - ret;
  const float l2 = e2 * e2;
  const float g2 = (dv >= -clip_eps && dv <= clip_eps) ? 2.f * e2 : 0.f;
  *loss = l1 >= l2 ? l1 : l2;
  return l1 > l2 ? g1 : l1 < l2 ? g2 : 0.5f * (g1 + g2);
}

}  // namespace foxhunt::rl::ppo::heads
