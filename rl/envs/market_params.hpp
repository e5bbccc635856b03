#pragma once
// The market's kernel parameters: everything a step needs from the configuration, precomputed on
// the host and passed to kernels by value (constant bank). Per-(regime, asset) entries are at
// [regime * kMaxAssets + asset]. Shared by market.cu and market_policies.cu.
#include <cstdint>

#include "rl/envs/market_config.hpp"

namespace foxhunt::rl {

struct MarketParams {
  int assets, regimes, window, episode_length, extra_features, obs_dim, num_levels;
  int process;      // PriceProcess
  int action;       // ActionMode
  int reward;       // RewardKind
  int correlated;   // 0: identity correlation (skip the Cholesky product)
  int jumps;        // 0: no jumps
  int price_level;  // 1: the observation ends with one level column per asset
  double dt, initial_cash, min_equity_cash;
  double fee_rate, half_spread, slippage, inv_liquidity, position_limit, leverage_cap, borrow_per_step;
  double sharpe_eta, drawdown_penalty, turnover_penalty, annualize;
  double reward_scale;
  double levels[kMaxLevels];
  // Log-price step: x' = mean + (x - mean) * decay + drift + noise * z (+ jumps). The price law
  // may use f32 coefficients (it only generates prices); everything the accounting reads is double.
  // GBM: mean 0, decay 1, drift (mu - sigma^2/2 - lambda k) dt, noise sigma sqrt(dt).
  // OU:  mean log(S0) + theta, decay e^{-kappa dt}, drift 0, noise sigma sqrt((1 - decay^2)/(2 kappa)).
  double mean[kMaxRegimes * kMaxAssets];
  double drift[kMaxRegimes * kMaxAssets];
  // sigma sqrt(dt): the slippage scale (replay: regime 0 = the history's). Double because it
  // enters the execution price and so the cash: the accounting path has no f32 in it.
  double step_vol[kMaxRegimes * kMaxAssets];
  float decay[kMaxRegimes * kMaxAssets];
  float noise[kMaxRegimes * kMaxAssets];
  float stationary_sd[kMaxRegimes * kMaxAssets];    // OU: sigma / sqrt(2 kappa); GBM: 0
  float chol[kMaxAssets * kMaxAssets];              // lower-triangular Cholesky factor, row-major
  float transition_cdf[kMaxRegimes * kMaxRegimes];  // row-wise cumulative, last entry of a row exactly 1
  float stationary_cdf[kMaxRegimes];
  float ret_scale[kMaxAssets];  // 1 / (sigma_ref sqrt(dt)) for the observation
  double log_initial_price[kMaxAssets];
  double jump_p0;         // e^{-lambda dt}: probability of no jump in a step
  double jump_lambda_dt;  // lambda dt
  float jump_mean, jump_stddev;
  const double* replay_log_price;  // (assets, replay_bars) device, process = replay
  std::int64_t replay_bars;
};
static_assert(sizeof(MarketParams) <= 4096, "kernel parameters must fit the 4 KB parameter space");

struct OhlcvData;

// The observation width of a market (market.hpp): window * assets + assets + 3 + extra_features
// (+ assets with observation.price_level). Needs no data, also for replay.
int market_obs_dim(const MarketConfig& config);

// Host-side computation of the parameters; `replay` (when the process is replay) provides the
// per-asset volatility of the history, `replay_device` the uploaded log prices.
MarketParams make_market_params(const MarketConfig& config, const OhlcvData* replay, const double* replay_device);

}  // namespace foxhunt::rl
