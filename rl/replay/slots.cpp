#include "rl/replay/slots.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace foxhunt::rl {

SlotAllocator::SlotAllocator(std::int64_t capacity, int n_step) : capacity_(capacity), n_step_(n_step) {
  if (capacity <= 0) config_error("replay.capacity", "must be > 0, got " + std::to_string(capacity));
  if (n_step < 1 || n_step > ReplayConfig::kMaxNStep)
    config_error("replay.n_step",
                 "must be in [1, " + std::to_string(ReplayConfig::kMaxNStep) + "], got " + std::to_string(n_step));
}

int SlotAllocator::add_producer(std::int64_t envs) {
  if (envs <= 0) config_error("replay.producer.envs", "must be > 0, got " + std::to_string(envs));
  if (envs > capacity_)
    config_error("replay.producer.envs",
                 "must be <= replay.capacity (" + std::to_string(capacity_) + "), got " + std::to_string(envs));
  producers_.push_back(Producer{envs, 0, {}});
  return static_cast<int>(producers_.size()) - 1;
}

std::int64_t SlotAllocator::producer_envs(int producer) const {
  if (producer < 0 || producer >= num_producers())
    config_error("replay.producer", "must be a registered producer id in [0, " + std::to_string(num_producers()) +
                                        "), got " + std::to_string(producer));
  return producers_[static_cast<std::size_t>(producer)].envs;
}

Reservation SlotAllocator::reserve(int producer, std::int64_t steps) {
  const std::int64_t envs = producer_envs(producer);  // checks the id
  if (steps <= 0) config_error("replay.insert.steps", "must be > 0, got " + std::to_string(steps));
  if (steps > capacity_ / envs)
    config_error("replay.insert.steps", "times envs (" + std::to_string(envs) + ") must be <= replay.capacity (" +
                                            std::to_string(capacity_) + "), got " + std::to_string(steps) + " steps");
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

std::vector<std::int64_t> SlotAllocator::export_state() const {
  std::vector<std::int64_t> w = {head_, static_cast<std::int64_t>(producers_.size())};
  for (const Producer& p : producers_) {
    w.insert(w.end(), {p.envs, p.next_step, static_cast<std::int64_t>(p.recent.size())});
    for (const NStepBlock& b : p.recent) w.insert(w.end(), {b.first_global, b.first_step, b.steps});
  }
  return w;
}

void SlotAllocator::import_state(std::span<const std::int64_t> words) {
  std::size_t at = 0;
  auto bad = [](const std::string& what) -> void { throw std::runtime_error("replay slot state: " + what); };
  auto next = [&](const char* what) {
    if (at >= words.size()) bad(std::string("truncated before ") + what);
    return words[at++];
  };
  const std::int64_t head = next("head");
  if (head < 0) bad("head " + std::to_string(head) + " < 0");
  const std::int64_t count = next("producers");
  if (count != num_producers())
    bad("holds " + std::to_string(count) + " producers, this buffer has " + std::to_string(num_producers()) +
        " registered (register the same producers before loading)");
  std::vector<Producer> producers(producers_.size());
  std::int64_t rows = 0;  // every producer's rows add up to head: each reservation moves head by its rows
  for (std::size_t i = 0; i < producers.size(); ++i) {
    Producer& p = producers[i];
    const std::string who = "producer " + std::to_string(i);
    p.envs = next("producer envs");
    if (p.envs != producers_[i].envs)
      bad(who + " has " + std::to_string(p.envs) + " envs, the registered one " + std::to_string(producers_[i].envs));
    p.next_step = next("producer next_step");
    if (p.next_step < 0) bad(who + " next_step " + std::to_string(p.next_step) + " < 0");
    rows += p.next_step * p.envs;
    const std::int64_t blocks = next("producer blocks");
    if (blocks < 0 || blocks > kMaxNStepBlocks || (blocks == 0) != (p.next_step == 0))
      bad(who + " has " + std::to_string(blocks) + " recent blocks at step " + std::to_string(p.next_step));
    std::int64_t step = -1;
    for (std::int64_t b = 0; b < blocks; ++b) {
      NStepBlock blk;
      blk.first_global = next("block first_global");
      blk.first_step = next("block first_step");
      blk.steps = next("block steps");
      const bool last = b + 1 == blocks;
      if (blk.steps <= 0 || blk.first_step < 0 || blk.first_global < 0 || blk.first_step <= step ||
          blk.first_global + blk.steps * p.envs > head || (last && blk.first_step + blk.steps != p.next_step))
        bad(who + " block " + std::to_string(b) + " (first_global " + std::to_string(blk.first_global) +
            ", first_step " + std::to_string(blk.first_step) + ", steps " + std::to_string(blk.steps) +
            ") is inconsistent");
      step = blk.first_step + blk.steps - 1;
      p.recent.push_back(blk);
    }
  }
  if (at != words.size()) bad(std::to_string(words.size() - at) + " trailing words");
  if (rows != head) bad("producers' rows add up to " + std::to_string(rows) + ", head is " + std::to_string(head));
  head_ = head;
  producers_ = std::move(producers);
}

}  // namespace foxhunt::rl
