#pragma once
// DQN targets and TD losses on the device: (double) DQN n-step targets, with BDQ's mean over
// branches; the weighted Huber / MSE TD loss with its gradient and new replay priorities; n-step
// returns from a reward window. Q tensors are (B, D, A): D action branches of A actions (D = 1 for
// plain DQN).
#include <cuda_runtime.h>

#include <cstdint>

namespace foxhunt::rl {

// Greedy action per branch of q (B, D, A): argmax_a, ties to the lowest index. out (B, D).
void greedy_actions(std::int32_t* out, const float* q, std::int64_t batch, std::int64_t branches, std::int64_t actions,
                    cudaStream_t stream);

// y (B) = returns[b] + discounts[b] * mean_d q_eval[b, d, a*_d],  a*_d = argmax_a q_select[b, d, :].
// Double DQN: q_select = online(s'), q_eval = target(s'); plain DQN: both target(s'). With D = 1 this
// is y = R + gamma^n (1 - done) Q_target(s', argmax Q_online(s')); with D > 1 it is BDQ's target.
// next_actions (B, D) (nullable): the a* used.
void dqn_targets(float* y, std::int32_t* next_actions, const float* q_select, const float* q_eval, const float* returns,
                 const float* discounts, std::int64_t batch, std::int64_t branches, std::int64_t actions,
                 cudaStream_t stream);

enum class TdLoss : std::uint8_t { huber, mse };

// TD errors delta_bd = q[b, d, actions[b, d]] - y[b] of the online Q (B, D, A):
//   sample_loss[b] = w_b / (B D) * sum_d l(delta_bd)   (sum over b = the batch loss: mean over b and d)
//   d_q[b, d, a]   = w_b / (B D) * l'(delta_bd) at the taken action, 0 elsewhere (fully written)
//   priorities[b]  = sum_d |delta_bd| + priority_eps   (BDQ: sum over branches)
// l: Huber(delta) = 0.5 d^2 if |d| < delta else delta (|d| - 0.5 delta), l' = clamp(d, ±delta);
//    MSE = d^2, l' = 2 d. weights (B) nullable (= 1). priorities nullable.
void td_loss(float* d_q, float* sample_loss, float* priorities, const float* q, const std::int32_t* actions,
             const float* y, const float* weights, std::int64_t batch, std::int64_t branches,
             std::int64_t actions_count, TdLoss kind, float huber_delta, float priority_eps, cudaStream_t stream);

// From unweighted per-sample losses l_b (C51's cross-entropy):
//   weighted_loss[b] = w_b * l_b / B  (sums to the batch loss),  priorities[b] = l_b + priority_eps.
// weights nullable (= 1); priorities nullable.
void weighted_loss_priorities(float* weighted_loss, float* priorities, const float* sample_loss, const float* weights,
                              std::int64_t batch, float priority_eps, cudaStream_t stream);

// n-step returns from a window of k = horizon steps per row (rows, horizon), step 0 first:
//   m = 1 + the first step t with terminated or truncated set (horizon if none)
//   returns[r]   = sum_{t < m} gamma^t rewards[r, t]
//   discounts[r] = 0 if terminated at step m - 1, else gamma^m (truncation still bootstraps)
//   bootstrap[r] = m - 1: the step whose next observation is the bootstrap state (nullable).
void nstep_returns(float* returns, float* discounts, std::int32_t* bootstrap, const float* rewards,
                   const std::uint8_t* terminated, const std::uint8_t* truncated, std::int64_t rows,
                   std::int64_t horizon, float gamma, cudaStream_t stream);

}  // namespace foxhunt::rl
