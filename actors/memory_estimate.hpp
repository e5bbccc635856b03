#pragma once
// The device memory a run needs, estimated on the host from its config, so that `foxhunt check`
// can print it and `foxhunt train` can refuse a run that cannot fit before a cudaMalloc fails
// half-way through building the stages. What each stage allocates (actors/stage_factory.cpp):
//   replay     rl::ReplayConfig::device_bytes() (ring, priority tree, state) and the
//              pipeline.batches sampled batches in flight; with placement "split" also one
//              staging copy of each transition slot (on the learner's device);
//   learner    online and target arenas (params, grads, Adam m and v each), the policy snapshot
//              ring and the published double buffer (parameter copies), the update workspaces
//              (activations and gradients for batch rows, twice the rows with double DQN); PPO:
//              its arena and workspaces, and with placement "split" (pipeline.mode = "actors")
//              one staging copy of each rollout slot (policy_lag + 1 rollouts);
//   collector  its acting network (a full learner: the same two arenas and workspaces, acting
//              rows = env.num_envs), the transition slots, three observation buffers, env state;
//   fixed      one cuBLASLt workspace per device context, plus an allowance for captured graphs,
//              kernels' scratch and the allocator's rounding;
//   features   [features]' extractors, each sized by its own bytes_for (pretrain/frozen_features,
//              pretrain/tuned_features): frozen, the one that steps the num_envs environments;
//              finetune, the learner's (num_envs acting rows, the learner's batch or minibatch
//              training rows; PPO with features.shared = false: one for the critic too), the
//              learner's observation copies and gradients for it, and the acting copy the collector
//              keeps (DQN; PPO through the actors).
// The total is the sum as if every role shared one device. Under placement "split" with the
// collector on another device, per_device() says what each of the two holds.
// Activations are estimated per row, not measured: the figure is a floor with a margin, not a
// promise (the fixed allowance absorbs the small buffers not listed).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "actors/run_config.hpp"

namespace foxhunt::actors {

struct MemoryEstimate {
  std::int64_t parameters = 0;  // one Q-network's padded parameter count
  std::size_t replay = 0, learner = 0, collector = 0, fixed = 0;
  std::size_t features = 0;            // 0 without [features]
  std::size_t collector_features = 0;  // the part of `features` the collector holds
  std::size_t total() const { return replay + learner + collector + fixed + features; }
};

// The bytes one device holds.
struct DeviceMemoryShare {
  int device = 0;
  std::size_t bytes = 0;
  std::string roles;  // "replay, learner, collector" or the subset on this device
};

// One share on run.device (the total), or under placement "split" with the collector on another
// device two: replay, learner and their features on run.device, the collector and its features on
// collector_device; each with one device context's workspace and the graph allowance.
std::vector<DeviceMemoryShare> per_device(const RunConfig& config, const MemoryEstimate& estimate);

inline constexpr std::size_t kGraphAllowanceBytes = std::size_t{256} << 20;
inline constexpr int kDeviceContexts = 2;  // the learner's and the collector's cuBLASLt handles

// Throws std::invalid_argument (naming the key) when the config's environment cannot be sized, or
// features.checkpoint when its pretrain checkpoint cannot be read.
MemoryEstimate estimate_memory(const RunConfig& config);

// Float activations (and their gradients) one row of a forward + backward through this network.
std::int64_t workspace_floats_per_row(const std::vector<std::int64_t>& hidden, std::int64_t outputs);

// The table `foxhunt check` prints: replay, learner, collector, fixed, features (with [features]),
// total (MiB and bytes).
std::string format_memory_table(const MemoryEstimate& estimate);

// "1.50 GiB" / "12.3 MiB" / "512 B".
std::string human_bytes(std::size_t bytes);

}  // namespace foxhunt::actors
