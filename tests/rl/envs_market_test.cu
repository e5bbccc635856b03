// The market environment: accounting against a float64 CPU reference of the same step (every
// step, every environment, from the GPU's previous state and the GPU's new prices), exact fees /
// spread / borrow on a frozen price, the price laws by their statistics (GBM moments and
// correlation, OU stationary law and autocorrelation, regime occupancy and per-regime volatility,
// Merton jump frequency and compensator), reproducibility, observation layout, the shipped
// benchmark market (configs/markets/bench_ou.toml), and the baseline policies on the OU market.
// Statistical bounds are ~5 standard errors with fixed seeds.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "gpu/exit.hpp"
#include "rl/envs/market.hpp"
#include "rl/envs/market_policies.hpp"
#include "tests/rl/envs_stationary.hpp"
#include "tests/support/gpu_test.hpp"
#include "tests/support/paths.hpp"

namespace foxhunt::rl {
namespace {

class MarketTest : public test::GpuTest {};

// Everything of the state the reference needs, downloaded.
struct Snapshot {
  std::vector<double> x, q, cb, cash, peak, dsr_a, dsr_b;
  std::vector<std::int32_t> regime, step;
};
Snapshot snapshot(const MarketEnv& env, cudaStream_t s) {
  const MarketState& st = env.state();
  const std::size_t n = static_cast<std::size_t>(env.num_envs());
  const std::size_t an = n * env.config().assets;
  return Snapshot{
      test::download(st.log_price, an, s), test::download(st.holdings, an, s),   test::download(st.cost_basis, an, s),
      test::download(st.cash, n, s),       test::download(st.peak_equity, n, s), test::download(st.dsr_a, n, s),
      test::download(st.dsr_b, n, s),      test::download(st.regime, n, s),      test::download(st.episode_step, n, s)};
}

struct StepBuffers {
  StepBuffers(std::int64_t n, std::int64_t d, std::int64_t steps = 1)
      : obs(n * d * steps), final_obs(n * d * steps), reward(n * steps), te(n * steps), tr(n * steps) {}
  StepOutputs view() {
    return StepOutputs{obs.data(), reward.data(), te.data(), tr.data(), final_obs.data(), gpu::DType::f32};
  }
  gpu::DeviceBuffer<float> obs, final_obs, reward;
  gpu::DeviceBuffer<std::uint8_t> te, tr;
};

MarketConfig accounting_config(ActionMode mode, RewardKind reward) {
  MarketConfig c;
  c.assets = 3;
  c.dt = 1.0 / 252;
  c.episode_length = 60;
  c.window = 8;
  c.initial_cash = 1e6;
  c.min_equity = 0.1;
  c.process = PriceProcess::gbm;
  c.initial_price = {100.0, 20.0, 250.0};
  c.regimes = 2;
  c.mu = {0.05, -0.1, 0.2, -0.3, 0.0, 0.1};
  c.sigma = {0.3, 0.5, 0.2, 0.6, 0.8, 0.4};
  c.transition = {0.9, 0.1, 0.2, 0.8};
  c.correlation = {1.0, 0.3, -0.2, 0.3, 1.0, 0.1, -0.2, 0.1, 1.0};
  c.fee_bps = 5;
  c.half_spread_bps = 2;
  c.slippage = 0.2;
  c.liquidity = 1e7;  // impact ~10 bps on a typical trade: visible, yet random trading stays solvent
  c.position_limit = 0.6;
  c.leverage_cap = 1.2;  // 3 x 0.6 > 1.2: the cap binds often
  c.borrow_rate = 0.05;
  c.action = mode;
  c.levels = {-1.0, -0.5, 0.0, 0.5, 1.0};
  c.reward = reward;
  c.drawdown_penalty = 0.1;
  c.turnover_penalty = 0.01;
  validate(c);
  return c;
}

// The reference step: one environment's book from the previous state, its action and the new
// log prices, exactly as market.hpp specifies it.
struct RefOut {
  std::vector<double> q, cb;
  double cash = 0, equity = 0, equity_new = 0, reward = 0, gross_held = 0;
  std::vector<bool> hold;
};
RefOut ref_step(const MarketConfig& c, const Snapshot& s, std::size_t i, std::size_t n, const std::int32_t* dact,
                const float* cact, const std::vector<double>& x_new) {
  const int A = c.assets;
  RefOut o;
  o.q.resize(A);
  o.cb.resize(A);
  o.hold.resize(A);
  std::vector<double> S(A), w(A);
  double cash = s.cash[i];
  double equity = cash;
  for (int a = 0; a < A; ++a) {
    S[a] = std::exp(s.x[a * n + i]);
    o.q[a] = s.q[a * n + i];
    o.cb[a] = s.cb[a * n + i];
    equity += o.q[a] * S[a];
  }
  double gross_free = 0;
  for (int a = 0; a < A; ++a) {
    if (c.action == ActionMode::discrete) {
      const int idx = dact[a];
      o.hold[a] = idx == -1;
      const int k = std::clamp(idx, 0, static_cast<int>(c.levels.size()) - 1);
      w[a] = c.levels[k] * c.position_limit;
    } else {
      o.hold[a] = std::isnan(cact[a]);
      w[a] = o.hold[a] ? 0.0 : std::clamp(static_cast<double>(cact[a]), -1.0, 1.0) * c.position_limit;
    }
    if (o.hold[a])
      o.gross_held += std::abs(o.q[a] * S[a]) / equity;
    else
      gross_free += std::abs(w[a]);
  }
  if (o.gross_held + gross_free > c.leverage_cap && gross_free > 0)
    for (int a = 0; a < A; ++a) w[a] *= std::max(c.leverage_cap - o.gross_held, 0.0) / gross_free;
  double turnover = 0;
  for (int a = 0; a < A; ++a) {
    if (o.hold[a]) continue;
    const double target = w[a] * equity / S[a];
    const double dq = target - o.q[a];
    if (dq == 0) continue;
    const double notional = std::abs(dq) * S[a];
    const double vol = c.sigma[s.regime[i] * A + a] * std::sqrt(c.dt);
    const double slip = c.slippage * vol * std::sqrt(notional / c.liquidity);
    const double px = S[a] * (1 + (dq > 0 ? 1 : -1) * (c.half_spread_bps * 1e-4 + slip));
    cash -= dq * px + c.fee_bps * 1e-4 * notional;
    if (o.q[a] == 0 || (o.q[a] > 0) == (dq > 0))
      o.cb[a] = (o.q[a] * o.cb[a] + dq * px) / target;
    else if (target == 0)
      o.cb[a] = 0;
    else if ((target > 0) != (o.q[a] > 0))
      o.cb[a] = px;
    turnover += notional / equity;
    o.q[a] = target;
  }
  double shorts = 0;
  for (int a = 0; a < A; ++a)
    if (o.q[a] < 0) shorts -= o.q[a] * S[a];
  cash -= c.borrow_rate * c.dt * shorts;
  double equity_new = cash;
  for (int a = 0; a < A; ++a) equity_new += o.q[a] * std::exp(x_new[a * n + i]);
  const double ret = equity_new / equity - 1;
  double reward = 0;
  switch (c.reward) {
    case RewardKind::pnl:
      reward = (equity_new - equity) / c.initial_cash;
      break;
    case RewardKind::log_return:
      reward = std::log(equity_new / equity);
      break;
    case RewardKind::differential_sharpe: {
      const double a0 = s.dsr_a[i], b0 = s.dsr_b[i], var = b0 - a0 * a0;
      reward = var > 1e-12 ? (b0 * (ret - a0) - 0.5 * a0 * (ret * ret - b0)) / std::pow(var, 1.5) : 0.0;
      break;
    }
  }
  const double peak = std::max(s.peak[i], equity_new);
  reward -= c.drawdown_penalty * (1 - equity_new / peak) + c.turnover_penalty * turnover;
  o.cash = cash;
  o.equity = equity;
  o.equity_new = equity_new;
  o.reward = reward;
  return o;
}

void run_accounting(cudaStream_t stream, std::mt19937_64& rng, std::uint64_t seed, ActionMode mode, RewardKind reward) {
  const MarketConfig c = accounting_config(mode, reward);
  const std::int64_t n = 67, steps = 150;  // crosses two episode ends
  const int A = c.assets;
  MarketEnv env(c, n);
  const std::int64_t d = env.obs_dim();
  StepBuffers b(n, d);
  gpu::DeviceBuffer<std::int32_t> dact(n * A);
  gpu::DeviceBuffer<float> cact(n * A);
  env.reset(b.obs.data(), gpu::DType::f32, seed, stream);
  std::uniform_int_distribution<int> level(-3, 6);  // includes -1 (hold) and out-of-range values
  std::uniform_real_distribution<float> value(-1.5f, 1.5f);
  std::bernoulli_distribution nan_hold(0.1);
  std::vector<std::int32_t> ha(n * A);
  std::vector<float> hc(n * A);
  std::vector<int> len(n, 0);
  long checked = 0, trades = 0, holds = 0, capped = 0, resets = 0;
  Snapshot prev = snapshot(env, stream);
  for (std::int64_t step = 0; step < steps; ++step) {
    for (auto& v : ha) v = level(rng);
    for (auto& v : hc) v = nan_hold(rng) ? std::numeric_limits<float>::quiet_NaN() : value(rng);
    dact.upload(std::span<const std::int32_t>(ha), stream);
    cact.upload(std::span<const float>(hc), stream);
    test::poison(b.reward, stream);
    test::poison(b.obs, stream);
    ActionInput in{mode == ActionMode::discrete ? dact.data() : nullptr,
                   mode == ActionMode::continuous ? cact.data() : nullptr};
    env.step(b.view(), in, 1, stream);
    const Snapshot now = snapshot(env, stream);
    const auto r = test::download(b.reward, stream);
    const auto te = test::download(b.te, stream);
    const auto tr = test::download(b.tr, stream);
    const auto obs = test::download(b.obs, stream);
    for (std::int64_t i = 0; i < n; ++i) {
      std::ostringstream where;
      where << "step " << step << " env " << i << ": ";
      SCOPED_TRACE(where.str());
      ++len[i];
      ASSERT_EQ(tr[i], len[i] >= c.episode_length ? 1 : 0);
      if (te[i] || tr[i]) {
        // Reset in the same step: a flat book with the initial cash.
        ++resets;
        len[i] = 0;
        ASSERT_EQ(now.cash[i], c.initial_cash);
        ASSERT_EQ(now.step[i], 0);
        for (int a = 0; a < A; ++a) ASSERT_EQ(now.q[a * n + i], 0.0);
        continue;
      }
      const RefOut o =
          ref_step(c, prev, static_cast<std::size_t>(i), static_cast<std::size_t>(n), &ha[i * A], &hc[i * A], now.x);
      const double tol = 1e-9 * c.initial_cash;  // a thousandth of a cent on a million
      ASSERT_NEAR(now.cash[i], o.cash, tol) << "cash";
      double gross = 0;
      for (int a = 0; a < A; ++a) {
        const double S = std::exp(prev.x[a * n + i]);
        ASSERT_NEAR(now.q[a * n + i] * S, o.q[a] * S, tol) << "holdings of asset " << a;
        ASSERT_NEAR(now.cb[a * n + i], o.cb[a], 1e-9 * S) << "cost basis of asset " << a;
        const bool held = o.hold[a];
        holds += held;
        trades += !held && now.q[a * n + i] != prev.q[a * n + i];
        if (held)
          ASSERT_EQ(now.q[a * n + i], prev.q[a * n + i]) << "held asset traded";
        else
          ASSERT_LE(std::abs(now.q[a * n + i] * S), c.position_limit * o.equity * (1 + 1e-12)) << "position limit";
        gross += std::abs(now.q[a * n + i] * S) / o.equity;
      }
      ASSERT_LE(gross, std::max(c.leverage_cap, o.gross_held) + 1e-12) << "leverage cap";
      capped += gross > c.leverage_cap - 1e-9;
      // The reward is computed in double from the double book and rounded once to f32 (the
      // output's type, <= 2^-24 |reward|); device and host exp/FMA differ in the last ulp and the
      // differential Sharpe amplifies that, so allow 1e-6 relative (~8 f32 ulps) + 1e-9 absolute.
      ASSERT_NEAR(r[i], o.reward, 1e-6 * std::abs(o.reward) + 1e-9) << "reward";
      // The equity identity as the observation reports it: log(E' / E0) and the weights.
      const float* row = &obs[i * d];
      ASSERT_NEAR(row[c.window * A + A + 2], std::log(o.equity_new / c.initial_cash), 1e-6) << "log equity";
      double upnl = 0;
      for (int a = 0; a < A; ++a) {
        const double s_new = std::exp(now.x[a * n + i]);
        ASSERT_NEAR(row[c.window * A + a], o.q[a] * s_new / o.equity_new, 1e-6) << "weight " << a;
        upnl += o.q[a] * (s_new - o.cb[a]);
      }
      ASSERT_NEAR(row[c.window * A + A], upnl / o.equity_new, 1e-6) << "unrealized PnL";
      ++checked;
    }
    prev = now;
  }
  EXPECT_GT(checked, n * steps * 9 / 10);
  EXPECT_GT(trades, checked);       // most steps trade something
  EXPECT_GT(holds, checked / 20);   // holds were exercised
  EXPECT_GT(capped, checked / 20);  // the leverage cap bound
  EXPECT_EQ(resets, 2 * n);
}

TEST_F(MarketTest, AccountingMatchesReferenceDiscretePnl) {
  SCOPED_TRACE(seed_note());
  run_accounting(stream(), rng(), seed_, ActionMode::discrete, RewardKind::pnl);
}
TEST_F(MarketTest, AccountingMatchesReferenceContinuousLogReturn) {
  SCOPED_TRACE(seed_note());
  run_accounting(stream(), rng(), seed_, ActionMode::continuous, RewardKind::log_return);
}
TEST_F(MarketTest, AccountingMatchesReferenceDifferentialSharpe) {
  SCOPED_TRACE(seed_note());
  run_accounting(stream(), rng(), seed_, ActionMode::discrete, RewardKind::differential_sharpe);
}

// A frozen price (sigma 0, mu 0): every cost is visible exactly in the cash.
TEST_F(MarketTest, FeesSpreadAndBorrowAreExact) {
  MarketConfig c;
  c.assets = 2;
  c.initial_price = {100.0, 40.0};
  c.mu = {0.0, 0.0};
  c.sigma = {0.0, 0.0};
  c.transition = {1.0};
  c.fee_bps = 10;
  c.half_spread_bps = 5;
  c.slippage = 0;
  c.borrow_rate = 0.1;
  c.position_limit = 1.0;
  c.leverage_cap = 2.0;
  c.action = ActionMode::continuous;
  validate(c);
  MarketEnv env(c, 1);
  StepBuffers b(1, env.obs_dim());
  env.reset(b.obs.data(), gpu::DType::f32, 3, stream());
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Snapshot s = snapshot(env, stream());
  const double s0 = std::exp(s.x[0]), s1 = std::exp(s.x[1]);  // log(100), log(40) round-tripped
  ASSERT_NEAR(s0, 100.0, 1e-9);
  // Step 1: short half the equity in asset 0, long 0.3 in asset 1. Step 2: hold both.
  auto act = test::upload(std::vector<float>{-0.5f, 0.3f}, stream());
  env.step(b.view(), ActionInput{nullptr, act.data()}, 1, stream());
  const double dt = c.dt, e0 = c.initial_cash;
  // Actions are f32 by interface: the environment takes the f32 value exactly (0.3f is
  // 0.300000011920928955...), so the reference must too; the decimal 0.3 would be 3e-4 units
  // (1.2 cents) away from what was asked for.
  const double w0 = static_cast<double>(-0.5f), w1 = static_cast<double>(0.3f);
  const double q0 = w0 * e0 / s0, q1 = w1 * e0 / s1;
  double cash = e0;
  cash -= q0 * s0 * (1 - 5e-4) + 1e-3 * std::abs(q0) * s0;  // sell at the bid, pay the fee
  cash -= q1 * s1 * (1 + 5e-4) + 1e-3 * q1 * s1;            // buy at the ask, pay the fee
  cash -= 0.1 * dt * (-q0 * s0);                            // only the short pays borrow
  s = snapshot(env, stream());
  EXPECT_EQ(s.x[0], std::log(100.0)) << "a frozen price must not move";
  EXPECT_NEAR(s.cash[0], cash, 1e-9 * e0);
  EXPECT_NEAR(s.q[0], q0, 1e-9 * std::abs(q0));
  EXPECT_NEAR(s.q[1], q1, 1e-9 * q1);
  const float pnl1 = test::download(b.reward, stream())[0];
  EXPECT_NEAR(pnl1, (cash + q0 * s0 + q1 * s1 - e0) / e0, 1e-9);
  EXPECT_LT(pnl1, 0.0f);  // costs only
  auto hold = test::upload(std::vector<float>{nan, nan}, stream());
  env.step(b.view(), ActionInput{nullptr, hold.data()}, 1, stream());
  s = snapshot(env, stream());
  cash -= 0.1 * dt * (-q0 * s0);
  EXPECT_NEAR(s.cash[0], cash, 1e-9 * e0);
  EXPECT_NEAR(test::download(b.reward, stream())[0], -0.1 * dt * (-q0 * s0) / e0, 1e-10);
  // Two trades in step 1, none while holding.
  EXPECT_EQ(test::download(env.state().trades, 1, stream())[0], 2);
}

// Runs `steps` flat steps of `n` environments and returns the log prices after each step
// (steps + 1 snapshots including the start) and the regimes before each step.
struct Path {
  std::vector<std::vector<double>> x;
  std::vector<std::vector<std::int32_t>> regime;
};
Path flat_path(const MarketConfig& c, std::int64_t n, int steps, std::uint64_t seed, cudaStream_t stream) {
  MarketEnv env(c, n);
  StepBuffers b(n, env.obs_dim());
  env.reset(b.obs.data(), gpu::DType::f32, seed, stream);
  gpu::DeviceBuffer<std::int32_t> act(n * c.assets);
  Path p;
  p.x.push_back(test::download(env.state().log_price, n * c.assets, stream));
  p.regime.push_back(test::download(env.state().regime, n, stream));
  for (int t = 0; t < steps; ++t) {
    market_policy_actions(act.data(), nullptr, env, BaselinePolicy::flat, 0, t, stream);
    env.step(b.view(), ActionInput{act.data(), nullptr}, 1, stream);
    p.x.push_back(test::download(env.state().log_price, n * c.assets, stream));
    p.regime.push_back(test::download(env.state().regime, n, stream));
  }
  return p;
}

MarketConfig gbm_config(int assets) {
  MarketConfig c;
  c.assets = assets;
  c.episode_length = 10000;
  c.window = 4;
  c.initial_price.assign(assets, 100.0);
  c.mu.assign(assets, 0.0);
  c.sigma.assign(assets, 0.2);
  c.transition = {1.0};
  return c;
}

TEST_F(MarketTest, GbmLogReturnsHaveTheConfiguredMomentsAndCorrelation) {
  SCOPED_TRACE(seed_note());
  MarketConfig c = gbm_config(2);
  c.mu = {0.1, -0.05};
  c.sigma = {0.2, 0.4};
  c.correlation = {1.0, 0.6, 0.6, 1.0};
  validate(c);
  const std::int64_t n = 16384;
  const int steps = 50;
  const Path p = flat_path(c, n, steps, seed_, stream());
  double s[2] = {}, s2[2] = {}, s01 = 0;
  for (int t = 0; t < steps; ++t)
    for (std::int64_t i = 0; i < n; ++i) {
      double r[2];
      for (int a = 0; a < 2; ++a) {
        r[a] = p.x[t + 1][a * n + i] - p.x[t][a * n + i];
        s[a] += r[a];
        s2[a] += r[a] * r[a];
      }
      s01 += r[0] * r[1];
    }
  const double m = static_cast<double>(n) * steps;
  double mean[2], var[2];
  for (int a = 0; a < 2; ++a) {
    mean[a] = s[a] / m;
    var[a] = s2[a] / m - mean[a] * mean[a];
    const double want_var = c.sigma[a] * c.sigma[a] * c.dt;
    const double want_mean = (c.mu[a] - 0.5 * c.sigma[a] * c.sigma[a]) * c.dt;
    EXPECT_NEAR(mean[a], want_mean, 5 * std::sqrt(want_var / m)) << "asset " << a;
    EXPECT_NEAR(var[a], want_var, 5 * want_var * std::sqrt(2 / m)) << "asset " << a;
  }
  const double corr = (s01 / m - mean[0] * mean[1]) / std::sqrt(var[0] * var[1]);
  EXPECT_NEAR(corr, 0.6, 5 * (1 - 0.36) / std::sqrt(m));
}

TEST_F(MarketTest, OuLogPriceIsStationaryWithTheRightAutocorrelation) {
  SCOPED_TRACE(seed_note());
  MarketConfig c = gbm_config(1);
  c.process = PriceProcess::ou;
  c.mu.clear();
  c.initial_price = {50.0};
  c.kappa = {5.0};
  c.theta = {0.1};
  c.sigma = {0.3};
  validate(c);
  const std::int64_t n = 65536;
  const int lag = 10, t0 = 20;
  const Path p = flat_path(c, n, t0 + lag, seed_, stream());
  test::expect_stationary_pair(p.x[t0], p.x[t0 + lag], std::log(50.0) + 0.1, 0.09 / 10.0, std::exp(-5.0 * c.dt * lag));
}

TEST_F(MarketTest, RegimesOccupyTheStationaryLawAndSwitchVolatility) {
  SCOPED_TRACE(seed_note());
  MarketConfig c = gbm_config(1);
  c.regimes = 3;
  c.transition = {0.9, 0.08, 0.02, 0.1, 0.85, 0.05, 0.2, 0.2, 0.6};
  c.mu = {0.0, 0.0, 0.0};
  c.sigma = {0.1, 0.3, 0.6};
  validate(c);
  const std::vector<double> pi = regime_stationary(c);
  const std::int64_t n = 65536;
  const int steps = 30;
  const Path p = flat_path(c, n, steps, seed_, stream());
  for (int t : {0, steps}) {
    std::vector<double> count(3, 0);
    for (std::int64_t i = 0; i < n; ++i) count[p.regime[t][i]] += 1;
    for (int r = 0; r < 3; ++r)
      EXPECT_NEAR(count[r] / n, pi[r], 5 * std::sqrt(pi[r] * (1 - pi[r]) / n)) << "regime " << r << " at step " << t;
  }
  // Transitions and per-regime variance of the step's log return (the regime in force).
  std::vector<double> from(3, 0), pair(9, 0), s2(3, 0);
  for (int t = 0; t < steps; ++t)
    for (std::int64_t i = 0; i < n; ++i) {
      const int r = p.regime[t][i], r2 = p.regime[t + 1][i];
      from[r] += 1;
      pair[r * 3 + r2] += 1;
      const double ret = p.x[t + 1][i] - p.x[t][i];
      s2[r] += ret * ret;
    }
  for (int r = 0; r < 3; ++r) {
    for (int j = 0; j < 3; ++j) {
      const double pr = c.transition[r * 3 + j];
      EXPECT_NEAR(pair[r * 3 + j] / from[r], pr, 5 * std::sqrt(pr * (1 - pr) / from[r]) + 1e-12) << r << " -> " << j;
    }
    const double want = c.sigma[r] * c.sigma[r] * c.dt;  // mean return is O(sigma^2 dt): negligible
    EXPECT_NEAR(s2[r] / from[r], want, 5 * want * std::sqrt(2 / from[r]) + 1e-3 * want) << "variance in regime " << r;
  }
}

TEST_F(MarketTest, MertonJumpsArriveAtTheirRateAndAreCompensated) {
  SCOPED_TRACE(seed_note());
  MarketConfig c = gbm_config(1);
  c.sigma = {0.001};
  c.jump_intensity = 25.0;  // lambda dt ~ 0.099
  c.jump_mean = 0.05;
  c.jump_stddev = 0.005;
  validate(c);
  const std::int64_t n = 16384;
  const int steps = 20;
  const Path p = flat_path(c, n, steps, seed_, stream());
  double jumps = 0, growth = 0, growth2 = 0;
  for (int t = 0; t < steps; ++t)
    for (std::int64_t i = 0; i < n; ++i) {
      const double r = p.x[t + 1][i] - p.x[t][i];
      jumps += r > 0.02;  // no jump: ~ -0.005 (compensator); one jump: ~ +0.045
      growth += std::exp(r);
      growth2 += std::exp(r) * std::exp(r);
    }
  const double m = static_cast<double>(n) * steps;
  const double pj = 1 - std::exp(-c.jump_intensity * c.dt);
  EXPECT_NEAR(jumps / m, pj, 5 * std::sqrt(pj * (1 - pj) / m));
  // Compensated: E[S_{t+1} / S_t] = e^{mu dt} = 1.
  const double g = growth / m, gvar = growth2 / m - g * g;
  EXPECT_NEAR(g, 1.0, 5 * std::sqrt(gvar / m));
}

std::vector<float> run_random(const MarketConfig& c, std::int64_t n, int steps, std::int64_t per_call,
                              std::uint64_t seed, cudaStream_t stream, std::vector<float>* rewards = nullptr) {
  MarketEnv env(c, n);
  const std::int64_t d = env.obs_dim();
  StepBuffers b(n, d, steps);
  test::poison(b.obs, stream);
  gpu::DeviceBuffer<float> first(n * d);
  env.reset(first.data(), gpu::DType::f32, seed, stream);
  // Actions from the random policy, generated up front so both call shapes see the same ones.
  gpu::DeviceBuffer<std::int32_t> act(n * c.assets * steps);
  MarketEnv scratch(c, n);  // only its shape is used by the policy (random reads no state)
  scratch.reset(first.data(), gpu::DType::f32, 0, stream);
  for (int t = 0; t < steps; ++t)
    market_policy_actions(act.data() + t * n * c.assets, nullptr, scratch, BaselinePolicy::random, 99, t, stream);
  for (std::int64_t t0 = 0; t0 < steps; t0 += per_call) {
    const std::int64_t k = std::min<std::int64_t>(per_call, steps - t0);
    StepOutputs o{b.obs.data() + t0 * n * d, b.reward.data() + t0 * n,        b.te.data() + t0 * n,
                  b.tr.data() + t0 * n,      b.final_obs.data() + t0 * n * d, gpu::DType::f32};
    env.step(o, ActionInput{act.data() + t0 * n * c.assets, nullptr}, k, stream);
  }
  if (rewards) *rewards = test::download(b.reward, stream);
  return test::download(b.obs, stream);
}

TEST_F(MarketTest, SameSeedSameTrajectoryOtherSeedDiffers) {
  SCOPED_TRACE(seed_note());
  MarketConfig c = accounting_config(ActionMode::discrete, RewardKind::pnl);
  c.jump_intensity = 10.0;
  c.jump_stddev = 0.02;
  const std::int64_t n = 513;
  const int steps = 70;  // crosses an episode end (60)
  std::vector<float> r1, r2, r3;
  const auto a = run_random(c, n, steps, 1, seed_, stream(), &r1);
  const auto b = run_random(c, n, steps, 7, seed_, stream(), &r2);
  const auto other = run_random(c, n, steps, 7, seed_ + 1, stream(), &r3);
  EXPECT_EQ(a, b);
  EXPECT_EQ(r1, r2);
  std::size_t differ = 0;
  for (std::size_t k = 0; k < a.size(); ++k) differ += a[k] != other[k];
  EXPECT_GT(differ, a.size() / 2);
}

// configs/markets/bench_ou.toml, the market bench/envs.cu times: its shape (one OU asset, three
// levels, 32 returns + 4 tail columns), every episode truncated at step 256 and none terminated
// under random trading, and T-step calls equal to single-step calls in observations, rewards,
// flags and final observations (the bench times T-step calls).
TEST_F(MarketTest, BenchOuMarketTruncatesEvery256StepsAndMultiStepCallsAgree) {
  SCOPED_TRACE(seed_note());
  const std::filesystem::path file = (foxhunt::test::configs_dir() / "markets" / "bench_ou.toml").lexically_normal();
  if (!std::filesystem::exists(file)) GTEST_SKIP() << file << " not found (a test binary without the source tree)";
  const MarketConfig c = load_market_config(file);
  ASSERT_EQ(c.assets, 1);
  ASSERT_EQ(c.process, PriceProcess::ou);
  ASSERT_EQ(c.episode_length, 256);
  ASSERT_EQ(c.window, 32);
  const std::int64_t n = 1000;
  const int steps = 2 * 256 + 10;
  std::uniform_int_distribution<int> pick(0, 2);
  std::vector<std::int32_t> actions(static_cast<std::size_t>(n * steps));
  for (auto& a : actions) a = pick(rng());
  auto act = test::upload(actions, stream());
  struct Run {
    std::vector<float> obs, final_obs, reward;
    std::vector<std::uint8_t> te, tr;
  };
  std::int64_t d = 0;
  auto run = [&](std::int64_t per_call) {
    MarketEnv env(c, n);
    d = env.obs_dim();
    EXPECT_EQ(d, 32 + 4);
    EXPECT_EQ(env.action_space().choices, 3);
    EXPECT_EQ(env.action_space().branches, 1);
    StepBuffers b(n, d, steps);
    test::poison(b.obs, stream());
    test::poison(b.reward, stream());
    test::poison(b.te, stream());
    test::poison(b.tr, stream());
    FH_CHECK(cudaMemsetAsync(b.final_obs.data(), 0, b.final_obs.bytes(), stream()));
    gpu::DeviceBuffer<float> first(n * d);
    env.reset(first.data(), gpu::DType::f32, seed_, stream());
    for (std::int64_t t0 = 0; t0 < steps; t0 += per_call) {
      const std::int64_t k = std::min<std::int64_t>(per_call, steps - t0);
      const StepOutputs o{b.obs.data() + t0 * n * d, b.reward.data() + t0 * n,        b.te.data() + t0 * n,
                          b.tr.data() + t0 * n,      b.final_obs.data() + t0 * n * d, gpu::DType::f32};
      env.step(o, ActionInput{act.data() + t0 * n, nullptr}, k, stream());
    }
    return Run{test::download(b.obs, stream()), test::download(b.final_obs, stream()),
               test::download(b.reward, stream()), test::download(b.te, stream()), test::download(b.tr, stream())};
  };
  const Run one = run(1), many = run(128);
  EXPECT_EQ(one.obs, many.obs);
  EXPECT_EQ(one.final_obs, many.final_obs);
  EXPECT_EQ(one.reward, many.reward);
  EXPECT_EQ(one.te, many.te);
  EXPECT_EQ(one.tr, many.tr);
  const int progress = 32 + 2;  // the tail's episode progress t / episode_length
  for (int t = 0; t < steps; ++t) {
    const bool end = (t + 1) % 256 == 0;
    for (std::int64_t i = 0; i < n; ++i) {
      const std::size_t row = static_cast<std::size_t>(t * n + i);
      ASSERT_EQ(one.te[row], 0) << "step " << t << ", env " << i;
      ASSERT_EQ(one.tr[row], end ? 1 : 0) << "step " << t << ", env " << i;
      ASSERT_TRUE(std::isfinite(one.reward[row])) << "step " << t << ", env " << i;
      // After an episode end the row is the next episode's first observation (progress 0); the
      // finished one's last observation is in final_obs (progress 1).
      ASSERT_EQ(one.obs[row * d + progress], end ? 0.0f : static_cast<float>((t % 256 + 1) / 256.0))
          << "step " << t << ", env " << i;
      if (end) ASSERT_EQ(one.final_obs[row * d + progress], 1.0f) << "step " << t << ", env " << i;
    }
  }
}

TEST_F(MarketTest, ObservationWindowShiftsAndCarriesTheExtraBlock) {
  SCOPED_TRACE(seed_note());
  MarketConfig c = accounting_config(ActionMode::discrete, RewardKind::pnl);
  c.extra_features = 5;
  const std::int64_t n = 100;
  const int A = c.assets, W = c.window;
  MarketEnv env(c, n);
  const std::int64_t d = env.obs_dim();
  ASSERT_EQ(d, W * A + A + 3 + 5);
  std::vector<float> extra_host = test::random_uniform(n * 5, -1.0f, 1.0f, rng());
  auto extra = test::upload(extra_host, stream());
  env.set_extra_features(extra.data());
  StepBuffers b(n, d);
  env.reset(b.obs.data(), gpu::DType::f32, seed_, stream());
  auto prev_obs = test::download(b.obs, stream());
  auto prev_x = test::download(env.state().log_price, n * A, stream());
  std::vector<float> ret_scale(A);
  for (int a = 0; a < A; ++a) ret_scale[a] = env.params().ret_scale[a];
  gpu::DeviceBuffer<std::int32_t> act(n * A);
  for (int t = 0; t < 10; ++t) {
    market_policy_actions(act.data(), nullptr, env, BaselinePolicy::random, 5, t, stream());
    test::poison(b.obs, stream());
    env.step(b.view(), ActionInput{act.data(), nullptr}, 1, stream());
    const auto obs = test::download(b.obs, stream());
    const auto x = test::download(env.state().log_price, n * A, stream());
    for (std::int64_t i = 0; i < n; ++i) {
      const float* o = &obs[i * d];
      const float* po = &prev_obs[i * d];
      for (int k = 0; k < W - 1; ++k)
        for (int a = 0; a < A; ++a) ASSERT_EQ(o[k * A + a], po[(k + 1) * A + a]) << "window shift, env " << i;
      for (int a = 0; a < A; ++a)
        ASSERT_NEAR(o[(W - 1) * A + a], (x[a * n + i] - prev_x[a * n + i]) * ret_scale[a], 1e-4) << "newest return";
      ASSERT_NEAR(o[W * A + A + 1], (t + 1.0) / c.episode_length, 1e-7) << "progress";
      for (int f = 0; f < 5; ++f) ASSERT_EQ(o[W * A + A + 3 + f], extra_host[i * 5 + f]) << "extra feature";
    }
    prev_obs = obs;
    prev_x = x;
  }
  // bf16 observations are the f32 ones rounded.
  MarketEnv e2(c, n);
  e2.set_extra_features(extra.data());
  gpu::DeviceBuffer<__nv_bfloat16> bobs(n * d);
  gpu::DeviceBuffer<float> fobs(n * d);
  e2.reset(bobs.data(), gpu::DType::bf16, seed_, stream());
  e2.reset(fobs.data(), gpu::DType::f32, seed_, stream());
  const auto hb = test::download(bobs, stream());
  const auto hf = test::download(fobs, stream());
  for (std::size_t k = 0; k < hb.size(); ++k)
    ASSERT_EQ(__bfloat162float(hb[k]), __bfloat162float(__float2bfloat16_rn(hf[k]))) << k;
}

// ---- observation.price_level and reward.scale ------------------------------------------------

// The level column of asset a in double, as market.hpp defines it, from the config (not the
// kernel parameters): OU (x - log S0 - theta) / (sigma / sqrt(2 kappa)); GBM (x - log S0) /
// (sigma sqrt(dt) sqrt(episode_length)); the current regime's parameters.
double ref_level(const MarketConfig& c, double x, int regime, int a) {
  const int k = regime * c.assets + a;
  const double sigma = c.sigma[k];
  if (c.process == PriceProcess::ou)
    return (x - std::log(c.initial_price[a]) - c.theta[k]) / (sigma / std::sqrt(2.0 * c.kappa[k]));
  return (x - std::log(c.initial_price[a])) /
         (sigma * std::sqrt(c.dt) * std::sqrt(static_cast<double>(c.episode_length)));
}

// f32 output of a double value: one rounding, plus the f32 parameters of the price law (the OU
// stationary sd is stored in f32: 2^-24 relative); 1e-6 relative + 1e-6 absolute covers both.
::testing::AssertionResult level_near(float got, double want) {
  if (std::abs(static_cast<double>(got) - want) <= 1e-6 * std::abs(want) + 1e-6) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "level " << got << ", reference " << want;
}

// Every row the env writes (reset, step, final_obs of ending episodes) ends with the level
// columns, after the window, the tail and the extra block (which keeps its place); the other
// columns are those of the same env without price_level.
void check_price_level(const MarketConfig& base, std::uint64_t seed, std::mt19937_64& rng, cudaStream_t stream) {
  MarketConfig c = base;
  c.extra_features = 2;
  c.price_level = true;
  validate(c);
  MarketConfig plain = c;
  plain.price_level = false;
  const std::int64_t n = 67;
  const int A = c.assets, W = c.window, R = c.regimes, E = c.extra_features;
  MarketEnv env(c, n), ref(plain, n);
  const std::int64_t d = env.obs_dim(), d0 = ref.obs_dim();
  ASSERT_EQ(d, W * A + A + 3 + E + A);
  ASSERT_EQ(d0, d - A);
  const auto extra_host = test::random_uniform(n * E, -1.0f, 1.0f, rng);
  auto extra = test::upload(extra_host, stream);
  env.set_extra_features(extra.data());
  ref.set_extra_features(extra.data());
  StepBuffers b(n, d), b0(n, d0);
  test::poison(b.obs, stream);
  env.reset(b.obs.data(), gpu::DType::f32, seed, stream);
  ref.reset(b0.obs.data(), gpu::DType::f32, seed, stream);
  gpu::DeviceBuffer<std::int32_t> act(n * A);
  const int steps = 3 * c.episode_length + 2;  // crosses three episode ends
  long ends = 0, regime_seen[kMaxRegimes] = {};
  std::vector<double> prev_x;
  for (int t = 0; t <= steps; ++t) {
    if (t > 0) {
      market_policy_actions(act.data(), nullptr, env, BaselinePolicy::random, seed + 7, t, stream);
      test::poison(b.obs, stream);
      test::poison(b.final_obs, stream);
      test::poison(b0.final_obs, stream);
      env.step(b.view(), ActionInput{act.data(), nullptr}, 1, stream);
      ref.step(b0.view(), ActionInput{act.data(), nullptr}, 1, stream);
    }
    const auto obs = test::download(b.obs, stream);
    const auto obs0 = test::download(b0.obs, stream);
    std::vector<float> fin, fin0;
    std::vector<std::uint8_t> te, tr;
    if (t > 0) {  // the step's outputs (the reset writes none)
      fin = test::download(b.final_obs, stream);
      fin0 = test::download(b0.final_obs, stream);
      te = test::download(b.te, stream);
      tr = test::download(b.tr, stream);
    }
    const auto x = test::download(env.state().log_price, n * A, stream);
    const auto regime = test::download(env.state().regime, n, stream);
    for (std::int64_t i = 0; i < n; ++i) {
      SCOPED_TRACE("step " + std::to_string(t) + " env " + std::to_string(i));
      ++regime_seen[regime[i]];
      const float* o = &obs[i * d];
      for (std::int64_t j = 0; j < d0; ++j) ASSERT_EQ(o[j], obs0[i * d0 + j]) << "column " << j;
      for (int f = 0; f < E; ++f) ASSERT_EQ(o[W * A + A + 3 + f], extra_host[i * E + f]) << "extra feature " << f;
      for (int a = 0; a < A; ++a)
        ASSERT_TRUE(level_near(o[d0 + a], ref_level(c, x[a * n + i], regime[i], a))) << "asset " << a;
      if (t == 0 || (te[i] == 0 && tr[i] == 0)) continue;
      // An ending episode: final_obs describes the state before the reset, which the state no
      // longer holds. Its log price is recovered from the final row's newest window return (f32:
      // an error of 2^-24 of one step's return, far below the tolerance) and the previous step's
      // log price; its regime is unknown with regimes > 1: one of them must match.
      ++ends;
      const float* f = &fin[i * d];
      for (std::int64_t j = 0; j < d0; ++j) ASSERT_EQ(f[j], fin0[i * d0 + j]) << "final column " << j;
      for (int a = 0; a < A; ++a) {
        const double x_end = prev_x[a * n + i] +
                             static_cast<double>(f[(W - 1) * A + a]) / static_cast<double>(env.params().ret_scale[a]);
        bool match = false;
        for (int r = 0; r < R && !match; ++r) match = level_near(f[d0 + a], ref_level(c, x_end, r, a));
        ASSERT_TRUE(match) << "final level of asset " << a << ": " << f[d0 + a];
      }
    }
    prev_x = x;
  }
  EXPECT_GE(ends, 3 * n);
  for (int r = 0; r < R; ++r) EXPECT_GT(regime_seen[r], 0) << "regime " << r << " never visited";
}

TEST_F(MarketTest, PriceLevelColumnsMatchTheReferenceOu) {
  SCOPED_TRACE(seed_note());
  MarketConfig c = accounting_config(ActionMode::discrete, RewardKind::pnl);
  c.process = PriceProcess::ou;
  c.mu.clear();
  c.regimes = 1;
  c.transition = {1.0};
  c.sigma = {0.3, 0.5, 0.2};
  c.kappa = {5.0, 2.0, 12.0};
  c.theta = {0.1, -0.2, 0.0};
  c.episode_length = 9;
  check_price_level(c, seed_, rng(), stream());
}

TEST_F(MarketTest, PriceLevelColumnsMatchTheReferenceOuRegimes) {
  SCOPED_TRACE(seed_note());
  MarketConfig c = accounting_config(ActionMode::discrete, RewardKind::pnl);
  c.process = PriceProcess::ou;
  c.mu.clear();  // 2 regimes, 3 assets: per-regime sigma (accounting_config), kappa and theta
  c.kappa = {5.0, 2.0, 12.0, 1.0, 8.0, 3.0};
  c.theta = {0.1, -0.2, 0.0, -0.1, 0.3, 0.05};
  c.episode_length = 9;
  check_price_level(c, seed_, rng(), stream());
}

TEST_F(MarketTest, PriceLevelColumnsMatchTheReferenceGbm) {
  SCOPED_TRACE(seed_note());
  MarketConfig c = accounting_config(ActionMode::discrete, RewardKind::pnl);  // GBM, 2 regimes
  c.episode_length = 9;
  check_price_level(c, seed_, rng(), stream());
}

// reward.scale multiplies the reward (penalties included) and the episode return; the dynamics,
// the observation and the return-based statistics stay as they are.
TEST_F(MarketTest, RewardScaleMultipliesTheRewardOnly) {
  SCOPED_TRACE(seed_note());
  MarketConfig c = accounting_config(ActionMode::discrete, RewardKind::log_return);
  c.episode_length = 9;
  MarketConfig scaled = c;
  scaled.reward_scale = 37.5;
  validate(scaled);
  const std::int64_t n = 67;
  MarketEnv e1(c, n), e2(scaled, n);
  const std::int64_t d = e1.obs_dim();
  ASSERT_EQ(e2.obs_dim(), d);
  StepBuffers b1(n, d), b2(n, d);
  e1.reset(b1.obs.data(), gpu::DType::f32, seed_, stream());
  e2.reset(b2.obs.data(), gpu::DType::f32, seed_, stream());
  gpu::DeviceBuffer<std::int32_t> act(n * c.assets);
  long nonzero = 0;
  for (int t = 0; t < 2 * c.episode_length; ++t) {
    market_policy_actions(act.data(), nullptr, e1, BaselinePolicy::random, seed_ + 3, t, stream());
    test::poison(b2.reward, stream());
    test::poison(b2.obs, stream());
    e1.step(b1.view(), ActionInput{act.data(), nullptr}, 1, stream());
    e2.step(b2.view(), ActionInput{act.data(), nullptr}, 1, stream());
    const auto r1 = test::download(b1.reward, stream());
    const auto r2 = test::download(b2.reward, stream());
    ASSERT_EQ(test::download(b1.obs, stream()), test::download(b2.obs, stream())) << "step " << t;
    for (std::int64_t i = 0; i < n; ++i) {
      // Both are one f32 rounding of the same double reward (times 37.5): 2 x 2^-24 relative.
      const double want = 37.5 * static_cast<double>(r1[i]);
      ASSERT_NEAR(r2[i], want, 2e-7 * std::abs(want) + 1e-12) << "step " << t << " env " << i;
      nonzero += r1[i] != 0.0f;
    }
  }
  EXPECT_GT(nonzero, n);
  gpu::ExitSlot<EpisodeStats> s1, s2;
  e1.export_stats(s1, true, stream());
  e2.export_stats(s2, true, stream());
  const EpisodeStats a = s1.wait(), b = s2.wait();
  ASSERT_GE(a.episodes, 2.0 * n);
  ASSERT_EQ(b.episodes, a.episodes);
  EXPECT_NEAR(b.mean_return, 37.5 * a.mean_return, 1e-5 * std::abs(37.5 * a.mean_return) + 1e-9);
  EXPECT_EQ(b.mean_sharpe, a.mean_sharpe);
  EXPECT_EQ(b.mean_turnover, a.mean_turnover);
  EXPECT_EQ(b.mean_total_return, a.mean_total_return);
}

MarketConfig ou_market() {
  MarketConfig c;
  c.assets = 1;
  c.process = PriceProcess::ou;
  c.initial_price = {100.0};
  c.kappa = {5.0};
  c.theta = {0.0};
  c.sigma = {0.2};
  c.transition = {1.0};
  c.fee_bps = 5;
  c.half_spread_bps = 1;
  c.slippage = 0.1;
  c.liquidity = 1e7;
  c.borrow_rate = 0.02;
  c.episode_length = 256;
  validate(c);
  return c;
}

EpisodeStats run_policy(const MarketConfig& c, BaselinePolicy policy, std::int64_t n, std::uint64_t seed,
                        cudaStream_t stream) {
  MarketEnv env(c, n);
  StepBuffers b(n, env.obs_dim());
  gpu::DeviceBuffer<std::int32_t> act(n * c.assets);
  env.reset(b.obs.data(), gpu::DType::f32, seed, stream);
  for (int t = 0; t < c.episode_length; ++t) {
    market_policy_actions(act.data(), nullptr, env, policy, seed + 1, t, stream);
    env.step(b.view(), ActionInput{act.data(), nullptr}, 1, stream);
  }
  gpu::ExitSlot<EpisodeStats> slot;
  env.export_stats(slot, true, stream);
  return slot.wait();
}

TEST_F(MarketTest, OuOracleEarnsAPositiveSharpeNetOfCostsRandomAndFlatDoNot) {
  SCOPED_TRACE(seed_note());
  const MarketConfig c = ou_market();
  const std::int64_t n = 2048;
  const EpisodeStats oracle = run_policy(c, BaselinePolicy::ou_oracle, n, seed_, stream());
  const EpisodeStats random = run_policy(c, BaselinePolicy::random, n, seed_, stream());
  const EpisodeStats flat = run_policy(c, BaselinePolicy::flat, n, seed_, stream());
  const EpisodeStats hold = run_policy(c, BaselinePolicy::buy_and_hold, n, seed_, stream());
  ASSERT_EQ(oracle.episodes, static_cast<double>(n));
  EXPECT_GT(oracle.mean_sharpe - 5 * oracle.std_sharpe / std::sqrt(oracle.episodes), 0.0)
      << "oracle Sharpe " << oracle.mean_sharpe;
  EXPECT_GT(oracle.mean_total_return, 0.0);
  EXPECT_LT(random.mean_sharpe + 5 * random.std_sharpe / std::sqrt(random.episodes), 0.0)
      << "random Sharpe " << random.mean_sharpe;
  EXPECT_EQ(flat.mean_sharpe, 0.0);
  EXPECT_EQ(flat.mean_total_return, 0.0);
  EXPECT_EQ(flat.mean_trades, 0.0);
  EXPECT_EQ(hold.mean_trades, 1.0);  // bought once, then held
  EXPECT_EQ(hold.mean_length, static_cast<double>(c.episode_length));
  EXPECT_GT(oracle.mean_turnover, 0.0);
}

TEST_F(MarketTest, RejectsBadArguments) {
  const MarketConfig c = ou_market();
  EXPECT_THROW(MarketEnv(c, 0), std::invalid_argument);
  MarketConfig bad = c;
  bad.fee_bps = -1;
  EXPECT_THROW(MarketEnv(bad, 4), ConfigError);
  MarketEnv env(c, 4);
  gpu::DeviceBuffer<float> obs(4 * env.obs_dim()), reward(4);
  gpu::DeviceBuffer<std::uint8_t> te(4), tr(4);
  gpu::DeviceBuffer<std::int32_t> act(4);
  const StepOutputs out{obs.data(), reward.data(), te.data(), tr.data(), nullptr, gpu::DType::f32};
  EXPECT_THROW(env.step(out, ActionInput{act.data(), nullptr}, 1, stream()), std::invalid_argument);  // before reset
  env.reset(obs.data(), gpu::DType::f32, 1, stream());
  EXPECT_THROW(env.step(out, ActionInput{nullptr, reward.data()}, 1, stream()), std::invalid_argument);
  MarketConfig gbm = gbm_config(1);
  MarketEnv g(gbm, 4);
  EXPECT_THROW(market_policy_actions(act.data(), nullptr, g, BaselinePolicy::ou_oracle, 0, 0, stream()),
               std::invalid_argument);
}

}  // namespace
}  // namespace foxhunt::rl
