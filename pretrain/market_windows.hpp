#pragma once
// Supervised samples of a simulated market, generated on the device: windows of normalized log
// returns with the labels only a simulator knows (the next returns, the next realized volatility,
// the hidden regime).
//
// Sample i of a batch is its own path of the configured price law (rl::MarketConfig: GBM or OU per
// regime, Merton jumps, the Cholesky-correlated Brownian part), stepped by the environment's own
// code (rl/envs/market_process.cuh, so the windows follow exactly the law the RL env trades):
//   regime_0 ~ the chain's stationary law; x_0 = OU: mean + stationary sd * z, GBM: log S0
//   burn_in steps, then window + L steps; step t's return y_t,a = (x_t+1,a - x_t,a) / (sigma_ref,a
//   sqrt(dt)), exactly the market observation's normalization (MarketParams::ret_scale), in f32
//   x            (B, window, assets)   y_0 .. y_window-1, oldest first, assets interleaved
//   next_returns (B, horizon, assets)  y_window .. y_window+horizon-1 (the same path continued)
//   realized_vol (B, assets)           sqrt(mean of y_t,a^2 over t = window .. window+vol_horizon-1)
//   regime       (B) int32             the regime in force at step window - 1, whose law generated
//                                      the window's last return (0 for one-regime markets)
// L = horizon and/or vol_horizon, as the labels asked for need; the draws of a step do not depend on
// which labels are generated, so x is the same with or without them.
//
// Burn-in: GBM (returns depend only on the regime, whose chain starts stationary) and one-regime OU
// without jumps (started from its exact stationary law) are stationary from the first step, so the
// automatic burn-in (spec.burn_in < 0) is 0 for them; other laws (OU with regimes or jumps) burn in
// 8 relaxation times, ceil(8 / min_r(kappa_r dt)) steps, at most kMaxAutoBurnIn.
//
// Randomness: Philox (seed, sample index, counter) with counter = (c << 20 | j) << 4 | block, where
// c = *counter (a device uint64 that generate() reads and does not change: the caller advances it,
// e.g. by a kernel in its CUDA graph), j = 0 for the initial draws (regime: block 12, OU start:
// blocks 0-3) and j = 1 + step for the steps (blocks as in market_process.cuh). So a batch is a pure
// function of (seed, c), sample i does not depend on the batch size, and c < 2^40 and
// 1 + burn_in + window + max(horizon, vol_horizon) < 2^20 keep every draw distinct. Validation uses
// another seed: disjoint data.
//
// One thread per sample, per-asset arrays in registers (loops to a compile-time bound of 1, 4, 8 or
// 16 assets, as the environment's kernels); no scratch, no host synchronization: capturable.
#include <cuda_runtime.h>

#include <cstdint>

#include "rl/envs/market_config.hpp"
#include "rl/envs/market_params.hpp"

namespace foxhunt::pretrain {

struct WindowSpec {
  std::int64_t window = 64, horizon = 1, vol_horizon = 20;
  std::int64_t burn_in = -1;  // steps simulated before the window; < 0: automatic (above)
};

// One batch of supervised samples, all device pointers, batch-major (layouts above). Any pointer may
// be null (not generated).
struct WindowBatch {
  float* x = nullptr;
  float* next_returns = nullptr;
  float* realized_vol = nullptr;
  std::int32_t* regime = nullptr;
};

inline constexpr std::int64_t kMaxAutoBurnIn = 4096;

class MarketWindows {
 public:
  // `market`: a simulated market (process gbm or ou; replay is CsvWindows' job). Throws
  // std::invalid_argument naming the argument or key.
  MarketWindows(const rl::MarketConfig& market, WindowSpec spec, std::int64_t max_batch);

  std::int64_t assets() const { return params_.assets; }
  std::int64_t regimes() const { return params_.regimes; }
  const WindowSpec& spec() const { return spec_; }
  std::int64_t burn_in() const { return burn_in_; }  // the resolved burn-in
  std::int64_t max_batch() const { return max_batch_; }
  const rl::MarketParams& params() const { return params_; }

  // Samples 0 .. batch-1 of (seed, *counter) into `out`; batch in [1, max_batch].
  void generate(const WindowBatch& out, std::int64_t batch, std::uint64_t seed, const std::uint64_t* counter,
                cudaStream_t stream) const;

 private:
  rl::MarketParams params_;
  WindowSpec spec_;
  std::int64_t burn_in_ = 0;
  std::int64_t max_batch_ = 0;
};

// The automatic burn-in of a market (rules above).
std::int64_t auto_burn_in(const rl::MarketConfig& market);

}  // namespace foxhunt::pretrain
