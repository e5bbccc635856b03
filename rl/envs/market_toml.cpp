// market_config_toml: a MarketConfig written back as a market file (the run directory's copy of
// its market, rl/envs/market_config.hpp). Numbers to 17 significant digits, so the file reads
// back to the same doubles; only the keys the options allow are written.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "rl/envs/market_config.hpp"
#include "rl/envs/ohlcv_csv.hpp"

namespace foxhunt::rl {
namespace {

std::string num(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  std::string s = buf;
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";  // a TOML float, not an integer
  return s;
}

std::string list(const std::vector<double>& v, std::size_t begin, std::size_t count) {
  std::string s = "[";
  for (std::size_t k = 0; k < count; ++k) s += (k ? ", " : "") + num(v[begin + k]);
  return s + "]";
}

// (rows, cols) row-major as a list of rows.
std::string rows(const std::vector<double>& v, std::size_t r, std::size_t c) {
  std::string s = "[";
  for (std::size_t i = 0; i < r; ++i) s += (i ? ", " : "") + list(v, i * c, c);
  return s + "]";
}

std::string quoted(const std::string& text) {
  std::string s = "\"";
  for (char ch : text) {
    if (ch == '"' || ch == '\\') s += '\\';
    s += ch;
  }
  return s + "\"";
}

std::string strings(const std::vector<std::string>& v) {
  std::string s = "[";
  for (std::size_t k = 0; k < v.size(); ++k) s += (k ? ", " : "") + quoted(v[k]);
  return s + "]";
}

std::string boundary(const SplitPoint& p) {
  if (p.bar >= 0)
    return std::to_string(p.bar) + (p.by_time ? "   # the first bar at or after " + format_timestamp(p.time) : "");
  return quoted(format_timestamp(p.time));  // a date not resolved against the data
}

}  // namespace

std::string market_config_toml(const MarketConfig& c) {
  const auto A = static_cast<std::size_t>(c.assets), R = static_cast<std::size_t>(c.regimes);
  std::string s;
  auto key = [&](const char* k, const std::string& v) { s += std::string(k) + " = " + v + "\n"; };
  s += "[market]\n";
  key("assets", std::to_string(c.assets));
  key("dt", num(c.dt));
  key("episode_length", std::to_string(c.episode_length));
  key("window", std::to_string(c.window));
  key("initial_cash", num(c.initial_cash));
  key("min_equity", num(c.min_equity));
  key("extra_features", std::to_string(c.extra_features));

  s += "\n[process]\n";
  key("kind", quoted(to_string(c.process)));
  if (c.process == PriceProcess::generated) {
    key("initial_price", list(c.initial_price, 0, A));
    key("sigma", list(c.sigma, 0, A));
    key("checkpoint", quoted(c.generator_checkpoint));
    if (!c.generator_sampler.empty()) key("sampler", quoted(c.generator_sampler));
    if (c.generator_sample_steps > 0) key("sample_steps", std::to_string(c.generator_sample_steps));
    if (c.generator_eta >= 0.0) key("eta", num(c.generator_eta));
  } else if (c.process != PriceProcess::replay) {
    key("initial_price", list(c.initial_price, 0, A));
    if (!c.correlation.empty()) key("correlation", rows(c.correlation, A, A));
    const bool gbm = c.process == PriceProcess::gbm;
    if (R == 1) {
      key("sigma", list(c.sigma, 0, A));
      if (gbm) key("mu", list(c.mu, 0, A));
      if (!gbm) key("kappa", list(c.kappa, 0, A));
      if (!gbm) key("theta", list(c.theta, 0, A));
    }
    s += "\n[process.jumps]\n";
    key("intensity", num(c.jump_intensity));
    key("mean", num(c.jump_mean));
    key("stddev", num(c.jump_stddev));
    if (R > 1) {
      s += "\n[process.regimes]\n";
      key("transition", rows(c.transition, R, R));
      key("sigma", rows(c.sigma, R, A));
      if (gbm) key("mu", rows(c.mu, R, A));
      if (!gbm) key("kappa", rows(c.kappa, R, A));
      if (!gbm) key("theta", rows(c.theta, R, A));
    }
  }

  s += "\n[execution]\n";
  key("fee_bps", num(c.fee_bps));
  key("half_spread_bps", num(c.half_spread_bps));
  key("slippage", num(c.slippage));
  key("liquidity", num(c.liquidity));
  key("position_limit", num(c.position_limit));
  key("leverage_cap", num(c.leverage_cap));
  key("borrow_rate", num(c.borrow_rate));

  s += "\n[action]\n";
  key("kind", quoted(to_string(c.action)));
  if (c.action == ActionMode::discrete) key("levels", list(c.levels, 0, c.levels.size()));

  s += "\n[reward]\n";
  key("kind", quoted(to_string(c.reward)));
  key("sharpe_eta", num(c.sharpe_eta));
  key("drawdown_penalty", num(c.drawdown_penalty));
  key("turnover_penalty", num(c.turnover_penalty));
  key("scale", num(c.reward_scale));

  s += "\n[observation]\n";
  key("price_level", c.price_level ? "true" : "false");

  if (c.process == PriceProcess::replay) {
    s += "\n[replay]\n";
    key("files", strings(c.files));
    key("layout", quoted(c.layout == CsvLayout::long_format ? "long" : "per_asset"));
    if (!c.symbols.empty()) key("symbols", strings(c.symbols));
    if (c.split.given) {
      s += "\n[split]\n";
      key("train_end", boundary(c.split.train_end));
      if (c.split.has_validation()) key("validation_end", boundary(c.split.validation_end));
    }
  }
  return s;
}

}  // namespace foxhunt::rl
