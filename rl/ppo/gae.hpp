#pragma once
// Generalized advantage estimation (Schulman et al. 2016) over a rollout of T steps of N
// environments, as CleanRL's ppo.py computes it, with Gymnasium's terminated/truncated split.
//
// Layout: every array is time-major (T, N): element (t, i) at t * N + i.
// Convention (the same-step autoreset of rl/envs/vec_env.hpp): at a done step t the row t + 1
// belongs to a new episode, so values[t + 1, i] is not the successor state's value. Hence
//   next_v(t, i) = bootstrap_values[t, i]                 if truncated[t, i] (V(final_obs)),
//                = next_value[i]                          if t == T - 1 (V of the obs after the rollout),
//                = values[t + 1, i]                       otherwise;
//   delta_t      = r_t + gamma * next_v * (1 - terminated_t) - v_t;
//   A_t          = delta_t + gamma * lambda * (1 - done_t) * A_{t+1},  done = terminated | truncated, A_T = 0;
//   returns      = A + values.
// terminated wins over truncated: a row with both set does not bootstrap (the term is dropped by a
// select, so bootstrap_values may hold anything, NaN included, where it is not read).
// The recurrence runs backwards over t in fp32, one thread per environment (coalesced over i).
#include <cuda_runtime.h>

#include <cstdint>

namespace foxhunt::rl::ppo {

// advantages, returns (T, N) written. rewards, values, terminated (T, N); next_value (N).
// truncated and bootstrap_values (T, N) may both be null (no truncations); truncated alone may not.
// Outputs must not alias inputs. steps == 0 or num_envs == 0 launches nothing.
void gae(float* advantages, float* returns, const float* rewards, const float* values, const float* bootstrap_values,
         const float* next_value, const std::uint8_t* terminated, const std::uint8_t* truncated, std::int64_t steps,
         std::int64_t num_envs, float gamma, float lambda, cudaStream_t stream);

}  // namespace foxhunt::rl::ppo
