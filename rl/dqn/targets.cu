#include "rl/dqn/targets.hpp"

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

void weighted_loss_priorities(float* weighted_loss, float* priorities, const float* sample_loss, const float* weights,
                              std::int64_t batch, float priority_eps, cudaStream_t stream) {
  FH_EXPECT(batch >= 0 && priority_eps >= 0.f, "weighted_loss_priorities: need batch >= 0, priority_eps >= 0");
  if (batch == 0) return;
  FH_EXPECT(weighted_loss && sample_loss, "weighted_loss_priorities: null pointer");
  weighted_kernel<<<gpu::grid_stride_blocks(batch), gpu::kBlock, 0, stream>>>(weighted_loss, priorities, sample_loss,
                                                                              weights, batch, priority_eps);
  FH_CHECK_LAUNCH();
}

}  // namespace foxhunt::rl
