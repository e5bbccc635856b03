#pragma once
// The DQN loss kind, and the target-side kernels of the C51 update (rl/dqn/learner.cu): the greedy
// next actions whose target distribution c51_project moves, and the importance-weighted per-sample
// losses with their replay priorities. The Z == 1 targets and TD loss are one fused kernel
// (rl/dqn/fused.hpp). Q tensors are (B, D, A): D action branches of A actions.
#include <cuda_runtime.h>

#include <cstdint>

namespace foxhunt::rl {

enum class TdLoss : std::uint8_t { huber, mse };

// Greedy action per branch of q (B, D, A): argmax_a, ties to the lowest index. out (B, D).
void greedy_actions(std::int32_t* out, const float* q, std::int64_t batch, std::int64_t branches, std::int64_t actions,
                    cudaStream_t stream);

// From unweighted per-sample losses l_b (C51's cross-entropy):
//   weighted_loss[b] = w_b * l_b / B  (sums to the batch loss),  priorities[b] = l_b + priority_eps.
// weights nullable (= 1); priorities nullable.
void weighted_loss_priorities(float* weighted_loss, float* priorities, const float* sample_loss, const float* weights,
                              std::int64_t batch, float priority_eps, cudaStream_t stream);

}  // namespace foxhunt::rl
