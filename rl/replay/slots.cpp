#include "rl/replay/slots.hpp"

#include <algorithm>
#include <string>

namespace foxhunt::rl {

SlotAllocator::SlotAllocator(std::int64_t capacity, int n_step) : capacity_(capacity), n_step_(n_step) {
  if (capacity <= 0) config_error("replay.capacity", "must be > 0, got " + std::to_string(capacity));
  if (n_step < 1 || n_step > ReplayConfig::kMaxNStep)
    config_error("replay.n_step", "must be in [1, " + std::to_string(ReplayConfig::kMaxNStep) + "], got " +
                                      std::to_string(n_step));
}

int SlotAllocator::add_producer(std::int64_t envs) {
  if (envs <= 0) config_error("replay.producer.envs", "must be > 0, got " + std::to_string(envs));
  if (envs > capacity_)
    config_error("replay.producer.envs", "must be <= replay.capacity (" + std::to_string(capacity_) +
                                             "), got " + std::to_string(envs));
  producers_.push_back(Producer{envs, 0, {}});
  return static_cast<int>(producers_.size()) - 1;
}

std::int64_t SlotAllocator::producer_envs(int producer) const {
  if (producer < 0 || producer >= num_producers())
    config_error("replay.producer", "must be a registered producer id in [0, " +
                                        std::to_string(num_producers()) + "), got " + std::to_string(producer));
  return producers_[static_cast<std::size_t>(producer)].envs;
}

Reservation SlotAllocator::reserve(int producer, std::int64_t steps) {
  const std::int64_t envs = producer_envs(producer);  // checks the id
  if (steps <= 0) config_error("replay.insert.steps", "must be > 0, got " + std::to_string(steps));
  if (steps > capacity_ / envs)
    config_error("replay.insert.steps", "times envs (" + std::to_string(envs) +
                                            ") must be <= replay.capacity (" + std::to_string(capacity_) +
                                            "), got " + std::to_string(steps) + " steps");
  Producer& p = producers_[static_cast<std::size_t>(producer)];

  Reservation r;
  r.producer = producer;
  r.first_global = head_;
  r.rows = steps * envs;
  r.steps = steps;
  r.envs = envs;
  head_ += r.rows;
  r.filled_after = filled();

  const std::int64_t t0 = p.next_step;
  p.recent.push_back(NStepBlock{r.first_global, t0, steps});
  p.next_step += steps;

  // Keep the blocks that hold steps >= t0 - (n - 1): the older steps whose windows reach into the
  // new block. Each kept older block holds at least one of those n - 1 steps, so at most n - 1 of
  // them stay, plus the new block.
  const std::int64_t reach_back = t0 - (n_step_ - 1);
  while (p.recent.size() > 1 && p.recent.front().first_step + p.recent.front().steps <= reach_back)
    p.recent.pop_front();

  NStepWindow& w = r.window;
  w.num_blocks = static_cast<int>(p.recent.size());
  for (int b = 0; b < w.num_blocks; ++b) w.blocks[b] = p.recent[static_cast<std::size_t>(b)];
  w.envs = envs;
  w.step_begin = std::max(reach_back, p.recent.front().first_step);
  w.step_end = p.next_step;
  w.new_first_step = t0;
  w.oldest_stored_global = head_ - capacity_;
  return r;
}

}  // namespace foxhunt::rl
