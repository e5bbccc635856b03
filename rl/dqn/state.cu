#include "rl/dqn/state.hpp"

#include <cmath>
#include <string>

#include "gpu/check.hpp"
#include "gpu/launch.cuh"
#include "gpu/philox.cuh"
#include "rl/dqn/schedule.cuh"

namespace foxhunt::rl {
namespace {

using detail::schedule_at;

__global__ void begin_kernel(DqnState* s, DqnSchedule sc) { detail::begin_update(s, sc); }

__global__ void end_kernel(DqnState* s, float* priorities, std::int64_t batch, float skip_priority) {
  const bool skip = s->skip != 0u;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  if (priorities && skip)
    for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < batch; i += stride)
      priorities[i] = skip_priority;
  __syncthreads();  // every thread of block 0 has read s->skip before thread 0 changes the counters
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    s->updates_attempted += 1;
    s->updates_applied += skip ? 0 : 1;
    s->skips_total += skip ? 1u : 0u;
  }
}

__global__ void env_step_kernel(DqnState* s, DqnSchedule sc, std::int64_t num_envs) {
  s->env_steps += num_envs;
  s->act_counter += 1;
  s->act_noise_counter += 1;
  s->epsilon = schedule_at(sc.epsilon_start, sc.epsilon_end, s->env_steps, sc.epsilon_steps);
}

__global__ void target_update_kernel(float* __restrict__ target, const float* __restrict__ online, std::int64_t n,
                                     float tau, std::int64_t period, const DqnState* __restrict__ s) {
  if (s->skip != 0u || s->updates_applied % period != 0) return;  // uniform over the grid
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  const std::int64_t tid = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (tau == 1.f) {
    for (std::int64_t i = tid; i < n; i += stride) target[i] = online[i];
  } else {
    for (std::int64_t i = tid; i < n; i += stride) target[i] = fmaf(tau, online[i] - target[i], target[i]);
  }
}

__global__ void select_kernel(std::int32_t* __restrict__ out, const float* __restrict__ q,
                              const float* __restrict__ epsilon, std::uint64_t seed, std::uint32_t stream_id,
                              const std::uint64_t* __restrict__ counter, std::int64_t rows, std::int64_t actions) {
  const std::uint64_t base = *counter << 32;
  const float eps = epsilon ? *epsilon : 0.f;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t r = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; r < rows; r += stride) {
    std::int32_t a = 0;
    const uint4 bits = gpu::random_bits4(seed, stream_id, base + static_cast<std::uint64_t>(r));
    if (eps > 0.f && gpu::u32_to_uniform_closed0(bits.x) < eps) {
      a = static_cast<std::int32_t>((static_cast<std::uint64_t>(bits.y) * static_cast<std::uint64_t>(actions)) >> 32);
    } else {
      const float* row = q + r * actions;
      float bv = row[0];
      for (std::int64_t k = 1; k < actions; ++k)
        if (row[k] > bv) {
          bv = row[k];
          a = static_cast<std::int32_t>(k);
        }
    }
    out[r] = a;
  }
}

__global__ void q_mean_kernel(float* __restrict__ q_mean, const float* __restrict__ q,
                              const std::int32_t* __restrict__ acts, std::int64_t batch, std::int64_t branches,
                              std::int64_t actions) {
  __shared__ float partial[gpu::kBlock];
  float s = 0.f;
  const std::int64_t rows = batch * branches;
  for (std::int64_t r = threadIdx.x; r < rows; r += blockDim.x) s += q[r * actions + acts[r]];
  partial[threadIdx.x] = s;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w >>= 1) {
    if (static_cast<int>(threadIdx.x) < w) partial[threadIdx.x] += partial[threadIdx.x + w];
    __syncthreads();
  }
  if (threadIdx.x == 0) *q_mean = partial[0] / static_cast<float>(rows);
}

}  // namespace

float linear_schedule(float start, float end, std::int64_t t, std::int64_t duration) {
  return schedule_at(start, end, t, duration);
}

void dqn_begin_update(DqnState* state, const DqnSchedule& schedule, cudaStream_t stream) {
  FH_EXPECT(state, "dqn_begin_update: null state");
  begin_kernel<<<1, 1, 0, stream>>>(state, schedule);
  FH_CHECK_LAUNCH();
}

void dqn_end_update(DqnState* state, float* priorities, std::int64_t batch, float skip_priority, cudaStream_t stream) {
  FH_EXPECT(state && batch >= 0, "dqn_end_update: null state or negative batch");
  FH_EXPECT(std::isfinite(skip_priority) && skip_priority > 0.f,
            "dqn_end_update: skip_priority must be finite and > 0");
  // One block: the counter update must follow every read of s->skip (the __syncthreads above).
  end_kernel<<<1, gpu::kBlock, 0, stream>>>(state, priorities, batch, skip_priority);
  FH_CHECK_LAUNCH();
}

void dqn_after_env_step(DqnState* state, const DqnSchedule& schedule, std::int64_t num_envs, cudaStream_t stream) {
  FH_EXPECT(state && num_envs >= 1, "dqn_after_env_step: null state or num_envs < 1");
  env_step_kernel<<<1, 1, 0, stream>>>(state, schedule, num_envs);
  FH_CHECK_LAUNCH();
}

void target_update(float* target, const float* online, std::int64_t n, float tau, std::int64_t period,
                   const DqnState* state, cudaStream_t stream) {
  FH_EXPECT(tau > 0.f && tau <= 1.f, "target_update: tau must be in (0, 1], got " + std::to_string(tau));
  FH_EXPECT(period >= 1, "target_update: period must be >= 1, got " + std::to_string(period));
  FH_EXPECT(n >= 0, "target_update: n must be >= 0");
  if (n == 0) return;
  FH_EXPECT(target && online && state, "target_update: null pointer");
  target_update_kernel<<<gpu::grid_stride_blocks(n), gpu::kBlock, 0, stream>>>(target, online, n, tau, period, state);
  FH_CHECK_LAUNCH();
}

void select_actions(std::int32_t* actions, const float* q, const float* epsilon, std::uint64_t seed,
                    std::uint32_t stream_id, const std::uint64_t* counter, std::int64_t rows, std::int64_t branches,
                    std::int64_t actions_count, cudaStream_t stream) {
  FH_EXPECT(rows >= 0 && branches >= 1 && actions_count >= 1,
            "select_actions: need rows >= 0, branches >= 1, actions >= 1");
  FH_EXPECT(rows * branches < (std::int64_t{1} << 32), "select_actions: rows * branches must be < 2^32");
  if (rows == 0) return;
  FH_EXPECT(actions && q && counter, "select_actions: null pointer");
  const std::int64_t n = rows * branches;
  select_kernel<<<gpu::grid_stride_blocks(n), gpu::kBlock, 0, stream>>>(actions, q, epsilon, seed, stream_id, counter,
                                                                        n, actions_count);
  FH_CHECK_LAUNCH();
}

void taken_q_mean(float* q_mean, const float* q, const std::int32_t* actions, std::int64_t batch, std::int64_t branches,
                  std::int64_t actions_count, cudaStream_t stream) {
  FH_EXPECT(batch >= 1 && branches >= 1 && actions_count >= 1, "taken_q_mean: need batch, branches, actions >= 1");
  FH_EXPECT(q_mean && q && actions, "taken_q_mean: null pointer");
  q_mean_kernel<<<1, gpu::kBlock, 0, stream>>>(q_mean, q, actions, batch, branches, actions_count);
  FH_CHECK_LAUNCH();
}

}  // namespace foxhunt::rl
