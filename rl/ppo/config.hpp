#pragma once
// PpoConfig: what one PPO learner needs to know (rl/ppo/learner.hpp, rl/ppo/trainer.hpp). The
// defaults are CleanRL's ppo.py ("The 37 implementation details of PPO"): 64-64 tanh actor and
// critic with separate trunks, orthogonal init, Adam eps 1e-5 with the lr annealed linearly to 0,
// GAE(0.99, 0.95), 4 epochs x 4 minibatches, clip 0.2 (policy and value), entropy 0.01, value 0.5,
// global grad-norm clip 0.5, advantages normalized per minibatch.
#include <cstdint>
#include <vector>

#include "gpu/activation.hpp"
#include "gpu/linear.hpp"
#include "rl/ppo/distributions.hpp"

namespace foxhunt::rl::ppo {

struct PpoConfig {
  // Rollout: T steps of N environments per iteration.
  std::int64_t num_envs = 4;
  std::int64_t rollout_steps = 128;
  // Networks. hidden: the MLP trunk widths (actor and critic each, or one shared trunk; empty:
  // the heads read the observation).
  std::vector<std::int64_t> hidden{64, 64};
  gpu::Activation activation = gpu::Activation::tanh;  // tanh or relu
  bool shared_trunk = false;
  // > 0: a recurrent policy, obs -> trunk -> LSTM(lstm_hidden) -> head, for the actor and the
  // critic each (or one trunk and LSTM for both with shared_trunk). Trained on whole rollout
  // sequences: each minibatch is num_envs / minibatches environments' T steps with their
  // initial states.
  std::int64_t lstm_hidden = 0;
  gpu::LinearMath math = gpu::LinearMath::fp32;  // fp32 | tf32 | bf16 GEMMs (f32 master weights)
  HeadShape head;                                // from the environment's action space
  float init_log_std = 0.f;                      // gaussian heads: the initial state-independent log-std
  // Small feed-forward networks run as whole-network kernels (rl/ppo/fused_mlp.hpp) when they fit;
  // false: the GEMM path always.
  bool fused_kernels = true;

  // Update.
  int epochs = 4;
  int minibatches = 4;
  float gamma = 0.99f, gae_lambda = 0.95f;
  float clip = 0.2f;
  bool clip_value = true;
  float ent_coef = 0.01f, vf_coef = 0.5f;
  float max_grad_norm = 0.5f;  // 0: no clipping
  bool normalize_advantages = true;
  // Rewards divided by the running std of a discounted return (rl/ppo/reward_norm.hpp), as
  // Gymnasium's NormalizeReward: keeps the value targets near unit scale whatever the reward's.
  bool normalize_rewards = false;
  float target_kl = 0.f;             // > 0: the remaining epochs of an update are skipped once an epoch's KL exceeds it
  float lr = 2.5e-4f, lr_end = 0.f;  // linear from lr (first iteration) towards lr_end (after the last)
  std::int64_t anneal_iterations = 1;  // iterations of the anneal: the run's
  float adam_eps = 1e-5f, adam_beta1 = 0.9f, adam_beta2 = 0.999f;

  std::uint64_t seed = 1;

  std::int64_t batch_rows() const noexcept { return num_envs * rollout_steps; }
  std::int64_t minibatch_rows() const noexcept { return batch_rows() / minibatches; }
  bool recurrent() const noexcept { return lstm_hidden > 0; }
};

// Throws std::invalid_argument naming the field when the configuration cannot run.
void validate(const PpoConfig& c);

}  // namespace foxhunt::rl::ppo
