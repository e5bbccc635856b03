#include "actors/pipeline_shared.hpp"

namespace foxhunt::actors {

void Progress::put_scalars(const Scalars& s) {
  std::lock_guard lock(mutex_);
  for (const auto& [k, v] : s) scalars_[k] = v;
}

Scalars Progress::scalars() const {
  std::lock_guard lock(mutex_);
  return {scalars_.begin(), scalars_.end()};
}

Counters Progress::counters() const { return {env_steps.load(), updates_issued.load(), policy_version.load()}; }

}  // namespace foxhunt::actors
