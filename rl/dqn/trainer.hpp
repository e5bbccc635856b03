#pragma once
// DqnTrainer: the single-stream synchronous training driver (tests, benchmarks, and the reference
// for the actor runtime). Per environment step of N environments:
//   act (online net, epsilon / noise on the device) -> env step -> bootstrap observation
//   (final_obs where the episode ended, else the next obs) -> replay insert -> schedules advance;
//   once learning_starts transitions are stored, every train_every transitions updates_per_train
//   replays of the learner's update graph (replay sample before it, priority update beside its Adam).
// The host counts steps and updates; it never reads a device value.
//
// The environment and the replay are reached through hooks (device pointers and a stream), so the
// driver does not depend on their classes: rl/envs' VecEnv and rl/replay's ReplayBuffer plug in
// with a few lines each (see make_*_hooks where both are present).
#include <cuda_runtime.h>

#include <cstdint>
#include <functional>

#include "gpu/buffer.hpp"
#include "rl/dqn/batch.hpp"
#include "rl/dqn/learner.hpp"

namespace foxhunt::rl {

struct DqnEnvHooks {
  std::int64_t num_envs = 0;
  std::int64_t obs_dim = 0;
  // Writes the first observations (N, obs_dim) f32.
  std::function<void(float* obs, std::uint64_t seed, cudaStream_t)> reset;
  // One step with actions (N, D) int32: next obs (N, obs_dim) (first obs of a new episode after an
  // autoreset), reward (N), terminated / truncated (N) 0/1, final_obs (N, obs_dim) rows written for
  // the environments that finished.
  std::function<void(float* next_obs, float* reward, std::uint8_t* terminated, std::uint8_t* truncated,
                     float* final_obs, const std::int32_t* actions, cudaStream_t)>
      step;
};

struct DqnReplayHooks {
  // Inserts N transitions (obs, action, reward, terminated, truncated, bootstrap obs).
  std::function<void(const float* obs, const std::int32_t* actions, const float* reward, const std::uint8_t* terminated,
                     const std::uint8_t* truncated, const float* next_obs, cudaStream_t)>
      insert;
  // Fills `batch`'s buffers (graph-capturable: captured once into the update graph).
  std::function<void(cudaStream_t)> sample;
  // New priorities (the learner's, one per sampled index); graph-capturable.
  std::function<void(const std::int32_t* indices, const float* priorities, std::int64_t n, cudaStream_t)>
      update_priorities;
  DqnBatch batch;  // where sample() writes
};

struct DqnTrainSchedule {
  std::int64_t learning_starts = 10000;  // transitions before the first update
  std::int64_t train_every = 10;         // transitions between update rounds
  std::int64_t updates_per_train = 1;    // updates per round
};

class DqnTrainer {
 public:
  // learner.config().act_rows must be >= env.num_envs; the learner's stream is used throughout.
  // The learner's update graph is captured at the first update (replay.sample before it,
  // replay.update_priorities after it).
  DqnTrainer(DqnLearner& learner, DqnEnvHooks env, DqnReplayHooks replay, DqnTrainSchedule schedule);

  void reset(std::uint64_t seed);
  // Collects `transitions` more transitions (rounded up to whole env steps), updating as scheduled.
  void run(std::int64_t transitions);

  std::int64_t transitions() const noexcept { return transitions_; }
  std::int64_t updates() const noexcept { return updates_; }
  const float* obs() const noexcept { return obs_.data(); }  // current observations (N, obs_dim)

 private:
  void capture_update();

  DqnLearner& learner_;
  DqnEnvHooks env_;
  DqnReplayHooks replay_;
  DqnTrainSchedule schedule_;
  gpu::DeviceBuffer<float> obs_, next_obs_, final_obs_, bootstrap_, reward_;
  gpu::DeviceBuffer<std::uint8_t> terminated_, truncated_;
  gpu::DeviceBuffer<std::int32_t> actions_;
  std::int64_t transitions_ = 0, pending_ = 0, updates_ = 0;
};

}  // namespace foxhunt::rl
