// The device evaluation metrics (rl/eval/metrics.hpp): per-episode metrics and mean curves against
// the float64 reference of tests/report/metrics_reference.hpp on random equity paths (outputs
// NaN-poisoned first, the same bits on a second run); then on the market environment's own trace:
// the metrics agree with the environment's episode statistics, a buy-and-hold agent has
// correlation 1 to buy-and-hold on the same paths, and cost multipliers change only what depends
// on costs.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "rl/envs/market.hpp"
#include "rl/envs/market_config.hpp"
#include "rl/envs/market_policies.hpp"
#include "rl/eval/metrics.hpp"
#include "tests/report/metrics_reference.hpp"
#include "tests/support/gpu_test.hpp"
#include "tests/support/paths.hpp"

namespace foxhunt::rl {
namespace {

using test::HostTrace;
using test::RefEpisode;

class EvalMetricsTest : public test::GpuTest {};

// A trace's arrays on the device.
struct DeviceTrace {
  gpu::DeviceBuffer<double> equity, cost, borrow, turnover;
  gpu::DeviceBuffer<float> weight;
  gpu::DeviceBuffer<std::int32_t> trades;
  gpu::DeviceBuffer<std::uint8_t> ended;
  MarketTrace view;
  explicit DeviceTrace(const HostTrace& h)
      : equity(test::upload(h.equity)),
        cost(test::upload(h.cost)),
        borrow(test::upload(h.borrow)),
        turnover(test::upload(h.turnover)),
        weight(test::upload(h.weight)),
        trades(test::upload(h.trades)),
        ended(test::upload(h.ended)) {
    view = {h.T,           equity.data(), cost.data(), borrow.data(), turnover.data(),
            weight.data(), trades.data(), ended.data()};
  }
  DeviceTrace(std::int64_t n, std::int64_t steps, int assets)
      : equity(n * steps),
        cost(n * steps),
        borrow(n * steps),
        turnover(n * steps),
        weight(n * steps * assets),
        trades(n * steps),
        ended(n * steps) {
    view = {steps,           equity.data(), cost.data(),   borrow.data(),
            turnover.data(), weight.data(), trades.data(), ended.data()};
  }
};

std::vector<double> fields(const EpisodeMetrics& m) {
  const double* f = reinterpret_cast<const double*>(&m);
  return std::vector<double>(f, f + kEpisodeMetricCount);
}

// The absolute 1e-8: a volatility is the square root of a variance whose float64 cancellation
// leaves ~1e-17 where the exact value is 0 (seen: 1.5e-9 against 0 on a near-flat episode).
::testing::AssertionResult close(double got, double want, double rtol) {
  if (std::isnan(got) && std::isnan(want)) return ::testing::AssertionSuccess();
  if (std::isnan(got) != std::isnan(want) || !(std::abs(got - want) <= rtol * (1.0 + std::abs(want)) + 1e-8))
    return ::testing::AssertionFailure() << "got " << got << ", want " << want;
  return ::testing::AssertionSuccess();
}

// The mean curves of the reference episodes (rl/eval/metrics.hpp's definition).
std::vector<double> reference_curves(const std::vector<RefEpisode>& eps, int A, double e0) {
  const std::size_t T = eps[0].steps();
  const int C = curve_columns(A);
  std::vector<double> out((T + 1) * C, 0.0);
  for (const RefEpisode& ep : eps) {
    const std::size_t L = test::ref_length(ep);
    double peak = e0, dd = 0.0, e = e0;
    out[0] += 1.0;
    for (std::size_t s = 1; s <= T; ++s) {
      const bool live = s - 1 < L;
      if (live) {
        e = ep.equity[s - 1];
        peak = std::max(peak, e);
        dd = 1.0 - e / peak;
      }
      out[s * C] += e / e0;
      out[s * C + 1] += dd;
      for (int a = 0; a < A; ++a) out[s * C + 2 + a] += live ? static_cast<float>(ep.weight[s - 1][a]) : 0.0;
    }
  }
  for (double& v : out) v /= static_cast<double>(eps.size());
  return out;
}

TEST_F(EvalMetricsTest, MatchTheReferenceOnRandomPaths) {
  SCOPED_TRACE(seed_note());
  const double e0 = 1e6, P = 252.0;
  struct Case {
    std::int64_t E, T;
    int A;
  };
  for (const Case c : {Case{1, 1, 1}, Case{777, 64, 1}, Case{300, 256, 3}, Case{129, 300, 16}}) {
    SCOPED_TRACE("E " + std::to_string(c.E) + ", T " + std::to_string(c.T) + ", A " + std::to_string(c.A));
    std::vector<RefEpisode> eps, refs;
    for (std::int64_t i = 0; i < c.E; ++i) {
      eps.push_back(test::random_episode(static_cast<std::size_t>(c.T), c.A, e0, 0.01, true, rng()));
      refs.push_back(test::random_episode(static_cast<std::size_t>(c.T), c.A, e0, 0.02, true, rng()));
    }
    const HostTrace ht(eps, c.A), hr(refs, c.A);
    DeviceTrace dt(ht), dr(hr);
    const TraceShape shape{c.E, c.T, c.A, e0, P};
    gpu::DeviceBuffer<std::byte> ws(eval_metrics_workspace_bytes(shape));
    gpu::DeviceBuffer<EpisodeMetrics> out(static_cast<std::size_t>(c.E));
    gpu::DeviceBuffer<double> curves(static_cast<std::size_t>((c.T + 1) * curve_columns(c.A)));
    for (const bool with_ref : {true, false}) {
      SCOPED_TRACE(with_ref ? "with a reference" : "without a reference");
      test::poison(out, stream());
      test::poison(curves, stream());
      test::poison(ws, stream());
      eval_episode_metrics(out.data(), ws.data(), dt.view, with_ref ? &dr.view : nullptr, shape, stream());
      eval_mean_curves(curves.data(), out.data(), ws.data(), dt.view, shape, stream());
      const auto got = test::download(out, stream());
      const auto got_curves = test::download(curves, stream());
      for (std::int64_t i = 0; i < c.E; ++i) {
        const auto want = test::reference_metrics(eps[i], with_ref ? &refs[i] : nullptr, e0, P);
        const auto g = fields(got[i]);
        for (int k = 0; k < kEpisodeMetricCount; ++k)
          ASSERT_TRUE(close(g[k], want[k], 1e-9)) << "episode " << i << " " << kEpisodeMetricNames[k];
      }
      const auto want_curves = reference_curves(eps, c.A, e0);
      ASSERT_EQ(got_curves.size(), want_curves.size());
      for (std::size_t k = 0; k < want_curves.size(); ++k)
        ASSERT_TRUE(close(got_curves[k], want_curves[k], 1e-12)) << "curve element " << k;
      // The same input gives the same bits.
      eval_episode_metrics(out.data(), ws.data(), dt.view, with_ref ? &dr.view : nullptr, shape, stream());
      eval_mean_curves(curves.data(), out.data(), ws.data(), dt.view, shape, stream());
      const auto again = test::download(out, stream());
      const auto again_curves = test::download(curves, stream());
      for (std::int64_t i = 0; i < c.E; ++i)
        for (int k = 0; k < kEpisodeMetricCount; ++k) {
          const double a = fields(again[i])[k], b = fields(got[i])[k];
          ASSERT_TRUE((std::isnan(a) && std::isnan(b)) || a == b) << kEpisodeMetricNames[k];
        }
      EXPECT_EQ(again_curves, got_curves);
    }
  }
}

// One policy on a market for its episode length, recorded into `trace`.
EpisodeStats run_policy(const MarketConfig& mc, std::int64_t n, BaselinePolicy policy, std::uint64_t seed,
                        DeviceTrace& trace, cudaStream_t s) {
  MarketEnv env(mc, n);
  env.set_trace(trace.view);
  const std::int64_t O = env.obs_dim(), A = mc.assets;
  gpu::DeviceBuffer<float> obs(n * O), reward(n);
  gpu::DeviceBuffer<std::uint8_t> term(n), trunc(n);
  gpu::DeviceBuffer<std::int32_t> actions(n * A);
  env.reset(obs.data(), gpu::DType::f32, seed, s);
  for (std::int64_t t = 0; t < mc.episode_length; ++t) {
    market_policy_actions(actions.data(), nullptr, env, policy, seed, static_cast<std::uint64_t>(t), s);
    StepOutputs out;
    out.obs = obs.data();
    out.reward = reward.data();
    out.terminated = term.data();
    out.truncated = trunc.data();
    ActionInput in;
    in.discrete = actions.data();
    env.step(out, in, 1, s);
  }
  gpu::DeviceBuffer<EpisodeStats> st(1);
  env.reduce_stats(st.data(), false, s);
  return test::download(st, s)[0];
}

std::vector<EpisodeMetrics> metrics_of(DeviceTrace& trace, DeviceTrace* reference, const TraceShape& shape,
                                       cudaStream_t s) {
  gpu::DeviceBuffer<std::byte> ws(eval_metrics_workspace_bytes(shape));
  gpu::DeviceBuffer<EpisodeMetrics> out(static_cast<std::size_t>(shape.episodes));
  test::poison(out, s);
  eval_episode_metrics(out.data(), ws.data(), trace.view, reference ? &reference->view : nullptr, shape, s);
  return test::download(out, s);
}

MarketConfig ou_market() { return load_market_config(test::configs_dir() / "markets" / "ou_mean_reversion.toml"); }

TEST_F(EvalMetricsTest, BuyAndHoldAgentHasCorrelationOneAndMatchesTheEnvironmentsStatistics) {
  const MarketConfig mc = ou_market();
  const std::int64_t n = 512, T = mc.episode_length;
  const std::uint64_t seed = 77;
  DeviceTrace agent(n, T, mc.assets), reference(n, T, mc.assets);
  const EpisodeStats st = run_policy(mc, n, BaselinePolicy::buy_and_hold, seed, agent, stream());
  (void)run_policy(mc, n, BaselinePolicy::buy_and_hold, seed, reference, stream());  // its own environment
  const TraceShape shape{n, T, mc.assets, mc.initial_cash, 1.0 / mc.dt};
  const auto m = metrics_of(agent, &reference, shape, stream());
  double total = 0, sharpe = 0, mdd = 0, turnover = 0, trades = 0;
  for (const EpisodeMetrics& e : m) {
    ASSERT_EQ(e.length, static_cast<double>(T));  // min_equity 0.1 is not reached holding one unit of leverage
    EXPECT_NEAR(e.corr_reference, 1.0, 1e-12);
    EXPECT_EQ(e.trades, 1.0);
    EXPECT_EQ(e.avg_holding_steps, static_cast<double>(T));
    EXPECT_GT(e.cost, 0.0);
    total += e.total_return;
    sharpe += e.sharpe;
    mdd += e.max_drawdown;
    turnover += e.turnover;
    trades += e.trades;
  }
  // Every environment finished exactly one episode: the means agree with its own statistics.
  ASSERT_EQ(st.episodes, static_cast<double>(n));
  EXPECT_NEAR(total / n, st.mean_total_return, 1e-12);
  EXPECT_NEAR(sharpe / n, st.mean_sharpe, 1e-9);
  EXPECT_NEAR(mdd / n, st.mean_max_drawdown, 1e-12);
  EXPECT_NEAR(turnover / n, st.mean_turnover, 1e-12);
  EXPECT_NEAR(trades / n, st.mean_trades, 1e-12);
  // Flat has no correlation (no variance), and none of the costs.
  DeviceTrace flat(n, T, mc.assets);
  (void)run_policy(mc, n, BaselinePolicy::flat, seed, flat, stream());
  for (const EpisodeMetrics& e : metrics_of(flat, &reference, shape, stream())) {
    EXPECT_TRUE(std::isnan(e.corr_reference));
    EXPECT_EQ(e.cost, 0.0);
    EXPECT_EQ(e.total_return, 0.0);
  }
}

TEST_F(EvalMetricsTest, CostMultipliersChangeOnlyCostDependentNumbers) {
  const MarketConfig base = ou_market();
  ASSERT_GT(base.fee_bps + base.half_spread_bps + base.slippage, 0.0) << "the shipped OU market charges costs";
  MarketConfig free = base;
  free.fee_bps = free.half_spread_bps = free.slippage = 0.0;
  const std::int64_t n = 256, T = base.episode_length;
  const std::uint64_t seed = 5;
  const TraceShape shape{n, T, base.assets, base.initial_cash, 1.0 / base.dt};
  DeviceTrace paid(n, T, base.assets), none(n, T, base.assets);
  (void)run_policy(base, n, BaselinePolicy::buy_and_hold, seed, paid, stream());
  (void)run_policy(free, n, BaselinePolicy::buy_and_hold, seed, none, stream());
  const auto eq1 = test::download(paid.equity, stream()), eq0 = test::download(none.equity, stream());
  const auto c1 = test::download(paid.cost, stream()), c0 = test::download(none.cost, stream());
  const auto tr1 = test::download(paid.trades, stream()), tr0 = test::download(none.trades, stream());
  const auto to1 = test::download(paid.turnover, stream()), to0 = test::download(none.turnover, stream());
  for (std::int64_t i = 0; i < n; ++i) {
    EXPECT_GT(c1[i], 0.0);  // the one purchase, at step 0
    for (std::int64_t t = 0; t < T; ++t) {
      const std::size_t ix = static_cast<std::size_t>(t * n + i);
      ASSERT_EQ(c0[ix], 0.0);
      // The same units bought at the same mid price: the equity differs by the purchase's cost.
      ASSERT_NEAR(eq0[ix] - eq1[ix], c1[i], 1e-9 * eq0[ix]) << "episode " << i << ", step " << t;
      ASSERT_EQ(tr0[ix], tr1[ix]);
      ASSERT_EQ(to0[ix], to1[ix]);  // notional / equity before trading: the same at step 0
    }
  }
  const auto m1 = metrics_of(paid, &paid, shape, stream()), m0 = metrics_of(none, &none, shape, stream());
  for (std::int64_t i = 0; i < n; ++i) {
    EXPECT_EQ(m0[i].length, m1[i].length);
    EXPECT_EQ(m0[i].trades, m1[i].trades);
    EXPECT_EQ(m0[i].turnover, m1[i].turnover);
    EXPECT_EQ(m0[i].avg_holding_steps, m1[i].avg_holding_steps);
    EXPECT_EQ(m0[i].cost, 0.0);
    EXPECT_NEAR(m0[i].total_return - m1[i].total_return, m1[i].cost, 1e-12);
  }
  // Flat trades nothing: every number is the same with and without costs.
  DeviceTrace flat1(n, T, base.assets), flat0(n, T, base.assets);
  (void)run_policy(base, n, BaselinePolicy::flat, seed, flat1, stream());
  (void)run_policy(free, n, BaselinePolicy::flat, seed, flat0, stream());
  const auto f1 = metrics_of(flat1, &paid, shape, stream()), f0 = metrics_of(flat0, &paid, shape, stream());
  for (std::int64_t i = 0; i < n; ++i)
    for (int k = 0; k < kEpisodeMetricCount; ++k) {
      const double a = fields(f0[i])[k], b = fields(f1[i])[k];
      EXPECT_TRUE((std::isnan(a) && std::isnan(b)) || a == b) << kEpisodeMetricNames[k];
    }
}

}  // namespace
}  // namespace foxhunt::rl
