#pragma once
// Device helpers the step kernels share to record a finished episode.
#include "rl/envs/episode_stats.hpp"

namespace foxhunt::rl {

// Plain (non-atomic) update: each accumulator belongs to exactly one thread of a step kernel.
__device__ __forceinline__ void record_episode(EpisodeAccum* acc, double episode_return, double length) {
  acc->episodes += 1.0;
  acc->sum_return += episode_return;
  acc->sum_return_sq += episode_return * episode_return;
  acc->sum_length += length;
}

__device__ __forceinline__ void record_market_episode(EpisodeAccum* acc, double total_return, double sharpe,
                                                      double max_drawdown, double turnover, double trades) {
  acc->sum_total_return += total_return;
  acc->sum_sharpe += sharpe;
  acc->sum_sharpe_sq += sharpe * sharpe;
  acc->sum_max_drawdown += max_drawdown;
  acc->sum_turnover += turnover;
  acc->sum_trades += trades;
}

}  // namespace foxhunt::rl
