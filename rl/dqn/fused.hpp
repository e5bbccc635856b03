#pragma once
// Fused kernels of the DQN update: each replaces several small launches (graph nodes) of the
// generic path with one, computing the same quantities in the same meaning.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "gpu/adam.hpp"
#include "rl/dqn/state.hpp"
#include "rl/dqn/targets.hpp"

namespace foxhunt::rl {

// out (2n) = [a (n), b (n)]: stacks s and s' so that one online forward covers both (double DQN).
// out must not alias a or b.
void dqn_stack_rows(float* out, const float* a, const float* b, std::int64_t n, cudaStream_t stream);

// Targets, TD loss, priorities and the loss statistics of one Z == 1 update, in ONE block (so the
// batch sums have a fixed order; the workspace overload below: several blocks for large batches):
// per sample b, with D branches of A actions (argmax ties go to the lowest index),
//   y_b          = returns[b] + discounts[b] * mean_d q_eval[b, d, argmax_a q_select[b, d, :]]
//                  (double DQN: q_select = online(s'), q_eval = target(s'); plain DQN: both
//                  target(s'); D > 1: BDQ's mean over branches)
//   delta_bd     = q[b, d, actions[b, d]] - y_b
//   d_q[b, d, a] = w_b / (B D) * l'(delta_bd) at the taken action, 0 elsewhere (fully written)
//   priorities[b] = sum_d |delta_bd| + priority_eps
//   l: Huber(delta) = 0.5 d^2 if |d| < delta else delta (|d| - 0.5 delta), l' = clamp(d, ±delta);
//      MSE = d^2, l' = 2 d (gpu/loss.cuh)
//   state->loss   = sum_b w_b / (B D) * sum_d l(delta_bd)   (accumulated in double)
//   state->q_mean = mean over (b, d) of q[b, d, actions[b, d]]
//   state->skip   = 1 when the loss is not finite (never cleared here).
// weights nullable (= 1), priorities nullable.
void dqn_td_fused(float* d_q, float* priorities, DqnState* state, const float* q, const float* q_select,
                  const float* q_eval, const std::int32_t* actions, const float* returns, const float* discounts,
                  const float* weights, std::int64_t batch, std::int64_t branches, std::int64_t actions_count,
                  TdLoss kind, float huber_delta, float priority_eps, cudaStream_t stream);

// Workspace of the dqn_td_fused overload below for this batch (a completion counter and per-block
// sums). Zero it once before the first call; each call leaves it ready for the next.
std::size_t dqn_td_fused_workspace_bytes(std::int64_t batch);

// dqn_td_fused with a workspace (dqn_td_fused_workspace_bytes(batch), 16-byte aligned; nullptr: one
// block, as above). Batches above 1024 then run one sample per thread over several blocks; the
// last block to finish adds the per-block sums in block order (no float atomics; the same bits for
// a given batch, not necessarily the one-block bits). Batches up to 1024: one block either way.
void dqn_td_fused(float* d_q, float* priorities, DqnState* state, const float* q, const float* q_select,
                  const float* q_eval, const std::int32_t* actions, const float* returns, const float* discounts,
                  const float* weights, std::int64_t batch, std::int64_t branches, std::int64_t actions_count,
                  TdLoss kind, float huber_delta, float priority_eps, void* workspace, cudaStream_t stream);

// Workspace of dqn_grad_guard for n gradients (partials and a completion counter). The workspace
// must be zeroed once before the first call; each call leaves it ready for the next.
std::size_t dqn_grad_guard_workspace_bytes(std::int64_t n);

// One kernel over the flat gradients (n), replacing flag_nonfinite + global_grad_norm + clip_scale:
//   state->skip = 1 when any gradient is NaN/inf (never cleared here),
//   state->grad_norm = sqrt(sum grad^2) (the same two-pass order as gpu::global_grad_norm, so the
//     same bits), and when max_grad_norm > 0 state->clip_scale = min(1, max / (norm + 1e-6)).
//   priorities (batch) (nullable) = skip_priority everywhere when the update is skipped (a
//     non-finite loss or gradient), so they are final when this kernel ends: the priority update
//     can run beside Adam instead of after it.
// The last block to finish adds the per-block partials (a completion counter, no float atomics).
void dqn_grad_guard(DqnState* state, float* priorities, const float* grads, std::int64_t n, float max_grad_norm,
                    std::int64_t batch, float skip_priority, void* workspace, cudaStream_t stream);

// Workspace of dqn_end_and_target_update: a completion counter. Zero it once before the first call.
inline constexpr std::size_t kDqnEndWorkspaceBytes = 16;

// dqn_end_update + target_update + the non-finite-parameter check (rl/dqn/state.hpp), one kernel:
//   skip = state->skip; applied = state->updates_applied + !skip
//   priorities (B) (nullable) = skip_priority everywhere when skip
//   when !skip and applied % period == 0: target = tau * online + (1 - tau) * target (tau 1: copy)
//   state->params_nonfinite = 1 when any online parameter is NaN/inf (always checked)
//   then, by the last block to finish (after every block has read skip and updates_applied):
//   updates_attempted += 1, updates_applied = applied, skips_total += skip.
void dqn_end_and_target_update(DqnState* state, float* priorities, std::int64_t batch, float skip_priority,
                               float* target, const float* online, std::int64_t n, float tau, std::int64_t period,
                               void* workspace, cudaStream_t stream);

// gpu::adam_step_device (lr = state->lr, step = state->updates_applied, grad_scale =
// &state->clip_scale when clip, skip_flag = &state->skip) followed by dqn_end_and_target_update,
// in ONE pass over the flat buffers (one graph node less, and the parameters are read once): each
// element's new parameter feeds its target update and the non-finite check directly. Same
// arithmetic, element for element, as the two launches in sequence (bit-identical results).
// online, adam_m, adam_v, grads, target: (n); priorities (batch) nullable. workspace: as
// dqn_end_and_target_update (kDqnEndWorkspaceBytes, zeroed once).
void dqn_adam_end_and_target_update(DqnState* state, float* online, float* adam_m, float* adam_v, float* target,
                                    float* priorities, const float* grads, std::int64_t n, std::int64_t batch,
                                    const gpu::AdamConfig& adam, bool clip, float skip_priority, float tau,
                                    std::int64_t period, void* workspace, cudaStream_t stream);

}  // namespace foxhunt::rl
