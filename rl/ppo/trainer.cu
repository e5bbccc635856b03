#include "rl/ppo/trainer.hpp"

#include <string>

#include "gpu/check.hpp"
#include "gpu/launch.cuh"
#include "rl/ppo/gae.hpp"
#include "rl/ppo/minibatch.hpp"

namespace foxhunt::rl::ppo {

HeadShape head_for(const ActionSpace& space, HeadShape::Bound bound) {
  HeadShape h;
  if (space.kind == ActionSpace::Kind::discrete) {
    h.kind = HeadShape::Kind::categorical;
    h.branches = space.branches;
    h.choices = space.choices;
  } else {
    h.kind = HeadShape::Kind::gaussian;
    h.dim = space.dim;
    h.low = space.low;
    h.high = space.high;
    h.bound = bound;
  }
  return h;
}

PpoTrainer::PpoTrainer(const PpoConfig& config, VecEnv& env, gpu::BlasLane lane, TrainableObsFeatures* finetune,
                       float features_lr_scale, TrainableObsFeatures* finetune_critic)
    : config_(config),
      env_(env),
      learner_(config, env.obs_dim(), lane, finetune, features_lr_scale, finetune_critic),
      rollout_(config.rollout_steps, config.num_envs, env.obs_dim(), config.head, learner_.network().state_features(),
               lane.stream),
      collector_(config, env, learner_, true, lane.stream) {
  FH_EXPECT(env.num_envs() == config.num_envs, "PpoTrainer: config.num_envs (" + std::to_string(config.num_envs) +
                                                   ") differs from the environment's (" +
                                                   std::to_string(env.num_envs()) + ")");
  const HeadShape want = head_for(env.action_space(), config.head.bound);
  FH_EXPECT(want.kind == config.head.kind && want.width() == config.head.width() &&
                want.action_width() == config.head.action_width(),
            "PpoTrainer: config.head does not fit the environment's action space");
  if (finetune != nullptr) collector_.set_features(finetune);
  if (finetune_critic != nullptr) collector_.set_critic_features(finetune_critic);
}

void PpoTrainer::reset(std::uint64_t seed) {
  collector_.reset(seed, rollout_, learner_.lane().stream);
}

void PpoTrainer::collect() {
  collector_.collect(rollout_, rollout_, learner_.lane().stream);
}

void PpoTrainer::iterate() {
  collect();
  learner_.update(rollout_);
  ++iterations_;
}

void PpoTrainer::iterate_eager() {
  collector_.collect_eager(rollout_, rollout_, learner_.lane().stream);
  learner_.update_eager(rollout_);
  ++iterations_;
}

void PpoTrainer::publish_stats(bool clear) {
  if (pending_) return;
  const cudaStream_t s = learner_.lane().stream;
  env_.export_stats(episodes_exit_, clear, s);
  learner_.publish_stats(s);
  pending_ = true;
}

bool PpoTrainer::poll_stats(TrainerStats& out) {
  if (!pending_ || !learner_.stats().ready()) return false;  // the update's exit is published last
  out.episodes = episodes_exit_.wait();
  out.update = learner_.stats().wait();
  pending_ = false;
  return true;
}

TrainerStats PpoTrainer::wait_stats(bool clear) {
  if (!pending_) publish_stats(clear);
  TrainerStats out;
  out.episodes = episodes_exit_.wait();
  out.update = learner_.stats().wait();
  pending_ = false;
  return out;
}

}  // namespace foxhunt::rl::ppo
