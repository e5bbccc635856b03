#include "rl/envs/market_params.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "rl/envs/ohlcv_csv.hpp"

namespace foxhunt::rl {

int market_obs_dim(const MarketConfig& c) {
  return c.window * c.assets + c.assets + 3 + c.extra_features + (c.price_level ? c.assets : 0);
}

MarketParams make_market_params(const MarketConfig& c, const OhlcvData* replay, const double* replay_device) {
  validate(c);
  MarketParams p;
  std::memset(&p, 0, sizeof p);
  const int A = c.assets;
  const int R = c.regimes;
  p.assets = A;
  p.regimes = R;
  p.window = c.window;
  p.episode_length = c.episode_length;
  p.extra_features = c.extra_features;
  p.price_level = c.price_level ? 1 : 0;
  p.obs_dim = market_obs_dim(c);
  p.process = static_cast<int>(c.process);
  p.action = static_cast<int>(c.action);
  p.reward = static_cast<int>(c.reward);
  p.dt = c.dt;
  p.initial_cash = c.initial_cash;
  p.min_equity_cash = c.min_equity * c.initial_cash;
  p.fee_rate = c.fee_bps * 1e-4;
  p.half_spread = c.half_spread_bps * 1e-4;
  p.slippage = c.slippage;
  p.inv_liquidity = 1.0 / c.liquidity;
  p.position_limit = c.position_limit;
  p.leverage_cap = c.leverage_cap;
  p.borrow_per_step = c.borrow_rate * c.dt;
  p.sharpe_eta = c.sharpe_eta;
  p.drawdown_penalty = c.drawdown_penalty;
  p.turnover_penalty = c.turnover_penalty;
  p.reward_scale = c.reward_scale;
  p.annualize = std::sqrt(1.0 / c.dt);
  p.num_levels = c.action == ActionMode::discrete ? static_cast<int>(c.levels.size()) : 0;
  for (int k = 0; k < p.num_levels; ++k) p.levels[k] = c.levels[k];

  if (c.process == PriceProcess::replay) {
    if (replay == nullptr || replay_device == nullptr)
      throw ConfigError("process.kind = \"replay\": MarketEnv needs the loaded OHLCV data (load_ohlcv(config))");
    if (replay->assets != A)
      throw ConfigError("replay: the data has " + std::to_string(replay->assets) + " assets, market.assets is " +
                        std::to_string(A));
    if (replay->bars < static_cast<std::int64_t>(c.window) + c.episode_length + 1)
      throw ConfigError("replay: " + std::to_string(replay->bars) +
                        " bars are too few for one episode (market.window + " +
                        "market.episode_length + 1 = " + std::to_string(c.window + c.episode_length + 1) + ")");
    p.regimes = 1;
    p.replay_log_price = replay_device;
    p.replay_bars = replay->bars;
    // Volatility of the log closes per asset: the slippage scale and the observation scale. The
    // data's own (load_ohlcv sets the train part's, so that no part is scaled by later bars).
    const std::vector<double> vol =
        replay->step_vol.empty() ? close_volatility(*replay, 0, replay->bars) : replay->step_vol;
    if (static_cast<int>(vol.size()) != A)
      throw ConfigError("replay: step_vol has " + std::to_string(vol.size()) + " values, market.assets is " +
                        std::to_string(A));
    for (int a = 0; a < A; ++a) {
      p.step_vol[a] = vol[a];
      p.ret_scale[a] = static_cast<float>(1.0 / vol[a]);
      p.log_initial_price[a] = std::log(replay->close[static_cast<std::size_t>(a) * replay->bars]);
      p.decay[a] = 1.0f;
    }
    p.transition_cdf[0] = 1.0f;
    p.stationary_cdf[0] = 1.0f;
    for (int a = 0; a < A; ++a) p.chol[a * kMaxAssets + a] = 1.0f;
    return p;
  }

  if (c.process == PriceProcess::generated) {
    // One regime; the returns come from the model (rl/envs/market_generator.hpp), normalized by
    // 1 / (sigma sqrt(dt)): step_vol is both the slippage scale and the returns' scale.
    p.regimes = 1;
    for (int a = 0; a < A; ++a) {
      p.log_initial_price[a] = std::log(c.initial_price[a]);
      p.step_vol[a] = c.sigma[a] * std::sqrt(c.dt);
      p.ret_scale[a] = static_cast<float>(1.0 / p.step_vol[a]);
      p.decay[a] = 1.0f;
      p.chol[a * kMaxAssets + a] = 1.0f;
    }
    p.transition_cdf[0] = 1.0f;
    p.stationary_cdf[0] = 1.0f;
    return p;
  }

  const double lambda = c.jump_intensity;
  p.jumps = lambda > 0 ? 1 : 0;
  p.jump_lambda_dt = lambda * c.dt;
  p.jump_p0 = std::exp(-p.jump_lambda_dt);
  p.jump_mean = static_cast<float>(c.jump_mean);
  p.jump_stddev = static_cast<float>(c.jump_stddev);
  // Merton compensator: E[e^J - 1], so that GBM keeps E[S_t] = S_0 e^{mu t} with jumps.
  const double jump_k = std::exp(c.jump_mean + 0.5 * c.jump_stddev * c.jump_stddev) - 1.0;

  const std::vector<double> pi = regime_stationary(c);
  for (int a = 0; a < A; ++a) {
    p.log_initial_price[a] = std::log(c.initial_price[a]);
    double var_ref = 0;  // stationary mix of the regimes' variances: the observation scale
    for (int r = 0; r < R; ++r) var_ref += pi[r] * c.sigma[r * A + a] * c.sigma[r * A + a];
    const double sig_ref = std::sqrt(var_ref);
    p.ret_scale[a] = static_cast<float>(sig_ref > 0 ? 1.0 / (sig_ref * std::sqrt(c.dt)) : 1.0);
  }
  for (int r = 0; r < R; ++r) {
    for (int a = 0; a < A; ++a) {
      const int k = r * kMaxAssets + a;
      const double sigma = c.sigma[r * A + a];
      p.step_vol[k] = sigma * std::sqrt(c.dt);
      if (c.process == PriceProcess::gbm) {
        p.mean[k] = 0.0;
        p.decay[k] = 1.0f;
        p.drift[k] = (c.mu[r * A + a] - 0.5 * sigma * sigma - lambda * jump_k) * c.dt;
        p.noise[k] = static_cast<float>(sigma * std::sqrt(c.dt));
        p.stationary_sd[k] = 0.0f;
      } else {
        const double kappa = c.kappa[r * A + a];
        const double decay = std::exp(-kappa * c.dt);
        p.mean[k] = p.log_initial_price[a] + c.theta[r * A + a];
        p.decay[k] = static_cast<float>(decay);
        p.drift[k] = 0.0;
        p.noise[k] = static_cast<float>(sigma * std::sqrt((1.0 - decay * decay) / (2.0 * kappa)));
        p.stationary_sd[k] = static_cast<float>(sigma / std::sqrt(2.0 * kappa));
      }
    }
    double cum = 0;
    for (int j = 0; j < R; ++j) {
      cum += c.transition[r * R + j];
      p.transition_cdf[r * kMaxRegimes + j] = j == R - 1 ? 1.0f : static_cast<float>(cum);
    }
  }
  double cum = 0;
  for (int r = 0; r < R; ++r) {
    cum += pi[r];
    p.stationary_cdf[r] = r == R - 1 ? 1.0f : static_cast<float>(cum);
  }
  const std::vector<double> l = correlation_cholesky(c);
  bool identity = true;
  for (int i = 0; i < A; ++i)
    for (int j = 0; j < A; ++j) {
      p.chol[i * kMaxAssets + j] = static_cast<float>(l[i * A + j]);
      if (l[i * A + j] != (i == j ? 1.0 : 0.0)) identity = false;
    }
  p.correlated = identity ? 0 : 1;
  return p;
}

}  // namespace foxhunt::rl
