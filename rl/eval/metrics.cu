// Backtest metrics: one thread per episode runs eval_detail::episode_metrics over its T recorded
// steps (the (T, E) layout makes each step's reads coalesced across the threads of a block). The
// mean curves are one block per step, a fixed strided partition and a shared-memory tree per column.
#include "rl/eval/metrics.hpp"

#include <cmath>
#include <string>

#include "gpu/check.hpp"
#include "gpu/launch.cuh"
#include "rl/eval/episode_metrics.cuh"

namespace foxhunt::rl {
namespace {

constexpr int kEpisodeBlock = 128;
constexpr int kCurveThreads = 256;

__global__ void __launch_bounds__(kEpisodeBlock)
    episode_metrics_kernel(EpisodeMetrics* out, double* ws_equity, double* ws_drawdown, MarketTrace tr,
                           const double* ref_equity, const std::uint8_t* ref_ended, TraceShape shape) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= shape.episodes) return;
  out[i] = eval_detail::episode_metrics(tr, ref_equity, ref_ended, i, shape, ws_equity, ws_drawdown);
}

__global__ void __launch_bounds__(kCurveThreads)
    mean_curves_kernel(double* out, const EpisodeMetrics* metrics, const double* ws_equity, const double* ws_drawdown,
                       const float* weight, TraceShape shape) {
  __shared__ double sh[kCurveThreads];
  const std::int64_t E = shape.episodes;
  const int A = shape.assets, C = curve_columns(A);
  const std::int64_t s = blockIdx.x;  // curve row: 0 = start, s = after step s - 1
  for (int c = 0; c < C; ++c) {
    double acc = 0.0;
    for (std::int64_t i = threadIdx.x; i < E; i += kCurveThreads) {
      double v;
      if (s == 0) {
        v = c == 0 ? 1.0 : 0.0;
      } else {
        const auto L = static_cast<std::int64_t>(metrics[i].length);
        const bool live = s - 1 < L;
        const std::int64_t t = live ? s - 1 : L - 1;  // after the end: the final state
        if (c == 0)
          v = ws_equity[t * E + i];
        else if (c == 1)
          v = ws_drawdown[t * E + i];
        else
          v = live ? static_cast<double>(weight[(t * E + i) * A + (c - 2)]) : 0.0;
      }
      acc += v;
    }
    sh[threadIdx.x] = acc;
    __syncthreads();
    for (int stride = kCurveThreads / 2; stride > 0; stride /= 2) {
      if (static_cast<int>(threadIdx.x) < stride) sh[threadIdx.x] += sh[threadIdx.x + stride];
      __syncthreads();
    }
    if (threadIdx.x == 0) out[s * C + c] = sh[0] / static_cast<double>(E);
    __syncthreads();  // sh is reused by the next column
  }
}

void check_shape(const TraceShape& shape, const MarketTrace& trace, const char* who) {
  FH_EXPECT(shape.episodes >= 1, std::string(who) + ": episodes must be >= 1");
  FH_EXPECT(shape.steps >= 1 && shape.steps <= trace.steps, std::string(who) + ": steps must be in [1, trace.steps]");
  FH_EXPECT(shape.assets >= 1 && shape.assets <= kMaxAssets,
            std::string(who) + ": assets must be in [1, " + std::to_string(kMaxAssets) + "]");
  FH_EXPECT(shape.initial_equity > 0.0 && shape.periods_per_year > 0.0,
            std::string(who) + ": initial_equity and periods_per_year must be > 0");
}

}  // namespace

std::size_t eval_metrics_workspace_bytes(const TraceShape& shape) {
  return 2 * sizeof(double) * static_cast<std::size_t>(shape.steps) * static_cast<std::size_t>(shape.episodes);
}

void eval_episode_metrics(EpisodeMetrics* out, void* workspace, const MarketTrace& trace, const MarketTrace* reference,
                          const TraceShape& shape, cudaStream_t stream) {
  check_shape(shape, trace, "eval_episode_metrics");
  FH_EXPECT(out != nullptr && workspace != nullptr, "eval_episode_metrics: out and workspace must be device pointers");
  FH_EXPECT(trace.equity && trace.cost && trace.borrow && trace.turnover && trace.weight && trace.trades && trace.ended,
            "eval_episode_metrics: every trace array must be set");
  FH_EXPECT(reference == nullptr || (reference->steps >= shape.steps && reference->equity && reference->ended),
            "eval_episode_metrics: the reference trace needs equity and ended for `steps` rows");
  auto* ws = static_cast<double*>(workspace);
  const std::int64_t te = shape.steps * shape.episodes;
  episode_metrics_kernel<<<gpu::ceil_div(shape.episodes, kEpisodeBlock), kEpisodeBlock, 0, stream>>>(
      out, ws, ws + te, trace, reference ? reference->equity : nullptr, reference ? reference->ended : nullptr, shape);
  FH_CHECK_LAUNCH();
}

void eval_mean_curves(double* out, const EpisodeMetrics* metrics, const void* workspace, const MarketTrace& trace,
                      const TraceShape& shape, cudaStream_t stream) {
  check_shape(shape, trace, "eval_mean_curves");
  FH_EXPECT(out != nullptr && metrics != nullptr && workspace != nullptr && trace.weight != nullptr,
            "eval_mean_curves: out, metrics, workspace and trace.weight must be device pointers");
  const auto* ws = static_cast<const double*>(workspace);
  const std::int64_t te = shape.steps * shape.episodes;
  mean_curves_kernel<<<static_cast<unsigned>(shape.steps + 1), kCurveThreads, 0, stream>>>(out, metrics, ws, ws + te,
                                                                                           trace.weight, shape);
  FH_CHECK_LAUNCH();
}

}  // namespace foxhunt::rl
