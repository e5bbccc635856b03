// The episode metrics (rl/eval/episode_metrics.cuh, host path) against the float64 reference of
// tests/report/metrics_reference.hpp and against values worked out by hand, on fixed series with
// the edge cases (flat, one trade, all losses, a drawdown that never recovers, an early end,
// gains only, flips) and on random series.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "rl/eval/episode_metrics.cuh"
#include "tests/report/metrics_reference.hpp"

namespace foxhunt::test {
namespace {

constexpr double kE0 = 1000.0, kP = 252.0;

int field(const char* name) {
  for (int k = 0; k < rl::kEpisodeMetricCount; ++k)
    if (std::string(rl::kEpisodeMetricNames[k]) == name) return k;
  ADD_FAILURE() << "no metric " << name;
  return 0;
}

RefMetrics core_metrics(const RefEpisode& ep, const RefEpisode* ref, int assets) {
  HostTrace tr({ep}, assets);
  HostTrace rt(ref ? std::vector<RefEpisode>{*ref} : std::vector<RefEpisode>{ep}, assets);
  const rl::TraceShape shape{1, tr.T, assets, kE0, kP};
  const rl::EpisodeMetrics m = rl::eval_detail::episode_metrics(
      tr.view(), ref ? rt.equity.data() : nullptr, ref ? rt.ended.data() : nullptr, 0, shape, nullptr, nullptr);
  RefMetrics out;
  const double* f = reinterpret_cast<const double*>(&m);
  for (int k = 0; k < rl::kEpisodeMetricCount; ++k) out[k] = f[k];
  return out;
}

::testing::AssertionResult same(double got, double want, double rtol = 1e-12) {
  if (std::isnan(want) && std::isnan(got)) return ::testing::AssertionSuccess();
  if (std::isnan(want) != std::isnan(got) || !(std::abs(got - want) <= rtol * (1.0 + std::abs(want))))
    return ::testing::AssertionFailure() << "got " << got << ", want " << want;
  return ::testing::AssertionSuccess();
}

void expect_core_matches_reference(const RefEpisode& ep, const RefEpisode* ref, int assets) {
  const RefMetrics got = core_metrics(ep, ref, assets), want = reference_metrics(ep, ref, kE0, kP);
  for (int k = 0; k < rl::kEpisodeMetricCount; ++k) EXPECT_TRUE(same(got[k], want[k])) << rl::kEpisodeMetricNames[k];
}

// An episode of one asset from per-step equity and weights, truncated at its last step.
RefEpisode series(const std::vector<double>& equity, const std::vector<double>& weight) {
  RefEpisode ep;
  double prev = 0.0;
  for (std::size_t t = 0; t < equity.size(); ++t) {
    ep.equity.push_back(equity[t]);
    ep.weight.push_back({weight[t]});
    const bool trade = weight[t] != prev;
    ep.trades.push_back(trade ? 1 : 0);
    ep.turnover.push_back(trade ? std::abs(weight[t] - prev) : 0.0);
    ep.cost.push_back(trade ? 0.5 : 0.0);
    ep.borrow.push_back(0.0);
    ep.ended.push_back(t + 1 == equity.size() ? rl::kTraceTruncated : 0);
    prev = weight[t];
  }
  return ep;
}

TEST(ReportMetrics, FlatSeries) {
  const RefEpisode ep = series(std::vector<double>(50, kE0), std::vector<double>(50, 0.0));
  const RefMetrics m = core_metrics(ep, nullptr, 1);
  EXPECT_EQ(m[field("length")], 50);
  for (const char* k :
       {"total_return", "annual_return", "annual_volatility", "sharpe", "sortino", "calmar", "max_drawdown",
        "max_drawdown_steps", "turnover", "trades", "var95", "es95", "exposure", "cost"})
    EXPECT_EQ(m[field(k)], 0.0) << k;
  for (const char* k : {"hit_rate", "avg_holding_steps", "corr_reference"}) EXPECT_TRUE(std::isnan(m[field(k)])) << k;
  expect_core_matches_reference(ep, nullptr, 1);
  // A flat agent has no correlation to a moving reference.
  const RefEpisode moving =
      series({1010, 1000, 1020, 990,  1000, 1005, 1001, 1003, 999,  1000, 1002, 1004, 1000, 998,  1001, 1000, 1003,
              1010, 1000, 1000, 1001, 1002, 1003, 1004, 1000, 999,  998,  997,  1000, 1001, 1002, 1000, 1005, 1000,
              1003, 1002, 1001, 1000, 999,  1000, 1001, 1002, 1003, 1004, 1005, 1000, 999,  1000, 1001, 1000},
             std::vector<double>(50, 1.0));
  EXPECT_TRUE(std::isnan(core_metrics(ep, &moving, 1)[field("corr_reference")]));
}

TEST(ReportMetrics, OneTradeHeldToTheEnd) {
  // Buy at the first step, then +1%, -0.5%, +2%, +1%: one trade, one span of 5 steps.
  const std::vector<double> r = {0.0, 0.01, -0.005, 0.02, 0.01};
  std::vector<double> eq;
  double e = kE0 - 0.5;  // the trade's cost
  for (double x : r) eq.push_back(e *= 1.0 + x);
  const RefEpisode ep = series(eq, {1, 1, 1, 1, 1});
  const RefMetrics m = core_metrics(ep, &ep, 1);
  EXPECT_EQ(m[field("trades")], 1);
  EXPECT_EQ(m[field("turnover")], 1);
  EXPECT_EQ(m[field("avg_holding_steps")], 5);
  EXPECT_EQ(m[field("exposure")], 1);
  EXPECT_DOUBLE_EQ(m[field("cost")], 0.5 / kE0);
  EXPECT_DOUBLE_EQ(m[field("hit_rate")], 3.0 / 5.0);  // the first step lost the cost: 2 of 5 steps lost
  EXPECT_DOUBLE_EQ(m[field("total_return")], eq.back() / kE0 - 1.0);
  EXPECT_DOUBLE_EQ(m[field("corr_reference")], 1.0);  // against itself
  // k = ceil(5 * 5 / 100) = 1: the worst step, -0.5%.
  EXPECT_NEAR(m[field("var95")], 0.005, 1e-12);
  EXPECT_NEAR(m[field("es95")], 0.005, 1e-12);
  // Two stretches under water of one step each: the first step (below E_0 by the cost) and the
  // -0.5% step, recovered by the next.
  EXPECT_EQ(m[field("max_drawdown_steps")], 1);
  expect_core_matches_reference(ep, &ep, 1);
}

TEST(ReportMetrics, AllLossesNeverRecover) {
  std::vector<double> eq;
  double e = kE0;
  for (int t = 0; t < 40; ++t) eq.push_back(e *= 0.99);
  const RefEpisode ep = series(eq, std::vector<double>(40, 1.0));
  const RefMetrics m = core_metrics(ep, nullptr, 1);
  EXPECT_EQ(m[field("hit_rate")], 0.0);
  EXPECT_EQ(m[field("max_drawdown_steps")], 40);  // never recovers: runs to the end
  EXPECT_NEAR(m[field("max_drawdown")], 1.0 - std::pow(0.99, 40), 1e-12);
  EXPECT_NEAR(m[field("total_return")], std::pow(0.99, 40) - 1.0, 1e-12);
  EXPECT_NEAR(m[field("annual_return")], std::pow(0.99, 252) - 1.0, 1e-12);
  EXPECT_EQ(m[field("sharpe")], 0.0);  // constant returns: zero variance
  EXPECT_LT(m[field("sortino")], 0.0);
  EXPECT_NEAR(m[field("sortino")], -std::sqrt(kP), 1e-9);  // mean / downside deviation = -1 per step
  EXPECT_LT(m[field("calmar")], 0.0);
  EXPECT_NEAR(m[field("var95")], 0.01, 1e-12);  // every return is -1%
  EXPECT_NEAR(m[field("es95")], 0.01, 1e-12);
  expect_core_matches_reference(ep, nullptr, 1);
}

TEST(ReportMetrics, DrawdownThatNeverRecovers) {
  // Up for 3 steps to a peak, then down and up again below the peak for 7.
  const RefEpisode ep = series({1010, 1020, 1030, 1000, 990, 1005, 1010, 995, 1000, 1029}, std::vector<double>(10, 1));
  const RefMetrics m = core_metrics(ep, nullptr, 1);
  EXPECT_EQ(m[field("max_drawdown_steps")], 7);
  EXPECT_NEAR(m[field("max_drawdown")], 1.0 - 990.0 / 1030.0, 1e-12);
  EXPECT_NEAR(m[field("calmar")], m[field("annual_return")] / (1.0 - 990.0 / 1030.0), 1e-9);
  expect_core_matches_reference(ep, nullptr, 1);
}

TEST(ReportMetrics, GainsOnlyHaveNoDownside) {
  const RefEpisode ep = series({1001, 1003, 1004, 1010, 1011, 1020}, std::vector<double>(6, 1));
  const RefMetrics m = core_metrics(ep, nullptr, 1);
  EXPECT_TRUE(std::isnan(m[field("sortino")]));  // no losing step: unbounded
  EXPECT_TRUE(std::isnan(m[field("calmar")]));   // no drawdown
  EXPECT_EQ(m[field("max_drawdown")], 0.0);
  EXPECT_EQ(m[field("hit_rate")], 1.0);
  EXPECT_GT(m[field("sharpe")], 0.0);
  EXPECT_LT(m[field("var95")], 0.0);  // the worst step was a gain
  expect_core_matches_reference(ep, nullptr, 1);
}

TEST(ReportMetrics, SpansFlipsAndResizes) {
  // +1 +0.5 (resize: same span) -1 -1 (flip: new span) 0 +0.5 (new span): 5 held steps, 3 spans.
  const RefEpisode ep = series({1000, 1001, 1002, 1001, 1000, 1003}, {1, 0.5, -1, -1, 0, 0.5});
  const RefMetrics m = core_metrics(ep, nullptr, 1);
  EXPECT_DOUBLE_EQ(m[field("avg_holding_steps")], 5.0 / 3.0);
  EXPECT_DOUBLE_EQ(m[field("exposure")], (1 + 0.5 + 1 + 1 + 0 + 0.5) / 6.0);
  EXPECT_EQ(m[field("trades")], 5);
  expect_core_matches_reference(ep, nullptr, 1);
}

TEST(ReportMetrics, AnEarlyEndCutsTheEpisode) {
  RefEpisode ep = series({990, 980, 50, 1e9, 2e9, 3e9}, std::vector<double>(6, 1));
  ep.ended = {0, 0, rl::kTraceTerminated, 0, 0, rl::kTraceTruncated};  // ruined at step 3; a new episode after
  const RefMetrics m = core_metrics(ep, nullptr, 1);
  EXPECT_EQ(m[field("length")], 3);
  EXPECT_EQ(m[field("terminated")], 1);
  EXPECT_DOUBLE_EQ(m[field("total_return")], 50.0 / kE0 - 1.0);
  EXPECT_EQ(m[field("trades")], 1);
  expect_core_matches_reference(ep, nullptr, 1);
}

TEST(ReportMetrics, RandomSeriesMatchTheReference) {
  std::mt19937_64 rng(20261202);
  for (int trial = 0; trial < 200; ++trial) {
    SCOPED_TRACE("trial " + std::to_string(trial));
    const int A = 1 + trial % 3;
    const std::size_t T = 1 + static_cast<std::size_t>(rng() % 300);
    const RefEpisode ep = random_episode(T, A, kE0, 0.01, true, rng);
    const RefEpisode ref = random_episode(T, A, kE0, 0.01, true, rng);
    expect_core_matches_reference(ep, &ref, A);
    expect_core_matches_reference(ep, nullptr, A);
  }
}

}  // namespace
}  // namespace foxhunt::test
