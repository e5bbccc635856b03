#pragma once
// Backtest metrics of evaluation episodes, computed on the device from a MarketTrace
// (rl/envs/market.hpp): E environments, one episode each, recorded for T steps.
//
// Episode i is its environment's first episode: steps t = 0 .. L-1, where L <= T is the first
// step whose `ended` flag is set, plus one (L = T when none is). Steps after L belong to a new
// episode after a reset and are not part of it. With E_0 the initial equity (initial_cash) and
// E_t = trace.equity[t-1] the equity after step t (t = 1 .. L):
//   r_t            = E_t / E_{t-1} - 1, or 0 when E_{t-1} <= 0 (the environment's own return)
//   P              = periods per year = 1 / market.dt (252 for the default dt = 1/252)
//   m, v           = sum r_t / L, max(sum r_t^2 / L - m^2, 0) (population moments, one pass, as the
//                    environment's episode statistics compute them)
// and the fields of EpisodeMetrics:
//   length             L
//   terminated         1 when the episode ended by market.min_equity, else 0
//   total_return       E_L / E_0 - 1
//   annual_return      (E_L / E_0)^(P / L) - 1; -1 when E_L <= 0
//   annual_volatility  sqrt(v * P)
//   sharpe             m / sqrt(v) * sqrt(P); 0 when v <= 1e-14 * sum r_t^2 / L (a flat or constant-
//                      return series: the rule of the environment's statistics, so both agree)
//   sortino            m * sqrt(P) / d with the downside deviation d = sqrt(sum min(r_t, 0)^2 / L);
//                      when d = 0 (no losing step): 0 if m = 0, else NaN (unbounded)
//   calmar             annual_return / max_drawdown; when max_drawdown = 0: 0 if annual_return = 0,
//                      else NaN
//   max_drawdown       max_t (1 - E_t / peak_t), peak_t = max(E_0 .. E_t), t = 0 .. L
//   max_drawdown_steps the longest run of consecutive steps with E_t < peak_t (a drawdown that
//                      never recovers runs to L)
//   turnover           sum of trace.turnover (traded notional / equity before trading)
//   trades             sum of trace.trades (per-asset trades of non-zero size)
//   hit_rate           #{t : r_t > 0} / #{t : r_t != 0}; NaN when every r_t = 0 (never exposed)
//   avg_holding_steps  (sum over assets of the steps with weight != 0) / (number of holding spans);
//                      a span is a maximal run of steps in which an asset's weight keeps one non-zero
//                      sign (a resize keeps the span, a flip starts a new one, a span still open at
//                      L counts to L); NaN when nothing was ever held
//   var95, es95        historical, per step (a day at P = 252): with k = ceil(5 L / 100) and r_(1) <=
//                      ... <= r_(L) the sorted returns, var95 = -r_(k) and es95 = -(r_(1) + ... +
//                      r_(k)) / k; positive numbers are losses
//   exposure           mean over the L steps of sum_a |w_{t,a}| (gross weight; |weight| for one asset)
//   corr_reference     Pearson correlation of r_t with the reference's returns (buy-and-hold on the
//                      same paths) over t < min(L, L_ref), two-pass centered moments; NaN without a
//                      reference or when either series has variance <= 1e-14 x its mean square
//   cost               sum of trace.cost / E_0 (fees, spread and slippage)
//   borrow             sum of trace.borrow / E_0
// NaN marks "undefined" (report.json writes null; means over episodes leave such episodes out).
//
// Per-step mean curves (eval_mean_curves): for s = 0 .. T, means over the E episodes of E_s / E_0,
// the drawdown 1 - E_s / peak_s and each asset's weight; row 0 is the start (1, 0, 0...); after an
// episode's end (s > L) it holds its final equity and drawdown with zero weights (the ruined agent
// no longer trades). Reduced with a fixed partition and order: the same bits for the same input.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "rl/envs/market.hpp"

namespace foxhunt::rl {

struct EpisodeMetrics {
  double length;
  double terminated;
  double total_return;
  double annual_return;
  double annual_volatility;
  double sharpe;
  double sortino;
  double calmar;
  double max_drawdown;
  double max_drawdown_steps;
  double turnover;
  double trades;
  double hit_rate;
  double avg_holding_steps;
  double var95;
  double es95;
  double exposure;
  double corr_reference;
  double cost;
  double borrow;
};

// The field names in declaration order (report.json's keys).
inline constexpr const char* kEpisodeMetricNames[] = {"length",
                                                      "terminated",
                                                      "total_return",
                                                      "annual_return",
                                                      "annual_volatility",
                                                      "sharpe",
                                                      "sortino",
                                                      "calmar",
                                                      "max_drawdown",
                                                      "max_drawdown_steps",
                                                      "turnover",
                                                      "trades",
                                                      "hit_rate",
                                                      "avg_holding_steps",
                                                      "var95",
                                                      "es95",
                                                      "exposure",
                                                      "corr_reference",
                                                      "cost",
                                                      "borrow"};
inline constexpr int kEpisodeMetricCount = static_cast<int>(sizeof(kEpisodeMetricNames) / sizeof(char*));
static_assert(sizeof(EpisodeMetrics) == kEpisodeMetricCount * sizeof(double), "one name per field");

struct TraceShape {
  std::int64_t episodes = 0;  // E (the environments of the trace)
  std::int64_t steps = 0;     // T (rows recorded)
  int assets = 1;
  double initial_equity = 1.0;    // E_0 (market.initial_cash)
  double periods_per_year = 252;  // P (1 / market.dt)
};

// Scratch of eval_episode_metrics that eval_mean_curves reads: (T, E) doubles, twice.
std::size_t eval_metrics_workspace_bytes(const TraceShape& shape);

// out (E) <- the metrics of each episode of `trace`. `reference` (nullable) is the trace of the
// reference policy on the same paths (its equity and ended arrays are read). workspace: at least
// eval_metrics_workspace_bytes(shape) bytes; it keeps each episode's normalized equity and
// drawdown per step for eval_mean_curves.
void eval_episode_metrics(EpisodeMetrics* out, void* workspace, const MarketTrace& trace, const MarketTrace* reference,
                          const TraceShape& shape, cudaStream_t stream);

// Columns of a curve row: equity, drawdown, then one weight per asset.
constexpr int curve_columns(int assets) { return 2 + assets; }

// out ((T + 1), curve_columns) <- the mean curves, from the metrics and workspace of the preceding
// eval_episode_metrics call on the same trace.
void eval_mean_curves(double* out, const EpisodeMetrics* metrics, const void* workspace, const MarketTrace& trace,
                      const TraceShape& shape, cudaStream_t stream);

}  // namespace foxhunt::rl
