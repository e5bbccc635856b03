#pragma once
// Host-side slot bookkeeping of the ring, by counts only: which slots an insert occupies, how
// full the ring is, and for each producer the recent blocks an n-step window may reach back into.
// Nothing here reads a device value; the device kernels get the result by value.
//
// Slots: every inserted row gets a global position g (0, 1, 2, ... across all producers, in the
// order of reserve() calls); its slot is g % capacity. A row at g is still stored while
// g >= head - capacity.
// Producer time: producer p inserts blocks of (steps, envs) rows, time-major (row = t * envs + e).
// Its steps are numbered 0, 1, 2, ... across its blocks, so step tau of env e lives in the block
// holding tau at row (tau - block.first_step) * envs + e.
#include <cstdint>
#include <deque>
#include <span>
#include <vector>

#include "rl/replay/config.hpp"

namespace foxhunt::rl {

struct NStepBlock {
  std::int64_t first_global = 0;  // global position of the block's row 0
  std::int64_t first_step = 0;    // producer step of the block's first time row
  std::int64_t steps = 0;
};

// n-1 older blocks (each at least one step) plus the new one.
inline constexpr int kMaxNStepBlocks = ReplayConfig::kMaxNStep;

// What the n-step kernel needs for one insert: the producer's blocks in step order (the last is
// the new one), the steps whose returns are (re)computed, and which rows are still stored.
struct NStepWindow {
  NStepBlock blocks[kMaxNStepBlocks];
  int num_blocks = 0;
  std::int64_t envs = 0;
  std::int64_t step_begin = 0;            // first step (re)computed: new block start - (n - 1), clipped
  std::int64_t step_end = 0;              // one past the newest step (the window is cut here for now)
  std::int64_t new_first_step = 0;        // steps from here are read from the inserted batch
  std::int64_t oldest_stored_global = 0;  // head - capacity after this insert (rows below are gone)
};

struct Reservation {
  int producer = 0;
  std::int64_t first_global = 0;  // global position of row 0
  std::int64_t rows = 0;          // steps * envs
  std::int64_t steps = 0;
  std::int64_t envs = 0;
  std::int64_t filled_after = 0;  // stored transitions after this insert: min(head, capacity)
  NStepWindow window;
};

class SlotAllocator {
 public:
  SlotAllocator(std::int64_t capacity, int n_step);

  // A producer inserts blocks of (steps, envs) rows with a fixed env count; returns its id.
  int add_producer(std::int64_t envs);
  // Takes the next steps * envs slots for `producer`. Throws std::invalid_argument naming the key
  // (replay.producer, replay.insert.steps) on a bad producer id or a block larger than the ring.
  Reservation reserve(int producer, std::int64_t steps);

  std::int64_t capacity() const noexcept { return capacity_; }
  std::int64_t head() const noexcept { return head_; }  // rows ever reserved
  std::int64_t filled() const noexcept { return head_ < capacity_ ? head_ : capacity_; }
  int num_producers() const noexcept { return static_cast<int>(producers_.size()); }
  std::int64_t producer_envs(int producer) const;

  // Checkpoints: the whole host state as int64 words,
  //   [head, producers, then per producer: envs, next_step, blocks, blocks x (first_global,
  //    first_step, steps)].
  std::vector<std::int64_t> export_state() const;
  // Replaces the state with exported words. The same producers (count and env counts, in order)
  // must be registered here. Throws std::runtime_error naming the inconsistency and changes
  // nothing when the words do not describe a state of this allocator.
  void import_state(std::span<const std::int64_t> words);

 private:
  struct Producer {
    std::int64_t envs = 0;
    std::int64_t next_step = 0;
    std::deque<NStepBlock> recent;  // blocks that hold the last n-1 steps
  };
  std::int64_t capacity_;
  int n_step_;
  std::int64_t head_ = 0;
  std::vector<Producer> producers_;
};

}  // namespace foxhunt::rl
