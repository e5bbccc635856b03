#pragma once
// ReplayRatio: the replay ratio (learner updates per environment step) enforced by credits, from
// host counts only. The replay actor asks it two questions:
//   may_update(steps, updates_issued): may update number `updates_issued` be sampled now?
//       allowed(steps) = floor(ratio * (steps - learning_starts)) updates once steps >= learning_starts
//   may_collect(steps, updates_done): may a transition slot go back to the collector?
//       only while the learner is at most `slack` updates behind allowed(steps)
// With both, updates / (steps - learning_starts) stays within `slack` updates (plus the slots
// in flight) of `ratio`, whichever side is faster. Neither side can stall the other for good:
// while collection is held, allowed(steps) > updates_issued, so the learner may proceed.
#include <cstdint>
#include <string>

namespace foxhunt::actors {

class ReplayRatio {
 public:
  // ratio > 0; learning_starts >= min_stored (the replay needs a batch before it samples); slack >= 1.
  ReplayRatio(double ratio, std::int64_t learning_starts, std::int64_t slack, std::int64_t min_stored = 1);

  std::int64_t allowed_updates(std::int64_t steps) const;
  bool may_update(std::int64_t steps, std::int64_t updates_issued) const {
    return steps >= min_stored_ && updates_issued < allowed_updates(steps);
  }
  bool may_collect(std::int64_t steps, std::int64_t updates_done) const {
    return allowed_updates(steps) <= updates_done + slack_;
  }
  double ratio() const noexcept { return ratio_; }
  std::int64_t learning_starts() const noexcept { return learning_starts_; }
  std::int64_t slack() const noexcept { return slack_; }

 private:
  double ratio_;
  std::int64_t learning_starts_, slack_, min_stored_;
};

}  // namespace foxhunt::actors
