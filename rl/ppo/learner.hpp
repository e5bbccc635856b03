#pragma once
// PpoLearner: the PPO update over a filled Rollout, entirely on the device and captured once as
// one CUDA graph (all epochs and minibatches), so an iteration's update is one launch:
//   per epoch   a fresh device-side permutation of the rollout's rows (recurrent policies: of its
//               environments, each minibatch their whole time-major sequences with the stored
//               initial states and resets)
//   per minibatch  gather -> forward -> clipped surrogate + entropy, clipped value loss
//               -> backward -> global grad-norm clip -> Adam (lr and step count in device memory);
//               a network that fits rl/ppo/fused_mlp.hpp (config.fused_kernels) runs gather to
//               backward as two launches
//   after each epoch  with target_kl > 0, a device flag stops the remaining minibatches' Adam
//               steps once the last minibatch's approx-KL exceeds it (the host decides nothing).
// The learning rate anneals linearly over config.anneal_iterations updates, from a device counter.
// Statistics (losses, entropy, approx-KL, clip fraction, explained variance, lr) stay on the
// device until publish_stats() sends them through the exit module.
//
// A trainable feature extractor (rl::TrainableObsFeatures, [features] mode = "finetune") is the
// network's first module: each minibatch recomputes the feature columns of its gathered
// observations with the extractor's current weights (a recurrent policy: every row of its T x M
// sequence chunk, in front of the trunk and LSTM), and the backward (through time, for an LSTM)
// continues through the observations' gradient into the extractor's own arena. The gradient-norm
// clip takes the norm over both arenas together; the extractor's Adam (its own moments, the same
// step count, KL stop and clip scale) runs at features_lr_scale times the agent's (annealed)
// learning rate. GEMM path only (the fused kernels read the rollout's stored observations).
//
// Separate extractors ([features] shared = false; separate actor and critic networks): features
// feeds the actor and features_critic the critic. Each minibatch copies its gathered observations
// once more and writes the critic's features there (ActorCritic's obs_critic), so the actor's
// extractor receives only the policy loss's gradient and the critic's only the value loss's. Each
// has its own arena and Adam moments; the clip's norm covers all arenas, and both run at
// features_lr_scale.
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "gpu/adam.hpp"
#include "gpu/arena.hpp"
#include "gpu/buffer.hpp"
#include "gpu/context.hpp"
#include "gpu/data_parallel.hpp"
#include "gpu/exit.hpp"
#include "gpu/graph.hpp"
#include "models/module.hpp"
#include "rl/ppo/actor_critic.hpp"
#include "rl/ppo/config.hpp"
#include "rl/ppo/fused_mlp.hpp"
#include "rl/ppo/loss.hpp"
#include "rl/ppo/rollout.hpp"
#include "rl/envs/obs_features.hpp"

namespace foxhunt::rl::ppo {

// Means over the minibatches of one update (the last update published).
struct UpdateStats {
  float policy_loss = 0, value_loss = 0, entropy = 0, approx_kl = 0, clip_fraction = 0;
  float explained_variance = 0;   // 1 - Var(returns - values) / Var(returns) over the rollout
  float lr = 0;                   // the update's learning rate
  std::uint32_t minibatches = 0;  // minibatches whose Adam step ran (fewer after a KL stop)
};

class PpoLearner {
 public:
  // The networks' parameters are initialized from `seed` (host RNG, set-up only). features
  // (nullable; must outlive the learner): the trainable extractor in front of the network, for
  // obs_dim observations; its max_train_rows() covers config.minibatch_rows() (recurrent: the
  // rollout_steps x num_envs / minibatches rows of a sequence chunk).
  // features_critic (nullable, only with features and config.shared_trunk = false): the critic's
  // extractor of its own, with the same requirements.
  PpoLearner(const PpoConfig& config, std::int64_t obs_dim, gpu::BlasLane lane,
             TrainableObsFeatures* features = nullptr, float features_lr_scale = 1.f,
             TrainableObsFeatures* features_critic = nullptr);

  const PpoConfig& config() const noexcept { return config_; }
  ActorCritic& network() noexcept { return net_; }
  gpu::ParameterArena& arena() noexcept { return arena_; }
  TrainableObsFeatures* features() const noexcept { return features_; }
  TrainableObsFeatures* features_critic() const noexcept { return features_critic_; }
  gpu::BlasLane lane() const noexcept { return lane_; }

  // Workspace of the networks for acting and bootstrapping over up to the rollout's rows.
  const models::Workspace& act_workspace() const noexcept { return act_ws_.view; }
  // The fused kernels of this network, or null when it runs on the GEMM path.
  const FusedActorCritic* fused() const noexcept { return fused_.get(); }

  // One update from `rollout` (advantages and returns filled). First call with a rollout: eager
  // work captured into that rollout's update graph, later calls replay it (the rollout's buffers
  // must stay the same). Several rollouts (the actor runtime's rollout slots) each get a graph.
  void update(Rollout& rollout);
  // The same work without the graph (tests: graph replay equals eager).
  void update_eager(Rollout& rollout);

  // Explained variance of the rollout's values against its returns into the device stats (the
  // collection graph calls it after GAE).
  void record_explained_variance(const Rollout& rollout, cudaStream_t stream);
  // Publishes the last update's UpdateStats through the exit (read with stats().try_read()).
  void publish_stats(cudaStream_t stream);
  gpu::ExitSlot<UpdateStats>& stats() noexcept { return stats_exit_; }
  // Nodes of the update graph of the first rollout updated (0 before the first update).
  std::size_t graph_nodes() const { return graphs_.empty() ? 0 : graphs_.front().second.node_count(); }

  // Makes this learner one replica of a data-parallel learner (gpu/data_parallel.hpp): every rank
  // takes rank 0's parameters and Adam moments (broadcast on the learner's stream, which it
  // synchronizes); later updates all-reduce each minibatch's gradients and agree on the KL stop.
  // Before the first update; every rank calls it. An inactive `dp` changes nothing.
  void join(const gpu::DataParallel& dp);
  const gpu::DataParallel& data_parallel() const noexcept { return dp_; }

  // Device counters (checkpointed with the parameters): updates applied, Adam steps, and the
  // permutation draws.
  std::uint64_t* counters() noexcept { return counters_.data(); }
  static constexpr int kCounterCount = 3;

 private:
  void enqueue_update(Rollout& rollout, cudaStream_t stream);
  void minibatch(Rollout& rollout, const std::int32_t* indices, int index, cudaStream_t stream);
  // Global grad-norm clip and Adam over the gradients a minibatch wrote.
  void optimizer_step(cudaStream_t stream);
  void fused_minibatch(Rollout& rollout, const std::int32_t* indices, int index, cudaStream_t stream);

  PpoConfig config_;
  gpu::BlasLane lane_;
  gpu::DataParallel dp_;
  gpu::ParameterArena arena_;
  ActorCritic net_;
  std::unique_ptr<FusedActorCritic> fused_;
  models::OwnedWorkspace act_ws_;
  gpu::DeviceBuffer<std::byte> train_ws_;
  models::Workspace train_view_;
  gpu::AdamConfig adam_;
  // The GEMM path's minibatch buffers (rows = config.minibatch_rows()); empty when fused.
  gpu::DeviceBuffer<float> mb_obs_, mb_raw_, mb_logp_, mb_adv_, mb_ret_, mb_val_, mb_head_, mb_value_;
  gpu::DeviceBuffer<float> d_head_, d_value_, mb_state0_;
  gpu::DeviceBuffer<std::int32_t> mb_discrete_, perm_, mb_rows_;
  gpu::DeviceBuffer<std::uint8_t> mb_resets_;
  gpu::DeviceBuffer<std::byte> perm_ws_, loss_ws_, norm_ws_, fused_ws_;
  TrainableObsFeatures* features_ = nullptr;
  TrainableObsFeatures* features_critic_ = nullptr;
  std::vector<TrainableObsFeatures*> extractors_;  // the non-null ones of the two, actor's first
  float features_lr_scale_ = 1.f;
  gpu::DeviceBuffer<float> d_obs_, d_obs_scratch_;  // (mb, obs_dim): the extractor's input gradient
  gpu::DeviceBuffer<float> mb_obs_critic_, d_obs_critic_;  // (mb, obs_dim): the critic extractor's
  gpu::DeviceBuffer<std::byte> features_norm_ws_;
  gpu::DeviceBuffer<float> adv_norms_;  // fused: (minibatches, 2) per epoch
  gpu::DeviceBuffer<float> scalars_;  // lr, grad norm, clip scale, the extractor's lr and grad norm
  gpu::DeviceBuffer<std::uint32_t> kl_stop_;
  gpu::DeviceBuffer<std::uint64_t> counters_;  // [updates, adam steps (int64 view), permutation draws]
  gpu::DeviceBuffer<LossStats> loss_stats_;
  gpu::DeviceBuffer<UpdateStats> update_stats_;
  gpu::ExitSlot<UpdateStats> stats_exit_;
  std::vector<std::pair<const Rollout*, gpu::CudaGraph>> graphs_;  // one per rollout, in first-use order
};

}  // namespace foxhunt::rl::ppo
