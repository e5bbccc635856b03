#pragma once
// The synthetic price law of the market (rl/envs/market.hpp), one step of every asset and then the
// regime transition, as device functions shared by the environment (market.cu) and the supervised
// data streams that must follow exactly the same law (pretrain/market_windows.cu):
//   x'_a = mean_ra + (x_a - mean_ra) decay_ra + drift_ra + noise_ra (L eps)_a (+ jumps), r = regime
//   regime' ~ transition row r (one uniform, the row's cdf)
// with eps standard normals and the jump draws from Philox (seed, stream, base | block): blocks 0-3
// Brownian normals, 4-7 jump counts, 8-11 jump sizes, 12 the regime transition, so `base` must
// have its low 4 bits clear. The coefficients are MarketParams' (market_params.hpp).
//
// Internal linkage (an unnamed namespace): every kernel file that includes this compiles its own
// copy, inlined into its kernels.
#include <cuda_runtime.h>

#include <cstdint>

#include "gpu/philox.cuh"
#include "rl/envs/market_params.hpp"

namespace foxhunt::rl {
namespace {

__device__ __forceinline__ float lane(float4 v, int k) { return k == 0 ? v.x : (k == 1 ? v.y : (k == 2 ? v.z : v.w)); }

// Index of the first cdf entry >= u (u in (0, 1], the last entry is exactly 1).
__device__ __forceinline__ int sample_cdf(const float* cdf, int count, float u) {
  int k = 0;
  while (k < count - 1 && u > cdf[k]) ++k;
  return k;
}

// Poisson(lambda) by inversion for small lambda (validated lambda <= 1); u in [0, 1).
__device__ __forceinline__ int poisson_small(double u, double p0, double lambda) {
  int k = 0;
  double pk = p0, cdf = p0;
  while (u >= cdf && k < 32) {
    ++k;
    pk *= lambda / k;
    cdf += pk;
  }
  return k;
}

// One step of the synthetic price law for every asset, then the regime transition.
template <int MaxA>
__device__ void advance_prices(double (&x)[MaxA], int& regime, const MarketParams& p, std::uint64_t seed,
                               std::uint32_t env, std::uint64_t base) {
  const int A = p.assets;
  const int r = regime;
  float eps[MaxA];
#pragma unroll
  for (int a = 0; a < MaxA; ++a) eps[a] = 0.0f;
#pragma unroll
  for (int b = 0; b < (MaxA + 3) / 4; ++b) {
    if (4 * b < A) {
      const float4 z = gpu::normal4(seed, env, base | static_cast<std::uint64_t>(b));
#pragma unroll
      for (int k = 0; k < 4; ++k)
        if (4 * b + k < MaxA && 4 * b + k < A) eps[4 * b + k] = lane(z, k);
    }
  }
  double jump[MaxA];
#pragma unroll
  for (int a = 0; a < MaxA; ++a) jump[a] = 0.0;
  if (p.jumps) {
#pragma unroll
    for (int b = 0; b < (MaxA + 3) / 4; ++b) {
      if (4 * b < A) {
        const float4 u = gpu::uniform4(seed, env, base | static_cast<std::uint64_t>(4 + b));
        const float4 z = gpu::normal4(seed, env, base | static_cast<std::uint64_t>(8 + b));
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          const int a = 4 * b + k;
          if (a < MaxA && a < A) {
            const int count = poisson_small(1.0 - static_cast<double>(lane(u, k)), p.jump_p0, p.jump_lambda_dt);
            if (count > 0)
              jump[a] = count * static_cast<double>(p.jump_mean) +
                        sqrt(static_cast<double>(count)) * static_cast<double>(p.jump_stddev) * lane(z, k);
          }
        }
      }
    }
  }
#pragma unroll
  for (int a = 0; a < MaxA; ++a) {
    if (a < A) {
      float z = eps[a];
      if (p.correlated) {
        z = 0.0f;
#pragma unroll
        for (int b = 0; b <= a; ++b) z += p.chol[a * kMaxAssets + b] * eps[b];
      }
      const int k = r * kMaxAssets + a;
      const double m = p.mean[k];
      x[a] =
          m + (x[a] - m) * static_cast<double>(p.decay[k]) + p.drift[k] + static_cast<double>(p.noise[k]) * z + jump[a];
    }
  }
  if (p.regimes > 1) {
    const float u = gpu::uniform4(seed, env, base | 12u).x;
    regime = sample_cdf(p.transition_cdf + r * kMaxRegimes, p.regimes, u);
  }
}

}  // namespace
}  // namespace foxhunt::rl
