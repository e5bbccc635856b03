#include "actors/world_metrics.hpp"

#include <cmath>

namespace foxhunt::actors {

const RankMetrics& RankMetricsTracker::operator()(const ProgressSnapshot& s) {
  const double dt = s.seconds - last_seconds_;
  if (dt > 0) {
    m_.steps_per_s = static_cast<double>(s.counters.env_steps - m_.env_steps) / dt;
    last_seconds_ = s.seconds;
  }
  m_.env_steps = s.counters.env_steps;
  m_.updates = s.updates_done;
  for (const auto& [k, v] : s.scalars)
    if (k == "episode/return" && std::isfinite(v)) {
      m_.episode_return = v;
      m_.has_return = true;
    }
  return m_;
}

Scalars world_scalars(const std::vector<RankMetrics>& ranks) {
  const WorldMetrics w = aggregate(ranks);
  Scalars out{{"world/ranks", w.ranks},
              {"world/env_steps", static_cast<double>(w.env_steps)},
              {"world/updates", static_cast<double>(w.updates)},
              {"world/env_steps_per_s", w.steps_per_s}};
  if (w.ranks_with_return > 0) out.emplace_back("world/episode_return", w.episode_return);
  return out;
}

}  // namespace foxhunt::actors
