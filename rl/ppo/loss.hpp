#pragma once
// The PPO losses (Schulman et al. 2017, as CleanRL's ppo.py writes them) over one minibatch of B
// rows, with their gradients with respect to the network outputs, written (not accumulated).
//
// Policy (clipped surrogate with entropy bonus):
//   A    = normalize ? (adv - mean(adv)) / (std(adv) + 1e-8) : adv   (std unbiased, as torch.std)
//   r    = exp(logp_new - old_logp)
//   pg   = mean(max(-A r, -A clamp(r, 1 - eps, 1 + eps)))
//   loss = pg - ent_coef * mean(entropy)
// logp_new and entropy come from the head (rl/ppo/distributions.hpp, the same device code as
// log_prob_entropy). A is a constant of the loss: no gradient flows through the normalization.
// Ties follow torch's autograd: max(x, y) sends half the gradient to each side when x == y
// (which is the case whenever clamp leaves r unchanged, so there d pg_i / d r_i = -A_i); clamp
// passes the gradient for 1 - eps <= r <= 1 + eps (both ends included) and blocks it outside.
// Gaussian: d loss / d log_std_d = (1/B) sum_i (d pg_i / d logp_i) (z_id^2 - 1) - ent_coef.
//
// Value: with R the returns,
//   clip ? 0.5 * mean(max((v - R)^2, (v_old + clamp(v - v_old, -eps, eps) - R)^2)) : 0.5 * mean((v - R)^2)
// times vf_coef (same tie rules).
//
// Reductions are deterministic: per-block partials in double, added in a fixed order (no atomics);
// the grids depend only on B and the head shape, never on the device.
//
// Statistics: LossStats lives on the device and sums per-minibatch means over an update;
// ppo_policy_loss adds pg, mean entropy, approx_kl = mean((r - 1) - log r) (CleanRL's estimator)
// and clip_fraction = mean(|r - 1| > eps), sets last_approx_kl (what a KL early stop reads) and
// counts the minibatch; ppo_value_loss adds the unscaled value loss (without vf_coef) and counts
// nothing, so every field divided by `minibatches` is a per-minibatch mean when each minibatch
// runs both losses. zero_loss_stats starts an update.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "rl/ppo/distributions.hpp"

namespace foxhunt::rl::ppo {

// Device accumulators of one update (sums over minibatches; divide by `minibatches` to report).
struct LossStats {
  float policy_loss, value_loss, entropy, approx_kl, clip_fraction;  // sums of per-minibatch means
  float last_approx_kl;                                              // the latest minibatch's approx KL
  std::uint32_t minibatches;                                         // minibatches accumulated
};

void zero_loss_stats(LossStats* stats, cudaStream_t stream);

// Workspace for ppo_policy_loss with up to max_rows rows of this head shape.
std::size_t policy_loss_workspace_bytes(std::int64_t max_rows, const HeadShape& shape);

// Clipped surrogate with entropy bonus over `rows` rows (B >= 1; B >= 2 when normalize), and its
// gradient. head_out (B, width); log_std (dim), gaussian only. The stored actions: discrete
// (B, branches) or raw (B, dim). old_logp, advantages (B). Writes d_head (B, width) and, gaussian,
// d_log_std (dim) (either may be null: not written); updates *stats as described above.
// workspace: policy_loss_workspace_bytes(max_rows >= rows, shape) bytes, 16-byte aligned.
void ppo_policy_loss(float* d_head, float* d_log_std, LossStats* stats, const float* head_out, const float* log_std,
                     const std::int32_t* discrete, const float* raw, const float* old_logp, const float* advantages,
                     std::int64_t rows, const HeadShape& shape, float clip_eps, float ent_coef, bool normalize,
                     void* workspace, cudaStream_t stream);

// Value loss over B rows: d_values (B) = d (vf_coef * loss) / d v (null: not written); adds the
// unscaled loss into stats->value_loss (null stats: not written). One block: needs no workspace.
void ppo_value_loss(float* d_values, LossStats* stats, const float* values, const float* old_values,
                    const float* returns, std::int64_t rows, float clip_eps, bool clip, float vf_coef,
                    cudaStream_t stream);

}  // namespace foxhunt::rl::ppo
