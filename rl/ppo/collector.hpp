#pragma once
// RolloutCollector: PPO's collection half, on the device and captured as one CUDA graph per
// rollout it fills: T steps of N environments (policy forward or the LSTM step -> sample (Philox
// on a device counter) -> env step -> store), then the values that bootstrap truncations and the
// last step, and GAE. It acts with the network of a PpoLearner (the trainer's own, or an acting
// copy that the actor runtime's collector loads published weights into).
//
// What carries from one rollout to the next (the observation after the last step, a recurrent
// policy's state and last dones) lives in the rollout last filled; a collect into a different
// rollout first copies it over, so several rollouts can be filled in turn (the actor runtime's
// rollout slots) while a learner reads the previous ones (it reads none of the carried fields).
//
// Features (set_features, rl/envs/obs_features.hpp): every observation the environment writes
// (the first ones at reset, each step's next observation and final observation) gets its feature
// columns filled by the extractor right after the environment step, inside the same graph, before
// the policy or a bootstrap value reads it; the rollout stores them like any observation column.
// The extractor's per-environment state is reset by the step's done mask on the device. A
// trainable extractor (rl::TrainableObsFeatures, a function of each row alone) also rewrites the
// features of the rollout's first observations, carried from the last rollout, so every step acts
// with the current weights.
//
// A critic's extractor of its own (set_critic_features; separate fine-tuned extractors): the
// rollout holds one feature block, the actor's, which the policy reads and the rollout stores.
// Every value (each step's, the bootstrap values of final observations, the last observation's)
// reads a copy of its observation rows whose feature columns the critic's extractor rewrote, made
// right before the value is computed. A trainable extractor is a function of each row alone, so
// the copy costs one extractor forward per step and no rollout-sized storage, and the stored
// rollout stays what a frozen or shared run stores; the learner recomputes both blocks from the
// stored rows anyway.
#include <cstdint>
#include <map>
#include <optional>

#include "gpu/buffer.hpp"
#include "gpu/graph.hpp"
#include "rl/envs/obs_features.hpp"
#include "rl/envs/vec_env.hpp"
#include "rl/ppo/learner.hpp"
#include "rl/ppo/reward_norm.hpp"
#include "rl/ppo/rollout.hpp"

namespace foxhunt::rl::ppo {

class RolloutCollector {
 public:
  // config.num_envs must equal env.num_envs(); `acting` must have been built from `config`.
  // record_explained_variance: the collection graph ends with PpoLearner::record_explained_variance
  // on `acting` (the synchronous trainer, whose acting network is its learner).
  RolloutCollector(const PpoConfig& config, VecEnv& env, PpoLearner& acting, bool record_explained_variance,
                   cudaStream_t stream);

  // Resets every environment from `seed` into `carry`'s next observation (and zeroes a recurrent
  // policy's state there); the next collect continues from `carry`.
  void reset(std::uint64_t seed, Rollout& carry, cudaStream_t stream);
  // Fills `rollout`, continuing from `from` (the rollout filled last; it may be `rollout` itself),
  // by replaying the graph captured for (rollout, from) at its first use.
  void collect(Rollout& rollout, Rollout& from, cudaStream_t stream);
  // The same work without a graph (tests: replay equals eager).
  void collect_eager(Rollout& rollout, Rollout& from, cudaStream_t stream);

  // The extractor that fills the observations' feature columns (nullable: none); set before the
  // first reset / collect (graphs capture it). It must outlive the collector.
  void set_features(ObsFeatures* features);
  ObsFeatures* features() const noexcept { return features_; }
  // The critic's extractor of its own (nullable: the critic reads the observations as stored);
  // with a network of separate actor and critic, before the first collect, outliving the collector.
  void set_critic_features(TrainableObsFeatures* features);

  std::uint64_t* act_counter() noexcept { return act_counter_.data(); }  // the sampling counter (checkpointed)
  RewardNormalizer* reward_normalizer() noexcept { return reward_norm_ ? &*reward_norm_ : nullptr; }
  std::size_t graph_nodes(const Rollout& rollout) const;

 private:
  void enqueue(Rollout& r, Rollout& from, cudaStream_t stream);

  PpoConfig config_;
  VecEnv& env_;
  PpoLearner& acting_;
  bool record_ev_;
  ObsFeatures* features_ = nullptr;
  TrainableObsFeatures* critic_features_ = nullptr;
  gpu::DeviceBuffer<float> critic_obs_;  // (N, obs_dim): the rows a value reads, the critic's features
  gpu::DeviceBuffer<float> head_;  // (N, width): the step's policy output
  gpu::DeviceBuffer<std::uint64_t> act_counter_;
  std::optional<RewardNormalizer> reward_norm_;
  std::map<const Rollout*, std::pair<const Rollout*, gpu::CudaGraph>> graphs_;  // rollout -> (from, graph)
};

}  // namespace foxhunt::rl::ppo
