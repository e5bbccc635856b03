#include "rl/dqn/trainer.hpp"

#include <string>
#include <utility>

#include "gpu/check.hpp"
#include "rl/envs/bootstrap_obs.hpp"

namespace foxhunt::rl {

DqnTrainer::DqnTrainer(DqnLearner& learner, DqnEnvHooks env, DqnReplayHooks replay, DqnTrainSchedule schedule)
    : learner_(learner), env_(std::move(env)), replay_(std::move(replay)), schedule_(schedule) {
  FH_EXPECT(env_.num_envs >= 1 && env_.obs_dim == learner_.config().net.obs_dim,
            "DqnTrainer: env.num_envs must be >= 1 and env.obs_dim must equal the network's obs_dim");
  FH_EXPECT(learner_.config().act_rows >= env_.num_envs,
            "DqnTrainer: the learner's act_rows (" + std::to_string(learner_.config().act_rows) +
                ") must be >= num_envs (" + std::to_string(env_.num_envs) + ")");
  FH_EXPECT(env_.reset && env_.step && replay_.insert && replay_.sample && replay_.update_priorities,
            "DqnTrainer: every hook must be set");
  FH_EXPECT(schedule_.learning_starts >= 0 && schedule_.train_every >= 1 && schedule_.updates_per_train >= 1,
            "DqnTrainer: need learning_starts >= 0, train_every >= 1, updates_per_train >= 1");
  const auto N = static_cast<std::size_t>(env_.num_envs), O = static_cast<std::size_t>(env_.obs_dim);
  obs_ = gpu::DeviceBuffer<float>(N * O);
  next_obs_ = gpu::DeviceBuffer<float>(N * O);
  final_obs_ = gpu::DeviceBuffer<float>(N * O);
  bootstrap_ = gpu::DeviceBuffer<float>(N * O);
  reward_ = gpu::DeviceBuffer<float>(N);
  terminated_ = gpu::DeviceBuffer<std::uint8_t>(N);
  truncated_ = gpu::DeviceBuffer<std::uint8_t>(N);
  actions_ = gpu::DeviceBuffer<std::int32_t>(N * static_cast<std::size_t>(learner_.config().net.branches));
  final_obs_.zero(learner_.stream());
}

void DqnTrainer::capture_update() {
  // The update graph: replay sample -> learner update -> priority update, captured once, when the
  // replay first holds learning_starts transitions (a sampler may check its fill on capture).
  const std::int64_t B = learner_.config().batch;
  learner_.capture(
      replay_.batch, [this](cudaStream_t cs) { replay_.sample(cs); },
      [this, B](cudaStream_t cs) { replay_.update_priorities(replay_.batch.indices, learner_.priorities(), B, cs); });
}

void DqnTrainer::reset(std::uint64_t seed) {
  env_.reset(obs_.data(), seed, learner_.stream());
  pending_ = 0;
}

void DqnTrainer::run(std::int64_t transitions) {
  const cudaStream_t s = learner_.stream();
  const std::int64_t N = env_.num_envs;
  for (std::int64_t done = 0; done < transitions; done += N) {
    learner_.act(actions_.data(), obs_.data(), N, false);
    env_.step(next_obs_.data(), reward_.data(), terminated_.data(), truncated_.data(), final_obs_.data(),
              actions_.data(), s);
    select_bootstrap_obs(bootstrap_.data(), next_obs_.data(), final_obs_.data(), terminated_.data(), truncated_.data(),
                         N, env_.obs_dim, s);
    replay_.insert(obs_.data(), actions_.data(), reward_.data(), terminated_.data(), truncated_.data(),
                   bootstrap_.data(), s);
    std::swap(obs_, next_obs_);
    learner_.after_env_step(N);
    transitions_ += N;
    if (transitions_ < schedule_.learning_starts) continue;
    pending_ += N;
    while (pending_ >= schedule_.train_every) {
      pending_ -= schedule_.train_every;
      if (!learner_.captured()) capture_update();
      for (std::int64_t k = 0; k < schedule_.updates_per_train; ++k) {
        learner_.replay();
        ++updates_;
      }
    }
  }
}

}  // namespace foxhunt::rl
