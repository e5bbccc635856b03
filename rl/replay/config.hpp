#pragma once
// What a replay buffer stores and how it samples: the transition layout, the configuration, its
// validation (std::invalid_argument naming the key, e.g. "replay.alpha must be >= 0, got -1"),
// the device-memory footprint and the linear beta schedule. Host-only; no device needed.
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>

#include "gpu/tensor.hpp"

namespace foxhunt::rl {

// How an action is stored: one int32 (discrete), one int32 per branch (multi_discrete, the
// action-branching form) or a float vector (continuous). Every action element is one 4-byte word.
enum class ActionKind : std::uint8_t { discrete, multi_discrete, continuous };
std::string action_kind_name(ActionKind kind);

struct TransitionLayout {
  std::int64_t obs_dim = 0;                // observation elements per transition
  gpu::DType obs_dtype = gpu::DType::f32;  // storage dtype: f32 or bf16
  ActionKind action_kind = ActionKind::discrete;
  std::int64_t action_dim = 1;  // 1 for discrete; branches; float dims

  // Ring bytes per stored transition: obs + next obs (obs_dtype), action words, reward, flags,
  // n-step return, bootstrap discount, bootstrap index.
  std::size_t bytes_per_transition() const;
  // Throws std::invalid_argument naming `prefix`.<field>.
  void validate(const std::string& prefix = "replay.layout") const;
  bool operator==(const TransitionLayout&) const = default;
};

enum class SamplingMode : std::uint8_t { prioritized, uniform };

struct ReplayConfig {
  // The largest capacity: sampled indices are int32 (gather_rows' index type).
  static constexpr std::int64_t kMaxCapacity = std::numeric_limits<std::int32_t>::max();
  static constexpr int kMaxNStep = 32;

  std::int64_t capacity = 0;  // transitions in the ring
  TransitionLayout layout;
  SamplingMode mode = SamplingMode::prioritized;
  std::int64_t batch_size = 32;        // the learner's batch (allocate_batch); sample() may differ
  int n_step = 1;                      // n-step return length, 1..kMaxNStep
  float gamma = 0.99f;                 // discount, [0, 1]
  float alpha = 0.6f;                  // priority exponent, >= 0 (0 = uniform by priorities)
  float beta = 0.4f;                   // IS exponent at step 0, [0, 1]
  float beta_final = 1.0f;             // IS exponent after the anneal, [0, 1]
  std::int64_t beta_anneal_steps = 0;  // linear beta -> beta_final over this many steps; 0 = constant beta
  float eps = 1e-6f;                   // p = |delta| + eps, > 0
  std::uint64_t seed = 0;              // Philox key of the sampler
  std::uint32_t rng_stream = 0;        // Philox stream id of the sampler

  // All checks; `device_free_bytes` is what the device can give (the buffer passes
  // cudaMemGetInfo's free figure; CPU tests pass a number). Throws std::invalid_argument.
  void validate(std::size_t device_free_bytes = std::numeric_limits<std::size_t>::max()) const;
  // Device bytes the buffer allocates for this configuration (ring + priority tree + state).
  std::size_t device_bytes() const;
  // Linear schedule: beta + (beta_final - beta) * min(1, step / beta_anneal_steps).
  double beta_at(std::int64_t step) const;
};

// The one way configuration errors are reported: "<key> <what>".
[[noreturn]] void config_error(const std::string& key, const std::string& what);

}  // namespace foxhunt::rl
