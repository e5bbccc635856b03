#pragma once
// A float64 reference of the episode metrics of rl/eval/metrics.hpp, written independently of
// rl/eval/episode_metrics.cuh (vectors, std::sort for the VaR, explicit span bookkeeping), for the
// CPU tests (tests/report/metrics_test.cpp) and the device tests (tests/rl/eval_metrics_test.cu).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "rl/envs/market.hpp"
#include "rl/eval/metrics.hpp"

namespace foxhunt::test {

// One episode as the trace records it: values after each of T steps.
struct RefEpisode {
  std::vector<double> equity, cost, borrow, turnover;
  std::vector<std::vector<double>> weight;  // [t][asset]
  std::vector<int> trades;
  std::vector<int> ended;  // 0, rl::kTraceTruncated or rl::kTraceTerminated
  std::size_t steps() const { return equity.size(); }
};

using RefMetrics = std::array<double, rl::kEpisodeMetricCount>;

inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

inline std::size_t ref_length(const RefEpisode& ep) {
  for (std::size_t t = 0; t < ep.steps(); ++t)
    if (ep.ended[t] != 0) return t + 1;
  return ep.steps();
}

inline std::vector<double> ref_returns(const std::vector<double>& equity, std::size_t L, double e0) {
  std::vector<double> r(L);
  double prev = e0;
  for (std::size_t t = 0; t < L; ++t) {
    r[t] = prev > 0.0 ? equity[t] / prev - 1.0 : 0.0;
    prev = equity[t];
  }
  return r;
}

// Metrics in rl::EpisodeMetrics field order. `ref`: the reference episode (nullable).
inline RefMetrics reference_metrics(const RefEpisode& ep, const RefEpisode* ref, double e0, double P) {
  RefMetrics m{};
  const std::size_t L = ref_length(ep);
  const double n = static_cast<double>(L);
  const std::vector<double> r = ref_returns(ep.equity, L, e0);
  const double eL = ep.equity[L - 1];
  double s1 = 0, s2 = 0, down = 0;
  for (double x : r) {
    s1 += x;
    s2 += x * x;
    down += x < 0 ? x * x : 0.0;
  }
  const double mean = s1 / n, var = s2 / n - mean * mean;
  const double total = eL / e0 - 1.0;
  const double annual = eL > 0 ? std::pow(eL / e0, P / n) - 1.0 : -1.0;
  // Drawdown and its longest stretch under water.
  double peak = e0, mdd = 0;
  std::size_t run = 0, longest = 0;
  for (std::size_t t = 0; t < L; ++t) {
    peak = std::max(peak, ep.equity[t]);
    mdd = std::max(mdd, peak > 0 ? 1.0 - ep.equity[t] / peak : 0.0);
    run = ep.equity[t] < peak ? run + 1 : 0;
    longest = std::max(longest, run);
  }
  // Holding spans per asset.
  const std::size_t A = ep.weight.empty() ? 0 : ep.weight[0].size();
  double held = 0, spans = 0, exposure = 0;
  for (std::size_t a = 0; a < A; ++a) {
    int prev = 0;
    for (std::size_t t = 0; t < L; ++t) {
      const double w = static_cast<float>(ep.weight[t][a]);  // the trace stores f32
      const int s = w > 0 ? 1 : (w < 0 ? -1 : 0);
      if (s != 0) held += 1;
      if (s != 0 && s != prev) spans += 1;
      prev = s;
    }
  }
  for (std::size_t t = 0; t < L; ++t)
    for (std::size_t a = 0; a < A; ++a) exposure += std::abs(static_cast<double>(static_cast<float>(ep.weight[t][a])));
  double turnover = 0, trades = 0, cost = 0, borrow = 0, pos = 0, nonzero = 0;
  for (std::size_t t = 0; t < L; ++t) {
    turnover += ep.turnover[t];
    trades += ep.trades[t];
    cost += ep.cost[t];
    borrow += ep.borrow[t];
  }
  for (double x : r) {
    pos += x > 0;
    nonzero += x != 0;
  }
  // Historical VaR / ES at 95%: the k = ceil(0.05 L) worst returns.
  std::vector<double> sorted = r;
  std::sort(sorted.begin(), sorted.end());
  const std::size_t k = (5 * L + 99) / 100;
  double worst = 0;
  for (std::size_t j = 0; j < k; ++j) worst += sorted[j];
  // Correlation to the reference over the steps both are in their first episode.
  double corr = kNaN;
  if (ref != nullptr) {
    const std::size_t overlap = std::min(L, ref_length(*ref));
    const std::vector<double> x = ref_returns(ep.equity, overlap, e0), y = ref_returns(ref->equity, overlap, e0);
    double mx = 0, my = 0, x2 = 0, y2 = 0;
    for (std::size_t t = 0; t < overlap; ++t) {
      mx += x[t];
      my += y[t];
      x2 += x[t] * x[t];
      y2 += y[t] * y[t];
    }
    mx /= static_cast<double>(overlap);
    my /= static_cast<double>(overlap);
    double sxx = 0, syy = 0, sxy = 0;
    for (std::size_t t = 0; t < overlap; ++t) {
      sxx += (x[t] - mx) * (x[t] - mx);
      syy += (y[t] - my) * (y[t] - my);
      sxy += (x[t] - mx) * (y[t] - my);
    }
    if (sxx > 1e-14 * x2 && syy > 1e-14 * y2) corr = sxy / std::sqrt(sxx * syy);
  }
  const double dd = std::sqrt(down / n);
  m[0] = n;
  m[1] = ep.ended[L - 1] == rl::kTraceTerminated ? 1.0 : 0.0;
  m[2] = total;
  m[3] = annual;
  m[4] = std::sqrt(std::max(var, 0.0) * P);
  m[5] = var > 1e-14 * (s2 / n) && var > 0 ? mean / std::sqrt(var) * std::sqrt(P) : 0.0;
  m[6] = dd > 0 ? mean * std::sqrt(P) / dd : (mean == 0 ? 0.0 : kNaN);
  m[7] = mdd > 0 ? annual / mdd : (annual == 0 ? 0.0 : kNaN);
  m[8] = mdd;
  m[9] = static_cast<double>(longest);
  m[10] = turnover;
  m[11] = trades;
  m[12] = nonzero > 0 ? pos / nonzero : kNaN;
  m[13] = spans > 0 ? held / spans : kNaN;
  m[14] = -sorted[k - 1];
  m[15] = -worst / static_cast<double>(k);
  m[16] = exposure / n;
  m[17] = corr;
  m[18] = cost / e0;
  m[19] = borrow / e0;
  return m;
}

// Episodes laid out as a trace: (T, E) arrays, weights (T, E, A). All episodes have T steps.
struct HostTrace {
  std::int64_t E = 0, T = 0;
  int A = 1;
  std::vector<double> equity, cost, borrow, turnover;
  std::vector<float> weight;
  std::vector<std::int32_t> trades;
  std::vector<std::uint8_t> ended;

  HostTrace(const std::vector<RefEpisode>& eps, int assets) : E(static_cast<std::int64_t>(eps.size())), A(assets) {
    T = eps.empty() ? 0 : static_cast<std::int64_t>(eps[0].steps());
    const auto te = static_cast<std::size_t>(E * T);
    equity.resize(te);
    cost.resize(te);
    borrow.resize(te);
    turnover.resize(te);
    weight.resize(te * static_cast<std::size_t>(A));
    trades.resize(te);
    ended.resize(te);
    for (std::int64_t i = 0; i < E; ++i)
      for (std::int64_t t = 0; t < T; ++t) {
        const std::size_t ix = static_cast<std::size_t>(t * E + i);
        const RefEpisode& ep = eps[static_cast<std::size_t>(i)];
        equity[ix] = ep.equity[t];
        cost[ix] = ep.cost[t];
        borrow[ix] = ep.borrow[t];
        turnover[ix] = ep.turnover[t];
        trades[ix] = ep.trades[t];
        ended[ix] = static_cast<std::uint8_t>(ep.ended[t]);
        for (int a = 0; a < A; ++a) weight[ix * A + a] = static_cast<float>(ep.weight[t][a]);
      }
  }
  // A view of host memory (for the host path of rl/eval/episode_metrics.cuh).
  rl::MarketTrace view() {
    return {T, equity.data(), cost.data(), borrow.data(), turnover.data(), weight.data(), trades.data(), ended.data()};
  }
};

// A random episode: log-normal steps of `vol` with gaps of no change, random weights (zeros, flips
// and resizes), occasional early ends when `ends` is set.
inline RefEpisode random_episode(std::size_t T, int A, double e0, double vol, bool ends, std::mt19937_64& rng) {
  std::normal_distribution<double> z(0.0, 1.0);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  RefEpisode ep;
  double e = e0;
  std::vector<double> w(static_cast<std::size_t>(A), 0.0);
  const std::size_t end_at = ends && u(rng) < 0.3 ? 1 + static_cast<std::size_t>(u(rng) * (T - 1)) : T;
  for (std::size_t t = 0; t < T; ++t) {
    int traded = 0;
    for (auto& x : w) {
      const double p = u(rng);
      if (p < 0.1) {
        x = 0.0;
        ++traded;
      } else if (p < 0.25) {
        x = std::round((u(rng) * 2.0 - 1.0) * 4.0) / 4.0;
        ++traded;
      }
    }
    double gross = 0;
    for (double x : w) gross += std::abs(x);
    const double r = gross > 0 ? std::exp(vol * z(rng)) - 1.0 : 0.0;
    e *= 1.0 + r;
    ep.equity.push_back(e);
    ep.cost.push_back(traded * 10.0 * u(rng));
    ep.borrow.push_back(u(rng) < 0.2 ? u(rng) : 0.0);
    ep.turnover.push_back(traded * u(rng));
    ep.trades.push_back(traded);
    ep.weight.push_back(w);
    ep.ended.push_back(t + 1 == end_at && end_at < T ? rl::kTraceTerminated : (t + 1 == T ? rl::kTraceTruncated : 0));
  }
  return ep;
}

}  // namespace foxhunt::test
