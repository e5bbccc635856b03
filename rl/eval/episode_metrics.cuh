#pragma once
// The metrics of one episode (definitions in rl/eval/metrics.hpp), as one __host__ __device__
// function: the kernel runs it per thread and the CPU tests call it directly, so host and device
// share one implementation (they agree to rounding: the device may contract a*b+c into an FMA).
// It walks its episode's T recorded steps in a few passes: the running sums, the centered moments
// of the correlation, then the historical VaR by bisection on the order of the returns (an exact
// k-th smallest with no per-thread sort buffer: at most 64 passes over the episode).
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "rl/eval/metrics.hpp"

namespace foxhunt::rl::eval_detail {

__host__ __device__ inline double step_return(double e, double e_prev) { return e_prev > 0.0 ? e / e_prev - 1.0 : 0.0; }

// A total order of doubles as unsigned integers (NaN aside): negatives reversed below positives.
__host__ __device__ inline std::uint64_t order_key(double x) {
  std::uint64_t b;
  memcpy(&b, &x, sizeof b);
  return (b >> 63) ? ~b : (b | (std::uint64_t{1} << 63));
}
__host__ __device__ inline double from_order_key(std::uint64_t k) {
  const std::uint64_t b = (k >> 63) ? (k & ~(std::uint64_t{1} << 63)) : ~k;
  double x;
  memcpy(&x, &b, sizeof x);
  return x;
}

__host__ __device__ inline double undefined() { return std::numeric_limits<double>::quiet_NaN(); }

// num / den; when den is 0: 0 if num is 0 too, else undefined (NaN).
__host__ __device__ inline double ratio_or_nan(double num, double den) {
  if (den > 0.0) return num / den;
  return num == 0.0 ? 0.0 : undefined();
}

// Episode i of `tr` ((T, E) arrays, E = shape.episodes). ref_equity / ref_ended (nullable): the
// reference trace's arrays of the same layout. ws_equity / ws_drawdown (nullable, (T, E)): the
// normalized equity and drawdown of steps 0 .. L-1 are written there for the mean curves.
__host__ __device__ inline EpisodeMetrics episode_metrics(const MarketTrace& tr, const double* ref_equity,
                                                          const std::uint8_t* ref_ended, std::int64_t i,
                                                          const TraceShape& shape, double* ws_equity,
                                                          double* ws_drawdown) {
  const std::int64_t E = shape.episodes, T = shape.steps;
  const int A = shape.assets;
  const double e0 = shape.initial_equity;

  // Pass 1: everything that is a running sum, and the overlap with the reference.
  double e_prev = e0, peak = e0;
  double sum_r = 0.0, sum_r2 = 0.0, sum_down2 = 0.0;
  double mdd = 0.0, turnover = 0.0, cost = 0.0, borrow = 0.0, exposure = 0.0;
  std::int64_t L = 0, positive = 0, nonzero = 0, dd_run = 0, dd_longest = 0, trades = 0, held = 0, spans = 0;
  int terminated = 0;
  signed char sign[kMaxAssets];
  for (int a = 0; a < kMaxAssets; ++a) sign[a] = 0;
  bool ref_alive = ref_equity != nullptr;
  double ref_prev = e0, sum_x = 0.0, sum_y = 0.0, sum_x2 = 0.0, sum_y2 = 0.0;
  std::int64_t overlap = 0;
  for (std::int64_t t = 0; t < T; ++t) {
    const std::int64_t ix = t * E + i;
    const double e = tr.equity[ix];
    const double r = step_return(e, e_prev);
    sum_r += r;
    sum_r2 += r * r;
    if (r < 0.0) sum_down2 += r * r;
    if (r > 0.0) ++positive;
    if (r != 0.0) ++nonzero;
    peak = fmax(peak, e);
    const double dd = peak > 0.0 ? 1.0 - e / peak : 0.0;
    mdd = fmax(mdd, dd);
    dd_run = e < peak ? dd_run + 1 : 0;
    dd_longest = dd_run > dd_longest ? dd_run : dd_longest;
    turnover += tr.turnover[ix];
    trades += tr.trades[ix];
    cost += tr.cost[ix];
    borrow += tr.borrow[ix];
    double gross = 0.0;
    for (int a = 0; a < A; ++a) {
      const float w = tr.weight[ix * A + a];
      gross += fabs(static_cast<double>(w));
      const signed char s = w > 0.0f ? 1 : (w < 0.0f ? -1 : 0);
      if (s != 0) {
        ++held;
        if (s != sign[a]) ++spans;
      }
      sign[a] = s;
    }
    exposure += gross;
    if (ws_equity != nullptr) ws_equity[ix] = e / e0;
    if (ws_drawdown != nullptr) ws_drawdown[ix] = dd;
    if (ref_alive) {
      const double re = ref_equity[ix];
      const double y = step_return(re, ref_prev);
      sum_x += r;
      sum_y += y;
      sum_x2 += r * r;
      sum_y2 += y * y;
      ++overlap;
      ref_prev = re;
      if (ref_ended[ix] != 0) ref_alive = false;
    }
    e_prev = e;
    L = t + 1;
    const std::uint8_t end = tr.ended[ix];
    if (end != 0) {
      terminated = end == kTraceTerminated;
      break;
    }
  }

  EpisodeMetrics m;
  const double len = static_cast<double>(L);
  const double P = shape.periods_per_year, ann = sqrt(P);
  const double mean = sum_r / len;
  const double var_raw = sum_r2 / len - mean * mean;
  const double var = fmax(var_raw, 0.0);
  m.length = len;
  m.terminated = terminated;
  m.total_return = e_prev / e0 - 1.0;
  m.annual_return = e_prev > 0.0 ? pow(e_prev / e0, P / len) - 1.0 : -1.0;
  m.annual_volatility = sqrt(var * P);
  m.sharpe = var_raw > 1e-14 * (sum_r2 / len) && var_raw > 0.0 ? mean / sqrt(var_raw) * ann : 0.0;
  m.sortino = ratio_or_nan(mean * ann, sqrt(sum_down2 / len));
  m.max_drawdown = mdd;
  m.calmar = ratio_or_nan(m.annual_return, mdd);
  m.max_drawdown_steps = static_cast<double>(dd_longest);
  m.turnover = turnover;
  m.trades = static_cast<double>(trades);
  m.hit_rate = nonzero > 0 ? static_cast<double>(positive) / static_cast<double>(nonzero) : undefined();
  m.avg_holding_steps = spans > 0 ? static_cast<double>(held) / static_cast<double>(spans) : undefined();
  m.exposure = exposure / len;
  m.cost = cost / e0;
  m.borrow = borrow / e0;

  // Pass 2: the correlation from centered moments over the overlap.
  m.corr_reference = undefined();
  if (overlap > 0) {
    const double n = static_cast<double>(overlap);
    const double mx = sum_x / n, my = sum_y / n;
    double sxx = 0.0, syy = 0.0, sxy = 0.0, xp = e0, yp = e0;
    for (std::int64_t t = 0; t < overlap; ++t) {
      const std::int64_t ix = t * E + i;
      const double xe = tr.equity[ix], ye = ref_equity[ix];
      const double dx = step_return(xe, xp) - mx, dy = step_return(ye, yp) - my;
      sxx += dx * dx;
      syy += dy * dy;
      sxy += dx * dy;
      xp = xe;
      yp = ye;
    }
    if (sxx > 1e-14 * sum_x2 && syy > 1e-14 * sum_y2) m.corr_reference = sxy / sqrt(sxx * syy);
  }

  // Pass 3: r_(k), the k-th smallest return, k = ceil(5 L / 100): the smallest order key with at
  // least k returns at or below it.
  const std::int64_t k = (5 * L + 99) / 100;
  std::uint64_t lo = 0, hi = ~std::uint64_t{0};
  while (lo < hi) {
    const std::uint64_t mid = lo + (hi - lo) / 2;
    std::int64_t count = 0;
    double p = e0;
    for (std::int64_t t = 0; t < L; ++t) {
      const double e = tr.equity[t * E + i];
      count += order_key(step_return(e, p)) <= mid ? 1 : 0;
      p = e;
    }
    if (count >= k)
      hi = mid;
    else
      lo = mid + 1;
  }
  const double rk = from_order_key(lo);
  double tail_sum = 0.0;
  std::int64_t below = 0;
  double p = e0;
  for (std::int64_t t = 0; t < L; ++t) {
    const double e = tr.equity[t * E + i];
    const double r = step_return(e, p);
    if (order_key(r) < lo) {
      tail_sum += r;
      ++below;
    }
    p = e;
  }
  tail_sum += static_cast<double>(k - below) * rk;  // ties at r_(k) fill the k worst
  m.var95 = -rk;
  m.es95 = -tail_sum / static_cast<double>(k);
  return m;
}

}  // namespace foxhunt::rl::eval_detail
