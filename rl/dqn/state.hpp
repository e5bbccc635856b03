#pragma once
// DqnState: the learner's per-step scalars and counters in device memory. Kernels read and advance
// them, so a captured update graph never needs re-capture (epsilon, beta and the learning rate
// follow their schedules on the device), and the same struct is the metrics record that leaves the
// device through an ExitSlot<DqnState> (gpu/exit.hpp), never by a copy.
#include <cuda_runtime.h>

#include <cstdint>

namespace foxhunt::rl {

struct DqnState {
  // counters
  std::int64_t updates_applied = 0;                          // Adam steps taken (skipped updates excluded)
  std::int64_t updates_attempted = 0;                        // update graph runs
  std::int64_t env_steps = 0;                                // environment transitions collected (all envs)
  std::uint64_t noise_counter = 0;                           // NoisyNet resamples (Philox counter)
  std::uint64_t act_counter = 0;                             // action-selection draws (Philox counter)
  std::uint64_t act_noise_counter = std::uint64_t{1} << 40;  // NoisyNet resamples for acting (a range
                                                             // disjoint from noise_counter's)
  // training guard
  std::uint32_t skip = 0;              // this update: 1 when the loss or a gradient was non-finite
  std::uint32_t skips_total = 0;       // skipped updates so far
  std::uint32_t dead_units = 0;        // ReLU units inactive over this update's whole batch
  std::uint32_t params_nonfinite = 0;  // 1 when any parameter (weight_mu included) is NaN/inf
  std::int64_t relu_units = 0;         // set once by the learner: dead fraction = dead_units / relu_units
  // scheduled scalars
  float epsilon = 1.f;
  float beta = 0.4f;
  float lr = 1e-3f;
  // this update's statistics
  float loss = 0.f;       // weighted batch loss
  float grad_norm = 0.f;  // global gradient norm before clipping
  float clip_scale = 1.f;
  float q_mean = 0.f;  // mean Q(s, a) of the taken actions
  float pad_ = 0.f;
};

// Linear schedules, evaluated on the device from the counters.
struct DqnSchedule {
  float epsilon_start = 1.f, epsilon_end = 0.05f;
  std::int64_t epsilon_steps = 0;  // env steps of the linear decay (0: epsilon_end at once)
  float beta_start = 0.4f, beta_end = 1.f;
  std::int64_t beta_updates = 0;  // updates of the linear anneal (0: beta_end at once)
  float lr_start = 1e-3f, lr_end = 1e-3f;
  std::int64_t lr_updates = 0;  // updates of the linear anneal (0: lr_end at once)
};

// Host-side reference of the schedules (tests and the CPU config checks use it).
float linear_schedule(float start, float end, std::int64_t t, std::int64_t duration);

// Start of an update: clears skip / dead_units / params_nonfinite, advances noise_counter, sets
// beta and lr from updates_applied. One thread.
void dqn_begin_update(DqnState* state, const DqnSchedule& schedule, cudaStream_t stream);

// End of an update (after Adam): updates_attempted += 1; updates_applied += !skip; skips_total += skip;
// loss statistics stay. priorities (B) (nullable): when skip, every entry becomes skip_priority so that
// the replay never stores a non-finite priority; finite otherwise-unchanged entries stay as they are.
void dqn_end_update(DqnState* state, float* priorities, std::int64_t batch, float skip_priority, cudaStream_t stream);

// After an environment step of num_envs transitions: env_steps += num_envs, act_counter += 1,
// act_noise_counter += 1, epsilon from the schedule. One thread.
void dqn_after_env_step(DqnState* state, const DqnSchedule& schedule, std::int64_t num_envs, cudaStream_t stream);

// Target network update over the flat parameter arrays (n floats), one kernel, read from the state:
// when !skip and updates_applied % period == 0:  target = tau * online + (1 - tau) * target
// (tau == 1: an exact copy). Runs after dqn_end_update (updates_applied counts this update).
void target_update(float* target, const float* online, std::int64_t n, float tau, std::int64_t period,
                   const DqnState* state, cudaStream_t stream);

// Action selection on the device, q (N, D, A) -> actions (N, D): per (row, branch) with probability
// *epsilon a uniform random action, else argmax (ties: lowest index). epsilon nullable (greedy).
// Random numbers: Philox(seed, stream_id, (*counter << 32) + row * D + branch). N * D < 2^32.
void select_actions(std::int32_t* actions, const float* q, const float* epsilon, std::uint64_t seed,
                    std::uint32_t stream_id, const std::uint64_t* counter, std::int64_t rows, std::int64_t branches,
                    std::int64_t actions_count, cudaStream_t stream);

// *q_mean = mean over b of q[b, d, actions[b, d]] averaged over branches (one block, fixed order).
void taken_q_mean(float* q_mean, const float* q, const std::int32_t* actions, std::int64_t batch, std::int64_t branches,
                  std::int64_t actions_count, cudaStream_t stream);

}  // namespace foxhunt::rl
