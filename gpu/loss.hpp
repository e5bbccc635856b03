#pragma once
// Regression losses for value learning, all f32. Each reduces to the mean over its elements into a
// device scalar (deterministic two-pass sum through a caller-given workspace) and, when `grad` is
// non-null, writes (not accumulates) dLoss/dpred in the same pass over memory.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace foxhunt::gpu {

// Workspace bytes every loss below needs for `elements` summed terms (n, or n * num_quantiles).
std::size_t loss_workspace_bytes(std::int64_t elements);

// *loss = mean_i w_i * (pred_i - target_i)^2 ; grad_i = 2 w_i (pred_i - target_i) / n.
// weights: per-element importance weights (n) or nullptr for 1. grad may be nullptr.
// n == 0 sets *loss = 0 and writes no gradient.
void mse_loss(float* loss, float* grad, const float* pred, const float* target, const float* weights, std::int64_t n,
              void* workspace, cudaStream_t stream);

// PyTorch HuberLoss(delta): with d = pred - target, l = 0.5 d^2 if |d| < delta, else
// delta (|d| - 0.5 delta); *loss = mean_i w_i l_i ; grad_i = w_i clamp(d, -delta, delta) / n.
// delta > 0. n == 0 sets *loss = 0.
void huber_loss(float* loss, float* grad, const float* pred, const float* target, const float* weights, std::int64_t n,
                float delta, void* workspace, cudaStream_t stream);

// Quantile (pinball) loss. pred (n, Q) row-major, target (n), taus (Q).
// u = target_i - pred_iq, rho_tau(u) = u (tau_q - 1{u < 0}); *loss = mean over the n*Q terms;
// grad_iq = -(tau_q - 1{u < 0}) / (n Q). Workspace: loss_workspace_bytes(n * num_quantiles).
// n == 0 sets *loss = 0.
void quantile_loss(float* loss, float* grad, const float* pred, const float* target, const float* taus, std::int64_t n,
                   std::int64_t num_quantiles, void* workspace, cudaStream_t stream);

// Element-wise Huber loss, no reduction and no weights: out_i = l_i as above (n).
// Replay priorities (|TD error|-based) use it.
void huber_elementwise(float* out, const float* pred, const float* target, std::int64_t n, float delta,
                       cudaStream_t stream);

}  // namespace foxhunt::gpu
