#include "actors/ratio.hpp"

#include <cmath>
#include <stdexcept>

namespace foxhunt::actors {

ReplayRatio::ReplayRatio(double ratio, std::int64_t learning_starts, std::int64_t slack, std::int64_t min_stored)
    : ratio_(ratio), learning_starts_(learning_starts), slack_(slack), min_stored_(min_stored) {
  if (!(ratio > 0.0) || !std::isfinite(ratio))
    throw std::invalid_argument("replay ratio must be a finite number > 0, got " + std::to_string(ratio));
  if (slack < 1) throw std::invalid_argument("replay ratio slack must be >= 1, got " + std::to_string(slack));
  if (min_stored < 1) throw std::invalid_argument("min_stored must be >= 1, got " + std::to_string(min_stored));
  if (learning_starts < min_stored)
    throw std::invalid_argument("learning_starts (" + std::to_string(learning_starts) +
                                ") must be >= the batch size (" + std::to_string(min_stored) + ")");
}

std::int64_t ReplayRatio::allowed_updates(std::int64_t steps) const {
  if (steps < learning_starts_) return 0;
  // +1: the first update is allowed as soon as learning starts. long double keeps exact integers
  // for any step count a run reaches.
  return 1 + static_cast<std::int64_t>(
                 std::floor(static_cast<long double>(ratio_) * static_cast<long double>(steps - learning_starts_)));
}

}  // namespace foxhunt::actors
