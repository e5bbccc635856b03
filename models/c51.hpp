#pragma once
// Categorical (C51) distributional head (Bellemare et al. 2017): Z atoms z_i = v_min + i * dz,
// dz = (v_max - v_min) / (Z - 1); per action a softmax over atoms (gpu/softmax). This file holds the
// parts specific to C51: the expected value, the projection of the Bellman-shifted target
// distribution back onto the support, and the cross-entropy loss with its logit gradient.
#include <cuda_runtime.h>

#include <cstdint>

namespace foxhunt::models {

// q (rows) = sum_i probs[r, i] * z_i.   probs (rows, Z).  Z >= 2, v_min < v_max.
void c51_expectation(float* q, const float* probs, std::int64_t rows, std::int64_t atoms, float v_min, float v_max,
                     cudaStream_t stream);

// Target distribution m (B, Z) of the categorical algorithm: for every atom j of the next-state
// distribution p = next_probs[b, next_actions[b], :] (next_probs (B, A, Z)):
//   Tz = clamp(returns[b] + discounts[b] * z_j, v_min, v_max), x = (Tz - v_min) / dz,
//   l = floor(x), u = ceil(x); m[l] += p_j (u - x), m[u] += p_j (x - l); all of p_j to l when l == u.
// discounts[b] = gamma^n (1 - terminated), so a terminal transition puts all mass at clamp(R).
// Sequential over atoms per sample: deterministic.
void c51_project(float* m, const float* next_probs, const std::int32_t* next_actions, const float* returns,
                 const float* discounts, std::int64_t batch, std::int64_t actions, std::int64_t atoms, float v_min,
                 float v_max, cudaStream_t stream);

// Cross-entropy of the chosen action's distribution against m, from logits (B, A, Z):
//   sample_loss[b] = -sum_i m[b, i] * log_softmax(logits[b, actions[b], :])_i        (unweighted)
//   d_logits[b, a, i] = w_b / B * (softmax(logits[b, a, :])_i - m[b, i]) for a = actions[b], else 0,
// i.e. the gradient of mean_b w_b * sample_loss[b] (m sums to 1). weights (B) nullable (= 1).
// d_logits is fully written (B, A, Z).
void c51_cross_entropy(float* d_logits, float* sample_loss, const float* logits, const std::int32_t* actions,
                       const float* m, const float* weights, std::int64_t batch, std::int64_t actions_count,
                       std::int64_t atoms, cudaStream_t stream);

}  // namespace foxhunt::models
