#include "rl/dqn/targets.hpp"

#include <cmath>
#include <string>

#include "gpu/check.hpp"
#include "gpu/launch.cuh"

namespace foxhunt::rl {
namespace {

__device__ __forceinline__ std::int32_t argmax_row(const float* q, std::int64_t n) {
  std::int32_t best = 0;
  float bv = q[0];
  for (std::int64_t a = 1; a < n; ++a)
    if (q[a] > bv) {  // strict: ties keep the lowest index
      bv = q[a];
      best = static_cast<std::int32_t>(a);
    }
  return best;
}

__global__ void greedy_kernel(std::int32_t* __restrict__ out, const float* __restrict__ q, std::int64_t rows,
                              std::int64_t actions) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t r = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; r < rows; r += stride)
    out[r] = argmax_row(q + r * actions, actions);
}

__global__ void targets_kernel(float* __restrict__ y, std::int32_t* __restrict__ next_actions,
                               const float* __restrict__ q_select, const float* __restrict__ q_eval,
                               const float* __restrict__ returns, const float* __restrict__ discounts,
                               std::int64_t batch, std::int64_t branches, std::int64_t actions) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t b = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; b < batch; b += stride) {
    float sum = 0.f;
    for (std::int64_t d = 0; d < branches; ++d) {
      const std::int64_t row = (b * branches + d) * actions;
      const std::int32_t a = argmax_row(q_select + row, actions);
      if (next_actions) next_actions[b * branches + d] = a;
      sum += q_eval[row + a];
    }
    y[b] = fmaf(discounts[b], sum / static_cast<float>(branches), returns[b]);
  }
}

__global__ void td_loss_kernel(float* __restrict__ d_q, float* __restrict__ sample_loss, float* __restrict__ priorities,
                               const float* __restrict__ q, const std::int32_t* __restrict__ acts,
                               const float* __restrict__ y, const float* __restrict__ weights, std::int64_t batch,
                               std::int64_t branches, std::int64_t actions, bool huber, float delta, float eps) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  const float inv_n = 1.f / static_cast<float>(batch * branches);
  for (std::int64_t b = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; b < batch; b += stride) {
    const float scale = (weights ? weights[b] : 1.f) * inv_n;
    float loss = 0.f, prio = 0.f;
    for (std::int64_t d = 0; d < branches; ++d) {
      const std::int64_t row = (b * branches + d) * actions;
      const std::int32_t a = acts[b * branches + d];
      const float td = q[row + a] - y[b];
      const float ad = fabsf(td);
      float l, g;
      if (huber) {
        l = ad < delta ? 0.5f * td * td : delta * (ad - 0.5f * delta);
        g = fminf(fmaxf(td, -delta), delta);
      } else {
        l = td * td;
        g = 2.f * td;
      }
      loss += l;
      prio += ad;
      for (std::int64_t k = 0; k < actions; ++k) d_q[row + k] = k == a ? scale * g : 0.f;
    }
    sample_loss[b] = scale * loss;
    if (priorities) priorities[b] = prio + eps;
  }
}

__global__ void weighted_kernel(float* __restrict__ weighted, float* __restrict__ priorities,
                                const float* __restrict__ loss, const float* __restrict__ weights, std::int64_t batch,
                                float eps) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t b = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; b < batch; b += stride) {
    const float l = loss[b];
    weighted[b] = (weights ? weights[b] : 1.f) * l / static_cast<float>(batch);
    if (priorities) priorities[b] = l + eps;
  }
}

__global__ void nstep_kernel(float* __restrict__ returns, float* __restrict__ discounts,
                             std::int32_t* __restrict__ bootstrap, const float* __restrict__ rewards,
                             const std::uint8_t* __restrict__ terminated, const std::uint8_t* __restrict__ truncated,
                             std::int64_t rows, std::int64_t horizon, float gamma) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t r = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; r < rows; r += stride) {
    float ret = 0.f, g = 1.f;
    bool term = false;
    std::int64_t t = 0;
    for (; t < horizon; ++t) {
      const std::int64_t i = r * horizon + t;
      ret = fmaf(g, rewards[i], ret);
      g *= gamma;
      if (terminated[i]) {
        term = true;
        break;
      }
      if (truncated[i]) break;
    }
    const std::int64_t last = t < horizon ? t : horizon - 1;
    returns[r] = ret;
    discounts[r] = term ? 0.f : g;
    if (bootstrap) bootstrap[r] = static_cast<std::int32_t>(last);
  }
}

void check_qdims(const char* fn, std::int64_t batch, std::int64_t branches, std::int64_t actions) {
  FH_EXPECT(batch >= 0 && branches >= 1 && actions >= 1,
            std::string(fn) + ": need batch >= 0, branches >= 1, actions >= 1; got " + std::to_string(batch) + ", " +
                std::to_string(branches) + ", " + std::to_string(actions));
}

}  // namespace

void greedy_actions(std::int32_t* out, const float* q, std::int64_t batch, std::int64_t branches, std::int64_t actions,
                    cudaStream_t stream) {
  check_qdims("greedy_actions", batch, branches, actions);
  if (batch == 0) return;
  FH_EXPECT(out && q, "greedy_actions: null pointer");
  const std::int64_t rows = batch * branches;
  greedy_kernel<<<gpu::grid_stride_blocks(rows), gpu::kBlock, 0, stream>>>(out, q, rows, actions);
  FH_CHECK_LAUNCH();
}

void dqn_targets(float* y, std::int32_t* next_actions, const float* q_select, const float* q_eval, const float* returns,
                 const float* discounts, std::int64_t batch, std::int64_t branches, std::int64_t actions,
                 cudaStream_t stream) {
  check_qdims("dqn_targets", batch, branches, actions);
  if (batch == 0) return;
  FH_EXPECT(y && q_select && q_eval && returns && discounts, "dqn_targets: null pointer");
  targets_kernel<<<gpu::grid_stride_blocks(batch, 128), 128, 0, stream>>>(y, next_actions, q_select, q_eval, returns,
                                                                          discounts, batch, branches, actions);
  FH_CHECK_LAUNCH();
}

void td_loss(float* d_q, float* sample_loss, float* priorities, const float* q, const std::int32_t* actions,
             const float* y, const float* weights, std::int64_t batch, std::int64_t branches,
             std::int64_t actions_count, TdLoss kind, float huber_delta, float priority_eps, cudaStream_t stream) {
  check_qdims("td_loss", batch, branches, actions_count);
  FH_EXPECT(kind == TdLoss::mse || (huber_delta > 0.f && std::isfinite(huber_delta)),
            "td_loss: huber_delta must be finite and > 0, got " + std::to_string(huber_delta));
  FH_EXPECT(priority_eps >= 0.f, "td_loss: priority_eps must be >= 0");
  if (batch == 0) return;
  FH_EXPECT(d_q && sample_loss && q && actions && y, "td_loss: null pointer");
  td_loss_kernel<<<gpu::grid_stride_blocks(batch, 128), 128, 0, stream>>>(
      d_q, sample_loss, priorities, q, actions, y, weights, batch, branches, actions_count, kind == TdLoss::huber,
      huber_delta, priority_eps);
  FH_CHECK_LAUNCH();
}

void weighted_loss_priorities(float* weighted_loss, float* priorities, const float* sample_loss, const float* weights,
                              std::int64_t batch, float priority_eps, cudaStream_t stream) {
  FH_EXPECT(batch >= 0 && priority_eps >= 0.f, "weighted_loss_priorities: need batch >= 0, priority_eps >= 0");
  if (batch == 0) return;
  FH_EXPECT(weighted_loss && sample_loss, "weighted_loss_priorities: null pointer");
  weighted_kernel<<<gpu::grid_stride_blocks(batch), gpu::kBlock, 0, stream>>>(weighted_loss, priorities, sample_loss,
                                                                              weights, batch, priority_eps);
  FH_CHECK_LAUNCH();
}

void nstep_returns(float* returns, float* discounts, std::int32_t* bootstrap, const float* rewards,
                   const std::uint8_t* terminated, const std::uint8_t* truncated, std::int64_t rows,
                   std::int64_t horizon, float gamma, cudaStream_t stream) {
  FH_EXPECT(rows >= 0 && horizon >= 1, "nstep_returns: need rows >= 0 and horizon >= 1");
  FH_EXPECT(gamma >= 0.f && gamma <= 1.f, "nstep_returns: gamma must be in [0, 1], got " + std::to_string(gamma));
  if (rows == 0) return;
  FH_EXPECT(returns && discounts && rewards && terminated && truncated, "nstep_returns: null pointer");
  nstep_kernel<<<gpu::grid_stride_blocks(rows), gpu::kBlock, 0, stream>>>(returns, discounts, bootstrap, rewards,
                                                                          terminated, truncated, rows, horizon, gamma);
  FH_CHECK_LAUNCH();
}

}  // namespace foxhunt::rl
