#pragma once
// The exact HMM forward filter of a regime-switching market with its true parameters, float64 on
// the device: the baseline a regime classifier's accuracy is read against.
//
// Model (the market's law, rl/envs/market.hpp, in the observation's units; pretrain/market_windows
// makes its windows): the regime s_t that generates step t's return follows the chain
// P(s_t+1 = j | s_t = i) = process.regimes.transition[i][j], s_0 ~ the chain's stationary law (the
// chain is stationary at the window start); given s_t = r the window's return vector y_t (assets) is
// Gaussian and independent of the past:
//   y_t ~ N(m_r, M_r M_r^T),  m_r,a = (mu_ra - sigma_ra^2 / 2) dt scale_a,
//   M_r = diag(sigma_r sqrt(dt) scale) Lc,  Lc = the Cholesky factor of process.correlation,
//   scale_a = MarketParams::ret_scale[a] (1 / (sigma_ref,a sqrt(dt)), the observation's f32 value).
// That is GBM with per-regime drift and volatility and no jumps; other laws are refused (the
// constructor throws std::invalid_argument naming the key). Every sigma_ra must be > 0.
//
// Filter: alpha_0(r) = pi_r p(y_0 | r); alpha_t(r) = sum_q alpha_t-1(q) P[q][r] p(y_t | r), normalized
// every step (likelihoods shifted by their maximum over r), posterior(r) = alpha_window-1(r): the
// regime at the window's last step (MarketWindows' `regime` label). Predicted regime = the argmax
// (the lowest index among ties). One thread per sample, everything in double; no scratch, no host
// synchronization (capturable).
#include <cuda_runtime.h>

#include <cstdint>

#include "gpu/buffer.hpp"
#include "rl/envs/market_config.hpp"

namespace foxhunt::pretrain {

class HmmFilter {
 public:
  // x windows are (B, window, assets) f32; window >= 1.
  explicit HmmFilter(const rl::MarketConfig& market, std::int64_t window);

  // Throws std::invalid_argument naming the key when `market` is not a law the filter is exact
  // for (what the constructor checks first; needs no device).
  static void check_supported(const rl::MarketConfig& market);

  std::int64_t regimes() const { return regimes_; }
  std::int64_t assets() const { return assets_; }
  std::int64_t window() const { return window_; }

  // out (B, regimes) double: the posterior of the regime at the last step of every window.
  void posterior(double* out, const float* x, std::int64_t batch, cudaStream_t stream) const;
  // *correct += the number of windows whose argmax posterior equals regime[i] (an integer sum: the
  // result does not depend on the order of the blocks).
  void accuracy(std::uint64_t* correct, const float* x, const std::int32_t* regime, std::int64_t batch,
                cudaStream_t stream) const;

 private:
  int regimes_ = 1, assets_ = 1;
  std::int64_t window_ = 0;
  gpu::DeviceBuffer<double> params_;  // the layout in hmm_filter.cu (HmmLayout)
};

}  // namespace foxhunt::pretrain
