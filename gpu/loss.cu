#include "gpu/loss.hpp"

#include <cmath>
#include <string>

#include "gpu/check.hpp"
#include "gpu/launch.cuh"
#include "gpu/loss.cuh"
#include "gpu/partial_sum.cuh"

namespace foxhunt::gpu {
namespace {

// Each loss maps d = pred - target to the unweighted term and writes its derivative in dl
// (the terms themselves: gpu/loss.cuh).
struct MseTerm {
  __device__ float operator()(float d, float& dl) const { return mse_term(d, dl); }
};

struct HuberTerm {
  float delta;
  __device__ float operator()(float d, float& dl) const { return huber_term(d, delta, dl); }
};

// Mean-reduction divides in double: n above 2^24 is not exact in float.
struct MeanOf {
  double count;
  __device__ float operator()(float sum) const { return static_cast<float>(static_cast<double>(sum) / count); }
};

// One pass: loss terms summed per block into partials[blockIdx.x], gradient written when non-null.
template <class Term>
__global__ void pointwise_loss_kernel(float* __restrict__ partials, float* __restrict__ grad,
                                      const float* __restrict__ pred, const float* __restrict__ target,
                                      const float* __restrict__ weights, std::int64_t n, float grad_scale, bool vec4,
                                      Term term) {
  const std::int64_t tid = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  float acc = 0.f;
  std::int64_t done = 0;
  if (vec4) {
    const std::int64_t n4 = n / 4;
    for (std::int64_t j = tid; j < n4; j += stride) {
      const float4 p = reinterpret_cast<const float4*>(pred)[j];
      const float4 t = reinterpret_cast<const float4*>(target)[j];
      const float4 w = weights ? reinterpret_cast<const float4*>(weights)[j] : make_float4(1.f, 1.f, 1.f, 1.f);
      float4 g;
      acc += w.x * term(p.x - t.x, g.x);
      acc += w.y * term(p.y - t.y, g.y);
      acc += w.z * term(p.z - t.z, g.z);
      acc += w.w * term(p.w - t.w, g.w);
      if (grad) {
        g.x *= w.x * grad_scale;
        g.y *= w.y * grad_scale;
        g.z *= w.z * grad_scale;
        g.w *= w.w * grad_scale;
        reinterpret_cast<float4*>(grad)[j] = g;
      }
    }
    done = n4 * 4;
  }
  for (std::int64_t i = done + tid; i < n; i += stride) {
    const float w = weights ? weights[i] : 1.f;
    float g;
    acc += w * term(pred[i] - target[i], g);
    if (grad) grad[i] = g * w * grad_scale;
  }
  acc = block_sum(acc);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

// Pinball loss over pred (n, Q): element e = i*Q + q pairs with target[i] and taus[q].
__device__ __forceinline__ float pinball(float pred, float target, float tau, float grad_scale, float& g) {
  const float u = target - pred;
  const float slope = u < 0.f ? tau - 1.f : tau;  // tau - 1{u < 0}
  g = -slope * grad_scale;
  return u * slope;
}

__global__ void quantile_loss_kernel(float* __restrict__ partials, float* __restrict__ grad,
                                     const float* __restrict__ pred, const float* __restrict__ target,
                                     const float* __restrict__ taus, std::int64_t total, std::int64_t q_count,
                                     float grad_scale, bool vec4) {
  const std::int64_t tid = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  float acc = 0.f;
  std::int64_t done = 0;
  if (vec4) {
    const std::int64_t n4 = total / 4;
    for (std::int64_t j = tid; j < n4; j += stride) {
      const float4 p = reinterpret_cast<const float4*>(pred)[j];
      const float pv[4] = {p.x, p.y, p.z, p.w};
      float gv[4];
      std::int64_t row = (4 * j) / q_count;  // one division per 4 elements; walk the rest
      std::int64_t q = 4 * j - row * q_count;
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        acc += pinball(pv[c], target[row], taus[q], grad_scale, gv[c]);
        if (++q == q_count) {
          q = 0;
          ++row;
        }
      }
      if (grad) reinterpret_cast<float4*>(grad)[j] = make_float4(gv[0], gv[1], gv[2], gv[3]);
    }
    done = n4 * 4;
  }
  for (std::int64_t e = done + tid; e < total; e += stride) {
    const std::int64_t row = e / q_count;
    float g;
    acc += pinball(pred[e], target[row], taus[e - row * q_count], grad_scale, g);
    if (grad) grad[e] = g;
  }
  acc = block_sum(acc);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

__global__ void huber_elementwise_kernel(float* __restrict__ out, const float* __restrict__ pred,
                                         const float* __restrict__ target, std::int64_t n, HuberTerm term, bool vec4) {
  const std::int64_t tid = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  std::int64_t done = 0;
  float unused;
  if (vec4) {
    const std::int64_t n4 = n / 4;
    for (std::int64_t j = tid; j < n4; j += stride) {
      const float4 p = reinterpret_cast<const float4*>(pred)[j];
      const float4 t = reinterpret_cast<const float4*>(target)[j];
      reinterpret_cast<float4*>(out)[j] = make_float4(term(p.x - t.x, unused), term(p.y - t.y, unused),
                                                      term(p.z - t.z, unused), term(p.w - t.w, unused));
    }
    done = n4 * 4;
  }
  for (std::int64_t i = done + tid; i < n; i += stride) out[i] = term(pred[i] - target[i], unused);
}

void expect_common(const float* loss, const float* pred, const float* target, std::int64_t n, const void* workspace,
                   const char* name) {
  const std::string op(name);
  FH_EXPECT(n >= 0, op + ": n must be >= 0");
  FH_EXPECT(loss != nullptr, op + ": the loss output (device scalar) must not be null");
  if (n > 0) {
    FH_EXPECT(pred != nullptr && target != nullptr, op + ": pred and target must not be null");
    FH_EXPECT(workspace != nullptr, op + ": workspace must not be null (size: loss_workspace_bytes)");
  }
}

template <class Term>
void pointwise_loss(float* loss, float* grad, const float* pred, const float* target, const float* weights,
                    std::int64_t n, void* workspace, cudaStream_t stream, Term term) {
  if (n == 0) {  // an empty mean is reported as 0 rather than leaving a stale scalar behind
    FH_CHECK(cudaMemsetAsync(loss, 0, sizeof(float), stream));
    return;
  }
  auto* partials = static_cast<float*>(workspace);
  const int blocks = partial_blocks(n);
  const bool vec4 = aligned16(pred) && aligned16(target) && aligned16(weights) && aligned16(grad);
  const float grad_scale = static_cast<float>(1.0 / static_cast<double>(n));
  pointwise_loss_kernel<<<blocks, kBlock, 0, stream>>>(partials, grad, pred, target, weights, n, grad_scale, vec4,
                                                       term);
  FH_CHECK_LAUNCH();
  finish_partial_sum_kernel<<<1, kBlock, 0, stream>>>(loss, partials, blocks, MeanOf{static_cast<double>(n)});
  FH_CHECK_LAUNCH();
}

}  // namespace

std::size_t loss_workspace_bytes(std::int64_t elements) { return partial_bytes(elements); }

void mse_loss(float* loss, float* grad, const float* pred, const float* target, const float* weights, std::int64_t n,
              void* workspace, cudaStream_t stream) {
  expect_common(loss, pred, target, n, workspace, "mse_loss");
  pointwise_loss(loss, grad, pred, target, weights, n, workspace, stream, MseTerm{});
}

void huber_loss(float* loss, float* grad, const float* pred, const float* target, const float* weights, std::int64_t n,
                float delta, void* workspace, cudaStream_t stream) {
  expect_common(loss, pred, target, n, workspace, "huber_loss");
  FH_EXPECT(delta > 0.f, "huber_loss: delta must be > 0, got " + std::to_string(delta));
  pointwise_loss(loss, grad, pred, target, weights, n, workspace, stream, HuberTerm{delta});
}

void quantile_loss(float* loss, float* grad, const float* pred, const float* target, const float* taus, std::int64_t n,
                   std::int64_t num_quantiles, void* workspace, cudaStream_t stream) {
  expect_common(loss, pred, target, n, workspace, "quantile_loss");
  FH_EXPECT(num_quantiles >= 1, "quantile_loss: num_quantiles must be >= 1, got " + std::to_string(num_quantiles));
  FH_EXPECT(n == 0 || taus != nullptr, "quantile_loss: taus must not be null");
  if (n == 0) {
    FH_CHECK(cudaMemsetAsync(loss, 0, sizeof(float), stream));
    return;
  }
  const std::int64_t total = n * num_quantiles;
  auto* partials = static_cast<float*>(workspace);
  const int blocks = partial_blocks(total);
  const bool vec4 = aligned16(pred) && aligned16(grad);
  const float grad_scale = static_cast<float>(1.0 / static_cast<double>(total));
  quantile_loss_kernel<<<blocks, kBlock, 0, stream>>>(partials, grad, pred, target, taus, total, num_quantiles,
                                                      grad_scale, vec4);
  FH_CHECK_LAUNCH();
  finish_partial_sum_kernel<<<1, kBlock, 0, stream>>>(loss, partials, blocks, MeanOf{static_cast<double>(total)});
  FH_CHECK_LAUNCH();
}

void huber_elementwise(float* out, const float* pred, const float* target, std::int64_t n, float delta,
                       cudaStream_t stream) {
  FH_EXPECT(n >= 0, "huber_elementwise: n must be >= 0");
  FH_EXPECT(delta > 0.f, "huber_elementwise: delta must be > 0, got " + std::to_string(delta));
  if (n == 0) return;
  FH_EXPECT(out != nullptr && pred != nullptr && target != nullptr,
            "huber_elementwise: out, pred and target must not be null");
  const bool vec4 = aligned16(out) && aligned16(pred) && aligned16(target);
  huber_elementwise_kernel<<<grid_stride_blocks(n), kBlock, 0, stream>>>(out, pred, target, n, HuberTerm{delta}, vec4);
  FH_CHECK_LAUNCH();
}

}  // namespace foxhunt::gpu
