#pragma once
// ReplayBuffer: prioritized (or uniform) experience replay that lives on the device.
//
// The host knows counts only: how many slots each insert takes (reserved here, by producer),
// how full the ring is, how many steps have passed. Values (priorities, the running max priority,
// the priority total and min, sampled indices and weights) never leave the device: no operation
// here performs a device-to-host copy.
//
// Ordering: every operation is enqueued on the stream it is given and assumes the previous
// replay operations are ordered before it (use one stream, e.g. the replay actor's, and make it
// wait on the collector's / learner's events). Not thread-safe: one owner calls it.
//
//   ReplayBuffer rb(cfg, stream);
//   int p = rb.add_producer(num_envs);
//   rb.insert(p, batch, stream);                 // (steps, envs) block from the collector
//   auto out = rb.allocate_batch();
//   rb.sample(out.view(), step, stream);         // indices, weights, obs, actions, returns, ...
//   rb.update_priorities(out.view().indices, td_errors, out.batch(), stream);
#include <cuda_runtime.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include "gpu/buffer.hpp"
#include "rl/replay/config.hpp"
#include "rl/replay/priority_tree.hpp"
#include "rl/replay/ring.hpp"
#include "rl/replay/slots.hpp"
#include "rl/replay/state.hpp"
#include "rl/replay/transition_batch.hpp"

namespace foxhunt::rl {

class ReplayBuffer {
 public:
  // Validates `config` (std::invalid_argument naming the key, including a capacity that does not
  // fit the current device's free memory), allocates and initialises on `stream`.
  explicit ReplayBuffer(const ReplayConfig& config, cudaStream_t stream = nullptr);

  const ReplayConfig& config() const noexcept { return config_; }

  // Registers a producer that inserts (steps, envs) blocks with this env count; returns its id.
  int add_producer(std::int64_t envs);

  // Inserts producer `producer`'s block: reserves steps * envs slots by count and enqueues one
  // kernel. Throws std::invalid_argument on a layout or env-count mismatch (naming the key).
  // The batch's device buffers must stay valid until the work on `stream` has run.
  void insert(int producer, const TransitionBatch& batch, cudaStream_t stream);

  // Samples out.batch transitions; beta from the schedule at host step `step`.
  // Throws std::invalid_argument when out.batch exceeds the stored size (a host count).
  void sample(const SampledBatchView& out, std::int64_t step, cudaStream_t stream);
  // Same, with beta scheduled from the device count of sample calls: safe to capture in a CUDA
  // graph and replay (stored size, Philox counter and beta all advance on the device).
  void sample(const SampledBatchView& out, cudaStream_t stream);

  // Priorities from the learner's TD errors: p = |delta| + eps, leaf p^alpha; repeated indices
  // in one batch: the largest priority wins. Graph-safe. A no-op in uniform mode.
  void update_priorities(const std::int32_t* indices, const float* td_errors, std::int64_t n, cudaStream_t stream);

  // Checkpoints (format in rl/replay/buffer_io.cpp): everything that determines later behaviour,
  // i.e. the ring arrays, the priority tree (leaf stamps and every level), the device ReplayState
  // (size, Philox counter, max priority, epoch) and the host slot counts (head, each producer's
  // step and n-step blocks). These are the only replay operations that copy device memory to the
  // host (explicit checkpoint I/O); both synchronize `stream`.
  // save: streams the arrays through one 64 MiB host buffer into a safetensors file, written
  // atomically (temp + fsync + rename). std::runtime_error naming the path on failure.
  void save(const std::filesystem::path& path, cudaStream_t stream) const;
  // load: into a buffer of the same configuration with the same producers registered (same
  // count, same env counts, in order). Validates the whole file first (format, every config key
  // that defines stored data: capacity, layout, mode, n_step, gamma, alpha; every tensor's dtype,
  // shape and checksum; the slot counts against the stored size): on any problem
  // std::runtime_error naming the file and each key, and the buffer is unchanged.
  void load(const std::filesystem::path& path, cudaStream_t stream);

  // An output batch of `batch` transitions (config.batch_size when 0).
  SampledBatch allocate_batch(std::int64_t batch = 0) const;

  std::int64_t capacity() const noexcept { return config_.capacity; }
  std::int64_t size() const noexcept { return slots_.filled(); }    // stored transitions
  std::int64_t inserted() const noexcept { return slots_.head(); }  // transitions ever inserted

  // Device views for tests and diagnostics (the host must not read them in production).
  const ReplayState* device_state() const noexcept { return state_.data(); }
  RingView ring_view() const noexcept { return ring_.view(); }
  const TreeView* tree_view() const noexcept { return has_tree_ ? &tree_view_ : nullptr; }
  const TreeShape& tree_shape() const noexcept { return tree_.shape(); }

 private:
  void check_batch(const TransitionBatch& batch, std::int64_t envs) const;
  void sample_impl(const SampledBatchView& out, std::int64_t step, cudaStream_t stream);

  ReplayConfig config_;
  SlotAllocator slots_;
  ReplayRing ring_;
  PriorityTree tree_;
  TreeView tree_view_;
  bool has_tree_ = false;
  gpu::DeviceBuffer<ReplayState> state_;
};

// The metadata keys of a replay checkpoint that define what its data means (capacity, layout,
// mode, n-step, gamma, alpha): load() rejects a file whose values differ from these; a host-only
// checker (actors/checkpoint_check) compares them without a device.
std::map<std::string, std::string> replay_snapshot_keys(const ReplayConfig& config);

}  // namespace foxhunt::rl
