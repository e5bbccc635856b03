#pragma once
// The metrics of a data-parallel run as one: each rank's progress reports as RankMetrics, and the
// `world/` scalars rank 0 writes from every rank's latest (docs/distributed.md, "The control plane").
#include <vector>

#include "actors/rendezvous.hpp"
#include "actors/runtime.hpp"
#include "actors/stages.hpp"

namespace foxhunt::actors {

// One rank's RankMetrics from its progress snapshots (env steps/s over the last interval).
class RankMetricsTracker {
 public:
  explicit RankMetricsTracker(int rank) { m_.rank = rank; }
  const RankMetrics& operator()(const ProgressSnapshot& s);

 private:
  RankMetrics m_;
  double last_seconds_ = 0;
};

// world/ranks, world/env_steps, world/updates, world/env_steps_per_s and, once any rank has
// finished an episode, world/episode_return: aggregate() of `ranks` (every rank's latest).
Scalars world_scalars(const std::vector<RankMetrics>& ranks);

}  // namespace foxhunt::actors
