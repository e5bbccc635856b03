#include "gpu/grad_norm.hpp"

#include <string>

#include "gpu/check.hpp"
#include "gpu/launch.cuh"
#include "gpu/partial_sum.cuh"

namespace foxhunt::gpu {
namespace {

struct SqrtOf {
  __device__ float operator()(float sum) const { return sqrtf(sum); }
};

__device__ __forceinline__ float clip_coefficient(float norm, float max_norm) {
  const float c = max_norm / (norm + 1e-6f);
  return c >= 1.f ? 1.f : c;  // NaN fails the comparison and propagates, as torch.clamp(max=1)
}

__global__ void sum_squares_kernel(float* __restrict__ partials, const float* __restrict__ grad, std::int64_t n,
                                   bool vec4) {
  const std::int64_t tid = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  float acc = 0.f;
  std::int64_t done = 0;
  if (vec4) {
    const std::int64_t n4 = n / 4;
    for (std::int64_t j = tid; j < n4; j += stride) {
      const float4 g = reinterpret_cast<const float4*>(grad)[j];
      acc = fmaf(g.x, g.x, acc);
      acc = fmaf(g.y, g.y, acc);
      acc = fmaf(g.z, g.z, acc);
      acc = fmaf(g.w, g.w, acc);
    }
    done = n4 * 4;
  }
  for (std::int64_t i = done + tid; i < n; i += stride) acc = fmaf(grad[i], grad[i], acc);
  acc = block_sum(acc);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

__global__ void clip_scale_kernel(float* scale, const float* norm, float max_norm) {
  *scale = clip_coefficient(*norm, max_norm);
}

__global__ void combine_norms_kernel(float* norm, const float* other) {
  *norm = sqrtf(*norm * *norm + *other * *other);
}

__global__ void clip_grad_kernel(float* __restrict__ grad, const float* __restrict__ norm, float max_norm,
                                 std::int64_t n, bool vec4) {
  const float c = clip_coefficient(*norm, max_norm);
  if (c == 1.f) return;  // uniform across the grid: nothing to scale, skip the memory traffic
  const std::int64_t tid = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  std::int64_t done = 0;
  if (vec4) {
    const std::int64_t n4 = n / 4;
    auto* g4 = reinterpret_cast<float4*>(grad);
    for (std::int64_t j = tid; j < n4; j += stride) {
      float4 g = g4[j];
      g.x *= c;
      g.y *= c;
      g.z *= c;
      g.w *= c;
      g4[j] = g;
    }
    done = n4 * 4;
  }
  for (std::int64_t i = done + tid; i < n; i += stride) grad[i] *= c;
}

}  // namespace

std::size_t grad_norm_workspace_bytes(std::int64_t n) { return partial_bytes(n); }

void global_grad_norm(float* norm, const float* grad, std::int64_t n, void* workspace, cudaStream_t stream) {
  FH_EXPECT(n >= 0, "global_grad_norm: n must be >= 0");
  FH_EXPECT(norm != nullptr, "global_grad_norm: norm (device scalar) must not be null");
  if (n == 0) {
    FH_CHECK(cudaMemsetAsync(norm, 0, sizeof(float), stream));
    return;
  }
  FH_EXPECT(grad != nullptr, "global_grad_norm: grad must not be null");
  FH_EXPECT(workspace != nullptr, "global_grad_norm: workspace must not be null (size: grad_norm_workspace_bytes)");
  auto* partials = static_cast<float*>(workspace);
  const int blocks = partial_blocks(n);
  sum_squares_kernel<<<blocks, kBlock, 0, stream>>>(partials, grad, n, aligned16(grad));
  FH_CHECK_LAUNCH();
  finish_partial_sum_kernel<<<1, kBlock, 0, stream>>>(norm, partials, blocks, SqrtOf{});
  FH_CHECK_LAUNCH();
}

void clip_scale(float* scale, const float* norm, float max_norm, cudaStream_t stream) {
  FH_EXPECT(scale != nullptr && norm != nullptr, "clip_scale: scale and norm (device scalars) must not be null");
  FH_EXPECT(max_norm > 0.f, "clip_scale: max_norm must be > 0, got " + std::to_string(max_norm));
  clip_scale_kernel<<<1, 1, 0, stream>>>(scale, norm, max_norm);
  FH_CHECK_LAUNCH();
}

void combine_norms(float* norm, const float* other, cudaStream_t stream) {
  FH_EXPECT(norm != nullptr && other != nullptr, "combine_norms: norm and other (device scalars) must not be null");
  combine_norms_kernel<<<1, 1, 0, stream>>>(norm, other);
  FH_CHECK_LAUNCH();
}

void clip_grad_norm(float* grad, const float* norm, float max_norm, std::int64_t n, cudaStream_t stream) {
  FH_EXPECT(n >= 0, "clip_grad_norm: n must be >= 0");
  FH_EXPECT(max_norm > 0.f, "clip_grad_norm: max_norm must be > 0, got " + std::to_string(max_norm));
  if (n == 0) return;
  FH_EXPECT(grad != nullptr && norm != nullptr, "clip_grad_norm: grad and norm must not be null");
  clip_grad_kernel<<<grid_stride_blocks(n), kBlock, 0, stream>>>(grad, norm, max_norm, n, aligned16(grad));
  FH_CHECK_LAUNCH();
}

}  // namespace foxhunt::gpu
