#pragma once
// PpoTrainer: synchronous PPO on one stream. An iteration is two graph launches:
//   collect  RolloutCollector (rl/ppo/collector.hpp) acting with the learner's own network: T
//            steps of N environments, bootstrap values, GAE, and the explained variance
//   update   PpoLearner's epochs x minibatches
// The host counts iterations and never reads a device value to decide anything; statistics
// leave through the exit module when asked for (publish_stats / poll_stats).
#include <cstdint>
#include <optional>

#include "gpu/buffer.hpp"
#include "gpu/exit.hpp"
#include "gpu/graph.hpp"
#include "rl/envs/episode_stats.hpp"
#include "rl/envs/vec_env.hpp"
#include "rl/ppo/collector.hpp"
#include "rl/ppo/learner.hpp"
#include "rl/ppo/reward_norm.hpp"
#include "rl/ppo/rollout.hpp"

namespace foxhunt::rl::ppo {

// The head an environment's action space needs (discrete branches -> categorical, continuous ->
// gaussian with the env's bounds); `bound` picks how Gaussian samples meet the bounds.
HeadShape head_for(const ActionSpace& space, HeadShape::Bound bound = HeadShape::Bound::clip);

struct TrainerStats {
  EpisodeStats episodes{};  // episodes finished since the previous report
  UpdateStats update{};     // the last update
};

class PpoTrainer {
 public:
  // config.num_envs must equal env.num_envs() and config.head must fit env.action_space().
  // finetune (nullable; must outlive the trainer): a trainable feature extractor, the first module
  // of the learner's network (PpoLearner) and the collector's extractor at once, so every rollout
  // acts with the weights of the latest update; its learning rate is features_lr_scale times the
  // agent's. finetune_critic (nullable, with finetune and config.shared_trunk = false): the
  // critic's extractor of its own ([features] shared = false), trained by the value loss alone
  // while finetune gets the policy loss (PpoLearner, RolloutCollector::set_critic_features).
  PpoTrainer(const PpoConfig& config, VecEnv& env, gpu::BlasLane lane, TrainableObsFeatures* finetune = nullptr,
             float features_lr_scale = 1.f, TrainableObsFeatures* finetune_critic = nullptr);

  // A frozen feature extractor of the observations (RolloutCollector::set_features); before
  // reset(). Not with a `finetune` extractor (that one is set already).
  void set_features(ObsFeatures* features) { collector_.set_features(features); }

  // Resets every environment from `seed` (and a recurrent policy's state); the first
  // observations go to the rollout.
  void reset(std::uint64_t seed);
  // One iteration (collect + update), replaying the captured graphs (captured at the first call).
  void iterate();
  // Its halves: the collection graph alone (iterate() = collect() + learner().update(rollout())).
  void collect();
  // The same work without graphs (tests: replay equals eager).
  void iterate_eager();

  // Episode statistics and the last update's statistics through the exit module: publish when
  // nothing is pending, then poll without blocking (wait_stats blocks for the pending one, or
  // publishes and waits). clear: the episode statistics start a new window after the export.
  void publish_stats(bool clear = true);
  bool stats_pending() const noexcept { return pending_; }
  bool poll_stats(TrainerStats& out);
  TrainerStats wait_stats(bool clear = true);

  PpoLearner& learner() noexcept { return learner_; }
  Rollout& rollout() noexcept { return rollout_; }
  VecEnv& env() noexcept { return env_; }
  std::int64_t iterations() const noexcept { return iterations_; }
  std::size_t collect_graph_nodes() const { return collector_.graph_nodes(rollout_); }
  std::int64_t env_steps() const noexcept { return iterations_ * config_.batch_rows(); }
  void set_iterations(std::int64_t done) noexcept { iterations_ = done; }  // resume
  // The sampling counter (device; checkpointed).
  std::uint64_t* act_counter() noexcept { return collector_.act_counter(); }
  // The reward normalizer's state (checkpointed); null without config.normalize_rewards.
  RewardNormalizer* reward_normalizer() noexcept { return collector_.reward_normalizer(); }

 private:
  PpoConfig config_;
  VecEnv& env_;
  PpoLearner learner_;
  Rollout rollout_;
  RolloutCollector collector_;
  gpu::ExitSlot<EpisodeStats> episodes_exit_;
  bool pending_ = false;
  std::int64_t iterations_ = 0;
};

}  // namespace foxhunt::rl::ppo
