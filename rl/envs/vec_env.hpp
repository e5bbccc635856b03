#pragma once
// The vectorized environment interface: N environments advanced together on the device.
//
// One call to step() advances every environment `steps` times (T). Actions are read from a
// device buffer laid out (T, N, width); every output is written to device buffers laid out
// (T, N, ...), one row per environment per step, so a rollout of T steps is one call and a
// collector that acts between steps calls it with T = 1. Nothing is copied to the host.
//
// Episode ends (Gymnasium's convention, terminated and truncated kept distinct):
//   terminated[t, i] = 1  the episode reached a terminal state (do not bootstrap);
//   truncated[t, i]  = 1  it was cut by the time limit (bootstrap from final_obs).
// A finished environment resets on the device in the same step ("same-step autoreset"):
// obs[t, i] is then the FIRST observation of the new episode, reward[t, i] is the last reward of
// the old one, and final_obs[t, i] (when the caller gives that buffer) holds the old episode's
// last observation. Rows of final_obs whose environment did not finish at step t are left as
// they were.
//
// Randomness: Philox keyed by (seed, environment index, per-environment step counter), so an
// environment's trajectory depends only on the seed, its index and its actions (not on N, the
// launch shape or T).
//
// Episode statistics accumulate on the device per environment (deterministic: no float atomics)
// and are reduced on demand into one EpisodeStats struct, exported through gpu::ExitSlot.
#include <cuda_runtime.h>

#include <cstdint>

#include "gpu/buffer.hpp"
#include "gpu/exit.hpp"
#include "gpu/tensor.hpp"
#include "rl/envs/episode_stats.hpp"

namespace foxhunt::rl {

struct ActionSpace {
  // (A nested enum: rl/replay/config.hpp has its own rl::ActionKind for stored transitions,
  // where discrete with branches > 1 is called multi_discrete.)
  enum class Kind : std::uint8_t { discrete, continuous };
  Kind kind = Kind::discrete;
  int branches = 1;  // discrete: sub-actions per environment (1 = Gymnasium Discrete)
  int choices = 0;   // discrete: choices per branch, indices 0 .. choices-1
  int dim = 0;       // continuous: values per environment
  float low = 0.0f;  // continuous: bounds (values outside are clamped)
  float high = 0.0f;
  // int32 (discrete) or f32 (continuous) values per environment per step.
  int width() const { return kind == Kind::discrete ? branches : dim; }
};

// Device buffers for one call of step(): T steps of N environments.
struct StepOutputs {
  void* obs = nullptr;                     // (T, N, obs_dim) obs_dtype (f32 or bf16)
  float* reward = nullptr;                 // (T, N)
  std::uint8_t* terminated = nullptr;      // (T, N) 0/1
  std::uint8_t* truncated = nullptr;       // (T, N) 0/1
  void* final_obs = nullptr;               // (T, N, obs_dim) obs_dtype, optional (nullptr: not written)
  gpu::DType obs_dtype = gpu::DType::f32;  // f32 or bf16, for obs and final_obs
};

// Device action buffer for one call of step(): exactly one pointer is set, per action_space().
struct ActionInput {
  const std::int32_t* discrete = nullptr;  // (T, N, branches)
  const float* continuous = nullptr;       // (T, N, dim)
};

class VecEnv {
 public:
  VecEnv() : stats_scratch_(1) {}
  virtual ~VecEnv() = default;
  VecEnv(const VecEnv&) = delete;
  VecEnv& operator=(const VecEnv&) = delete;

  virtual std::int64_t num_envs() const = 0;
  virtual std::int64_t obs_dim() const = 0;
  virtual ActionSpace action_space() const = 0;

  // Starts every environment afresh from `seed` (step counters to 0, statistics cleared) and
  // writes the first observation: obs (N, obs_dim) in obs_dtype.
  virtual void reset(void* obs, gpu::DType obs_dtype, std::uint64_t seed, cudaStream_t stream) = 0;

  // Advances every environment `steps` times (T >= 1) with actions (T, N, width).
  virtual void step(const StepOutputs& out, const ActionInput& actions, std::int64_t steps, cudaStream_t stream) = 0;

  // Reduces the per-environment accumulators into `out` (a device pointer); `clear` restarts
  // the accumulation (episodes finished from then on are counted afresh).
  virtual void reduce_stats(EpisodeStats* out, bool clear, cudaStream_t stream) = 0;

  // reduce_stats into a device scratch struct, then publish it through the exit module.
  void export_stats(gpu::ExitSlot<EpisodeStats>& slot, bool clear, cudaStream_t stream) {
    reduce_stats(stats_scratch_.data(), clear, stream);
    slot.publish(stats_scratch_.data(), stream);
  }

 protected:
  // Shared argument checks for step(): sizes, buffer presence, dtype and action kind.
  void check_step_args(const StepOutputs& out, const ActionInput& actions, std::int64_t steps) const;

 private:
  gpu::DeviceBuffer<EpisodeStats> stats_scratch_;
};

}  // namespace foxhunt::rl
