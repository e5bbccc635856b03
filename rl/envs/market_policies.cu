// Baseline policies: one thread per (environment, asset) reads the state it needs and writes one
// action.
#include "rl/envs/market_policies.hpp"

#include <cmath>
#include <string>

#include "gpu/check.hpp"
#include "gpu/launch.cuh"
#include "gpu/philox.cuh"

namespace foxhunt::rl {
namespace {

__device__ __forceinline__ float lane(float4 v, int k) { return k == 0 ? v.x : (k == 1 ? v.y : (k == 2 ? v.z : v.w)); }

__device__ __forceinline__ int nearest_level(const MarketParams& p, double target) {
  int best = 0;
  double best_err = fabs(p.levels[0] - target);
  for (int k = 1; k < p.num_levels; ++k) {
    const double err = fabs(p.levels[k] - target);
    if (err < best_err) {
      best_err = err;
      best = k;
    }
  }
  return best;
}

__global__ void policy_kernel(std::int32_t* discrete, float* continuous, MarketState st, MarketParams p, int policy,
                              std::uint64_t seed, std::uint64_t call, std::int64_t n) {
  const std::int64_t A = p.assets;
  const std::int64_t total = n * A;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  const bool disc = p.action == static_cast<int>(ActionMode::discrete);
  for (std::int64_t e = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += stride) {
    const std::int64_t i = e / A;
    const int a = static_cast<int>(e - i * A);
    double target = 0.0;  // fraction of the position limit, in [-1, 1]
    bool hold = false;
    int index = -1;  // discrete random draws pick an index directly
    switch (static_cast<BaselinePolicy>(policy)) {
      case BaselinePolicy::flat:
        break;
      case BaselinePolicy::buy_and_hold:
        hold = st.episode_step[i] != 0;
        target = 1.0;
        break;
      case BaselinePolicy::random: {
        const float u =
            lane(gpu::uniform4(seed, static_cast<std::uint32_t>(i), call * 4 + static_cast<std::uint64_t>(a / 4)),
                 a % 4);  // (0, 1]
        if (disc) {
          index = static_cast<int>(u * static_cast<float>(p.num_levels));
          if (index >= p.num_levels) index = p.num_levels - 1;
        } else {
          target = 2.0 * u - 1.0;
        }
        break;
      }
      case BaselinePolicy::ou_oracle: {
        const int k = st.regime[i] * kMaxAssets + a;
        const double dev = st.log_price[a * n + i] - p.mean[k];
        const double s = p.stationary_sd[k];
        target = -fmin(fmax(dev / s, -1.0), 1.0);
        break;
      }
      case BaselinePolicy::regime_oracle: {
        // GBM: drift = (mu - sigma^2 / 2) dt and step_vol = sigma sqrt(dt) (no jumps), so
        // mu / sigma^2 = drift / step_vol^2 + 1/2.
        const int k = st.regime[i] * kMaxAssets + a;
        const double v = p.step_vol[k] * p.step_vol[k];
        const double w = v > 0 ? p.drift[k] / v + 0.5 : (p.drift[k] > 0 ? 1e300 : (p.drift[k] < 0 ? -1e300 : 0.0));
        target = fmin(fmax(w / p.position_limit, -1.0), 1.0);
        break;
      }
    }
    if (disc) {
      discrete[e] = hold ? -1 : (index >= 0 ? index : nearest_level(p, target));
    } else {
      continuous[e] = hold ? __int_as_float(0x7fc00000) : static_cast<float>(target);  // NaN holds
    }
  }
}

}  // namespace

void market_policy_actions(std::int32_t* discrete, float* continuous, const MarketEnv& env, BaselinePolicy policy,
                           std::uint64_t seed, std::uint64_t call_index, cudaStream_t stream) {
  const MarketConfig& c = env.config();
  if (c.action == ActionMode::discrete)
    FH_EXPECT(discrete != nullptr && continuous == nullptr,
              "market_policy_actions: the market takes discrete actions: give `discrete` (N, assets) int32");
  else
    FH_EXPECT(continuous != nullptr && discrete == nullptr,
              "market_policy_actions: the market takes continuous actions: give `continuous` (N, assets) f32");
  FH_EXPECT(policy != BaselinePolicy::ou_oracle || c.process == PriceProcess::ou,
            "market_policy_actions: ou_oracle needs process.kind = \"ou\" (got \"" + std::string(to_string(c.process)) +
                "\")");
  FH_EXPECT(policy != BaselinePolicy::regime_oracle || (c.process == PriceProcess::gbm && c.jump_intensity == 0.0),
            "market_policy_actions: regime_oracle needs process.kind = \"gbm\" without jumps (got \"" +
                std::string(to_string(c.process)) + "\", jumps.intensity = " + std::to_string(c.jump_intensity) + ")");
  const std::int64_t total = env.num_envs() * c.assets;
  policy_kernel<<<gpu::grid_stride_blocks(total), gpu::kBlock, 0, stream>>>(
      discrete, continuous, env.state(), env.params(), static_cast<int>(policy), seed, call_index, env.num_envs());
  FH_CHECK_LAUNCH();
}

}  // namespace foxhunt::rl
