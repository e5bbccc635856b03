// The simulated market's supervised windows: one thread per sample steps its own path with the
// environment's price law (rl/envs/market_process.cuh) and writes the window and the labels.
#include "pretrain/market_windows.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "gpu/check.hpp"
#include "gpu/launch.cuh"
#include "gpu/philox.cuh"
#include "rl/envs/market_process.cuh"

namespace foxhunt::pretrain {
namespace {

constexpr int kSampleBlock = 128;
constexpr int kStepBits = 20;  // j < 2^20 steps per sample; the batch counter takes the bits above

// What a launch needs besides the market's parameters (which travel by value, as in market.cu).
struct WindowsLaunch {
  WindowBatch out;
  const std::uint64_t* counter;
  std::uint64_t seed;
  std::int64_t batch;
  int window, horizon, vol_horizon, burn_in;
  int steps;  // window + the label steps this call needs
};

__device__ __forceinline__ std::uint64_t draw_base(std::uint64_t c, int j) {
  return ((c << kStepBits) | static_cast<std::uint64_t>(j)) << 4;
}

template <int MaxA>
__global__ void __launch_bounds__(kSampleBlock) market_windows_kernel(rl::MarketParams p, WindowsLaunch L) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= L.batch) return;
  const int A = p.assets, W = L.window;
  const std::uint32_t sample = static_cast<std::uint32_t>(i);
  const std::uint64_t c = *L.counter;

  // Initial draws (j = 0): the regime from the stationary law, the OU start from its stationary law.
  const float u = gpu::uniform4(L.seed, sample, draw_base(c, 0) | 12u).x;
  int regime = rl::sample_cdf(p.stationary_cdf, p.regimes, u);
  const bool ou = p.process == static_cast<int>(rl::PriceProcess::ou);
  double x[MaxA];
#pragma unroll
  for (int a = 0; a < MaxA; ++a) x[a] = 0.0;
#pragma unroll
  for (int b = 0; b < (MaxA + 3) / 4; ++b) {
    if (4 * b < A) {
      const float4 z = gpu::normal4(L.seed, sample, draw_base(c, 0) | static_cast<std::uint64_t>(b));
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const int a = 4 * b + k;
        if (a < MaxA && a < A) {
          const int idx = regime * rl::kMaxAssets + a;
          x[a] = ou ? p.mean[idx] + static_cast<double>(p.stationary_sd[idx]) * rl::lane(z, k) : p.log_initial_price[a];
        }
      }
    }
  }
  int j = 1;
  for (int s = 0; s < L.burn_in; ++s, ++j) rl::advance_prices<MaxA>(x, regime, p, L.seed, sample, draw_base(c, j));

  double sq[MaxA];
#pragma unroll
  for (int a = 0; a < MaxA; ++a) sq[a] = 0.0;
  for (int t = 0; t < L.steps; ++t, ++j) {
    double prev[MaxA];
#pragma unroll
    for (int a = 0; a < MaxA; ++a) prev[a] = x[a];
    const int in_force = regime;  // the regime whose law generates this step's return
    rl::advance_prices<MaxA>(x, regime, p, L.seed, sample, draw_base(c, j));
    if (t == W - 1 && L.out.regime != nullptr) L.out.regime[i] = in_force;
    const int h = t - W;  // label step, < 0 inside the window
#pragma unroll
    for (int a = 0; a < MaxA; ++a) {
      if (a < A) {
        const float y = static_cast<float>((x[a] - prev[a]) * p.ret_scale[a]);  // the observation's value
        if (h < 0) {
          if (L.out.x != nullptr) L.out.x[(i * W + t) * A + a] = y;
        } else {
          if (L.out.next_returns != nullptr && h < L.horizon) L.out.next_returns[(i * L.horizon + h) * A + a] = y;
          if (h < L.vol_horizon) sq[a] += static_cast<double>(y) * static_cast<double>(y);
        }
      }
    }
  }
  if (L.out.realized_vol != nullptr) {
#pragma unroll
    for (int a = 0; a < MaxA; ++a)
      if (a < A) L.out.realized_vol[i * A + a] = static_cast<float>(sqrt(sq[a] / L.vol_horizon));
  }
}

template <int MaxA>
void launch(const rl::MarketParams& p, const WindowsLaunch& l, cudaStream_t stream) {
  market_windows_kernel<MaxA><<<gpu::ceil_div(l.batch, kSampleBlock), kSampleBlock, 0, stream>>>(p, l);
  FH_CHECK_LAUNCH();
}

}  // namespace

std::int64_t auto_burn_in(const rl::MarketConfig& m) {
  if (m.process != rl::PriceProcess::ou) return 0;
  if (m.regimes == 1 && m.jump_intensity == 0.0) return 0;
  const double kappa = *std::min_element(m.kappa.begin(), m.kappa.end());
  const double steps = std::ceil(8.0 / (kappa * m.dt));
  return steps >= static_cast<double>(kMaxAutoBurnIn) ? kMaxAutoBurnIn : static_cast<std::int64_t>(steps);
}

MarketWindows::MarketWindows(const rl::MarketConfig& market, WindowSpec spec, std::int64_t max_batch)
    : spec_(spec), max_batch_(max_batch) {
  if (market.process == rl::PriceProcess::replay)
    throw std::invalid_argument(
        "MarketWindows: process.kind = \"replay\" is historical data, not a simulator: use CsvWindows");
  if (market.process == rl::PriceProcess::generated)
    throw std::invalid_argument("MarketWindows: process.kind = \"generated\" is not a simulator of its own");
  FH_EXPECT(spec.window >= 1, "MarketWindows: spec.window must be >= 1");
  FH_EXPECT(spec.horizon >= 1, "MarketWindows: spec.horizon must be >= 1");
  FH_EXPECT(spec.vol_horizon >= 1, "MarketWindows: spec.vol_horizon must be >= 1");
  FH_EXPECT(max_batch >= 1 && max_batch <= (std::int64_t{1} << 31), "MarketWindows: max_batch must be in [1, 2^31]");
  rl::validate(market);
  params_ = rl::make_market_params(market, nullptr, nullptr);
  burn_in_ = spec.burn_in >= 0 ? spec.burn_in : auto_burn_in(market);
  const std::int64_t draws = 1 + burn_in_ + spec.window + std::max(spec.horizon, spec.vol_horizon);
  FH_EXPECT(draws < (std::int64_t{1} << kStepBits),
            "MarketWindows: 1 + burn_in + window + max(horizon, vol_horizon) must be < 2^20 steps (got " +
                std::to_string(draws) + ")");
}

void MarketWindows::generate(const WindowBatch& out, std::int64_t batch, std::uint64_t seed,
                             const std::uint64_t* counter, cudaStream_t stream) const {
  FH_EXPECT(batch >= 1 && batch <= max_batch_, "MarketWindows::generate: batch must be in [1, max_batch]");
  FH_EXPECT(counter != nullptr, "MarketWindows::generate: counter must be a device uint64");
  std::int64_t label_steps = 0;
  if (out.next_returns != nullptr) label_steps = spec_.horizon;
  if (out.realized_vol != nullptr) label_steps = std::max(label_steps, spec_.vol_horizon);
  const WindowsLaunch l{out,
                        counter,
                        seed,
                        batch,
                        static_cast<int>(spec_.window),
                        static_cast<int>(spec_.horizon),
                        static_cast<int>(spec_.vol_horizon),
                        static_cast<int>(burn_in_),
                        static_cast<int>(spec_.window + label_steps)};
  if (params_.assets <= 1)
    launch<1>(params_, l, stream);
  else if (params_.assets <= 4)
    launch<4>(params_, l, stream);
  else if (params_.assets <= 8)
    launch<8>(params_, l, stream);
  else
    launch<16>(params_, l, stream);
}

}  // namespace foxhunt::pretrain
