#pragma once
// Episode statistics on the device. Each environment owns one EpisodeAccum that its step kernel
// updates when one of its episodes ends (a plain read-modify-write by the owning thread: no
// atomics, so the sums are deterministic). episode_stats_reduce folds the N accumulators into
// one EpisodeStats with a fixed partition and a fixed reduction order, then the struct leaves the
// device through gpu::ExitSlot (VecEnv::export_stats).
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace foxhunt::rl {

// Per-environment running sums over finished episodes.
struct EpisodeAccum {
  double episodes;
  double sum_return;  // episode return = sum of rewards
  double sum_return_sq;
  double sum_length;  // steps
  // Markets (zero for other environments):
  double sum_total_return;  // equity_end / equity_start - 1
  double sum_sharpe;        // annualized Sharpe of the episode's per-step returns
  double sum_sharpe_sq;
  double sum_max_drawdown;  // fraction of the running peak
  double sum_turnover;      // traded notional / equity, summed over steps
  double sum_trades;        // per-asset trades with non-zero size
};

// What leaves the device: means over the episodes finished since the last clear.
// All means are 0 when episodes == 0.
struct EpisodeStats {
  double episodes;
  double mean_return;
  double std_return;  // population standard deviation over episodes
  double mean_length;
  double mean_total_return;
  double mean_sharpe;
  double std_sharpe;
  double mean_max_drawdown;
  double mean_turnover;
  double mean_trades;
};

// The fields by name, in declaration order (the eval report, the Python API's dicts).
std::vector<std::pair<std::string, double>> named_fields(const EpisodeStats& s);

// Workspace for episode_stats_reduce (partial sums of the fixed partition).
std::size_t episode_stats_workspace_bytes();

// out (1) <- reduction of accum (n). `clear` zeroes the accumulators after reading them.
void episode_stats_reduce(EpisodeStats* out, EpisodeAccum* accum, std::int64_t n, bool clear, void* workspace,
                          std::size_t workspace_bytes, cudaStream_t stream);

}  // namespace foxhunt::rl
