#include "models/blocks/causal_conv1d.hpp"

#include <cmath>
#include <string>
#include <vector>

#include "gpu/activation.cuh"
#include "gpu/check.hpp"
#include "gpu/launch.cuh"
#include "models/blocks/column_sum.cuh"
#include "models/module.hpp"

namespace foxhunt::models {
namespace {

// The shape with its zero strides resolved.
struct Resolved {
  std::int64_t B, T, C, K, xs, ys, ss;
};

Resolved resolve(const CausalConv1dShape& s, const char* what, bool needs_T) {
  const std::string w(what);
  FH_EXPECT(s.batch >= 0 && s.channels >= 1, w + ": batch must be >= 0 and channels >= 1");
  FH_EXPECT(!needs_T || s.T >= 1, w + ": T must be >= 1, got " + std::to_string(s.T));
  FH_EXPECT(s.kernel >= kConvKernelMin && s.kernel <= kConvKernelMax,
            w + ": kernel must be in [2, 8], got " + std::to_string(s.kernel));
  Resolved r{s.batch,
             needs_T ? s.T : 1,
             s.channels,
             s.kernel,
             s.x_stride ? s.x_stride : s.channels,
             s.y_stride ? s.y_stride : s.channels,
             s.state_stride ? s.state_stride : s.channels * (s.kernel - 1)};
  FH_EXPECT(r.xs >= r.C, w + ": x_stride must be >= channels, got " + std::to_string(r.xs));
  FH_EXPECT(r.ys >= r.C, w + ": y_stride must be >= channels, got " + std::to_string(r.ys));
  FH_EXPECT(r.ss >= r.C * (r.K - 1), w + ": state_stride must be >= channels * (kernel - 1)");
  return r;
}

__device__ __forceinline__ float act(float v, bool silu) {
  return silu ? gpu::activate<gpu::Activation::silu>(v, 0.f) : v;
}

// The pre-activation at row `row` = b * T + t, channel c.
__device__ __forceinline__ float conv_pre(const float* x, const float* w, const float* bias, std::int64_t row,
                                          std::int64_t t, std::int64_t c, const Resolved& s) {
  float acc = bias != nullptr ? bias[c] : 0.f;
  for (std::int64_t k = 0; k < s.K; ++k) {
    const std::int64_t back = s.K - 1 - k;  // x at t - back
    if (t >= back) acc = fmaf(w[c * s.K + k], x[(row - back) * s.xs + c], acc);
  }
  return acc;
}

__global__ void conv_forward_kernel(float* __restrict__ y, const float* __restrict__ x, const float* __restrict__ w,
                                    const float* __restrict__ bias, Resolved s, bool silu) {
  const std::int64_t n = s.B * s.T * s.C;
  for (std::int64_t idx = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; idx < n;
       idx += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t c = idx % s.C, row = idx / s.C, t = row % s.T;
    y[row * s.ys + c] = act(conv_pre(x, w, bias, row, t, c, s), silu);
  }
}

// d_pre (B * T, C) contiguous from dy (y_stride).
__global__ void conv_dpre_kernel(float* __restrict__ d_pre, const float* __restrict__ dy, const float* __restrict__ x,
                                 const float* __restrict__ w, const float* __restrict__ bias, Resolved s, bool silu) {
  const std::int64_t n = s.B * s.T * s.C;
  for (std::int64_t idx = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; idx < n;
       idx += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t c = idx % s.C, row = idx / s.C, t = row % s.T;
    float g = dy[row * s.ys + c];
    if (silu) g *= gpu::activate_grad<gpu::Activation::silu>(conv_pre(x, w, bias, row, t, c, s), 0.f);
    d_pre[idx] = g;
  }
}

// dx[b, t, c] = sum_k w[c, k] d_pre[b, t + (K - 1) - k, c].
__global__ void conv_dx_kernel(float* __restrict__ dx, const float* __restrict__ d_pre, const float* __restrict__ w,
                               Resolved s) {
  const std::int64_t n = s.B * s.T * s.C;
  for (std::int64_t idx = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; idx < n;
       idx += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t c = idx % s.C, row = idx / s.C, t = row % s.T;
    float acc = 0.f;
    for (std::int64_t k = 0; k < s.K; ++k) {
      const std::int64_t ahead = s.K - 1 - k;  // output t + ahead read x_t through w[c, k]
      if (t + ahead < s.T) acc = fmaf(w[c * s.K + k], d_pre[(row + ahead) * s.C + c], acc);
    }
    dx[row * s.xs + c] = acc;
  }
}

// dw's summand at (row, j = c * K + k).
struct WeightGradTerm {
  const float *d_pre, *x;
  Resolved s;
  __device__ float operator()(std::int64_t row, std::int64_t j) const {
    const std::int64_t c = j / s.K, k = j - c * s.K, back = s.K - 1 - k, t = row % s.T;
    return t >= back ? d_pre[row * s.C + c] * x[(row - back) * s.xs + c] : 0.f;
  }
};
struct BiasGradTerm {
  const float* d_pre;
  std::int64_t C;
  __device__ float operator()(std::int64_t row, std::int64_t c) const { return d_pre[row * C + c]; }
};

__global__ void conv_step_kernel(float* __restrict__ y, float* __restrict__ state, const float* __restrict__ x,
                                 const float* __restrict__ w, const float* __restrict__ bias,
                                 const std::uint8_t* __restrict__ reset, Resolved s, bool silu) {
  const std::int64_t n = s.B * s.C;
  for (std::int64_t idx = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; idx < n;
       idx += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t b = idx / s.C, c = idx - b * s.C;
    float* st = state + b * s.ss + c * (s.K - 1);
    const bool fresh = reset != nullptr && reset[b] != 0;
    const float xv = x[b * s.xs + c];
    const float* wc = w + c * s.K;
    float acc = bias != nullptr ? bias[c] : 0.f;
    for (std::int64_t j = 0; j + 1 < s.K; ++j) {
      const float prev = fresh ? 0.f : st[j];
      acc = fmaf(wc[j], prev, acc);
      if (j > 0) st[j - 1] = prev;  // shift: the oldest input leaves
    }
    acc = fmaf(wc[s.K - 1], xv, acc);
    st[s.K - 2] = xv;
    y[b * s.ys + c] = act(acc, silu);
  }
}

struct BackwardBuffers {
  float* d_pre;
  float* partials;
};
BackwardBuffers carve_backward(WorkspaceCarver& c, const Resolved& s) {
  BackwardBuffers b{};
  b.d_pre = c.take<float>(static_cast<std::size_t>(s.B * s.T * s.C));
  b.partials = c.take<float>(blocks_detail::column_sum_floats(s.B * s.T, s.C * s.K));
  return b;
}

}  // namespace

void causal_conv1d_forward(float* y, const float* x, const float* weight, const float* bias,
                           const CausalConv1dShape& shape, bool silu, cudaStream_t stream) {
  const Resolved s = resolve(shape, "causal_conv1d_forward", true);
  const std::int64_t n = s.B * s.T * s.C;
  if (n == 0) return;
  conv_forward_kernel<<<gpu::grid_stride_blocks(n), gpu::kBlock, 0, stream>>>(y, x, weight, bias, s, silu);
  FH_CHECK_LAUNCH();
}

std::size_t causal_conv1d_backward_workspace_bytes(const CausalConv1dShape& shape) {
  const Resolved s = resolve(shape, "causal_conv1d_backward_workspace_bytes", true);
  WorkspaceCarver c;
  carve_backward(c, s);
  return c.bytes();
}

void causal_conv1d_backward(float* dx, float* dweight, float* dbias, const float* dy, const float* x,
                            const float* weight, const float* bias, const CausalConv1dShape& shape, bool silu,
                            std::byte* workspace, cudaStream_t stream) {
  const Resolved s = resolve(shape, "causal_conv1d_backward", true);
  const std::int64_t rows = s.B * s.T, n = rows * s.C;
  if (n == 0) return;
  FH_EXPECT(workspace != nullptr, "causal_conv1d_backward: workspace is null");
  WorkspaceCarver carver(workspace);
  const BackwardBuffers b = carve_backward(carver, s);
  const int blocks = gpu::grid_stride_blocks(n);
  conv_dpre_kernel<<<blocks, gpu::kBlock, 0, stream>>>(b.d_pre, dy, x, weight, bias, s, silu);
  FH_CHECK_LAUNCH();
  if (dx != nullptr) {
    conv_dx_kernel<<<blocks, gpu::kBlock, 0, stream>>>(dx, b.d_pre, weight, s);
    FH_CHECK_LAUNCH();
  }
  if (dweight != nullptr)
    blocks_detail::column_sum(dweight, rows, s.C * s.K, WeightGradTerm{b.d_pre, x, s}, b.partials, stream);
  if (dbias != nullptr) blocks_detail::column_sum(dbias, rows, s.C, BiasGradTerm{b.d_pre, s.C}, b.partials, stream);
}

void causal_conv1d_step(float* y, float* state, const float* x, const float* weight, const float* bias,
                        const std::uint8_t* reset, const CausalConv1dShape& shape, bool silu, cudaStream_t stream) {
  const Resolved s = resolve(shape, "causal_conv1d_step", false);
  const std::int64_t n = s.B * s.C;
  if (n == 0) return;
  conv_step_kernel<<<gpu::grid_stride_blocks(n), gpu::kBlock, 0, stream>>>(y, state, x, weight, bias, reset, s, silu);
  FH_CHECK_LAUNCH();
}

CausalConv1d::CausalConv1d(CausalConv1dSpec spec) : spec_(std::move(spec)) {
  FH_EXPECT(!spec_.name.empty(), "CausalConv1d: name must not be empty");
  FH_EXPECT(spec_.channels >= 1, "CausalConv1d " + spec_.name + ": channels must be >= 1");
  FH_EXPECT(spec_.kernel >= kConvKernelMin && spec_.kernel <= kConvKernelMax,
            "CausalConv1d " + spec_.name + ": kernel must be in [2, 8], got " + std::to_string(spec_.kernel));
}

void CausalConv1d::declare(gpu::ParameterArena& arena) const {
  arena.declare(weight_name(), gpu::Shape{spec_.channels, spec_.kernel});
  if (spec_.bias) arena.declare(bias_name(), gpu::Shape{spec_.channels});
}

void CausalConv1d::init(gpu::ParameterArena& arena, std::mt19937_64& rng, cudaStream_t stream) const {
  const float bound = 1.f / std::sqrt(static_cast<float>(spec_.kernel));  // fan_in = (C / groups) * K = K
  std::uniform_real_distribution<float> u(-bound, bound);
  std::vector<float> w(static_cast<std::size_t>(spec_.channels * spec_.kernel));
  for (auto& v : w) v = u(rng);
  arena.upload_param(weight_name(), w, stream);
  if (spec_.bias) {
    std::vector<float> b(static_cast<std::size_t>(spec_.channels));
    for (auto& v : b) v = u(rng);
    arena.upload_param(bias_name(), b, stream);
  }
}

void CausalConv1d::bind(gpu::ParameterArena& arena) {
  FH_EXPECT(arena.finalized(), "CausalConv1d " + spec_.name + ": bind needs a finalized arena");
  w_ = arena.param(weight_name()).as<float>();
  dw_ = arena.grad(weight_name()).as<float>();
  if (spec_.bias) {
    b_ = arena.param(bias_name()).as<float>();
    db_ = arena.grad(bias_name()).as<float>();
  }
}

void CausalConv1d::forward(float* y, const float* x, const CausalConv1dShape& shape, bool silu,
                           cudaStream_t stream) const {
  FH_EXPECT(w_ != nullptr, "CausalConv1d " + spec_.name + ": forward before bind");
  FH_EXPECT(shape.channels == spec_.channels && shape.kernel == spec_.kernel,
            "CausalConv1d " + spec_.name + ": shape's channels / kernel differ from the spec");
  causal_conv1d_forward(y, x, w_, b_, shape, silu, stream);
}

void CausalConv1d::backward(float* dx, const float* dy, const float* x, const CausalConv1dShape& shape, bool silu,
                            std::byte* workspace, cudaStream_t stream) {
  FH_EXPECT(w_ != nullptr, "CausalConv1d " + spec_.name + ": backward before bind");
  FH_EXPECT(shape.channels == spec_.channels && shape.kernel == spec_.kernel,
            "CausalConv1d " + spec_.name + ": shape's channels / kernel differ from the spec");
  causal_conv1d_backward(dx, dw_, db_, dy, x, w_, b_, shape, silu, workspace, stream);
}

void CausalConv1d::step(float* y, float* state, const float* x, const std::uint8_t* reset,
                        const CausalConv1dShape& shape, bool silu, cudaStream_t stream) const {
  FH_EXPECT(w_ != nullptr, "CausalConv1d " + spec_.name + ": step before bind");
  FH_EXPECT(shape.channels == spec_.channels && shape.kernel == spec_.kernel,
            "CausalConv1d " + spec_.name + ": shape's channels / kernel differ from the spec");
  causal_conv1d_step(y, state, x, w_, b_, reset, shape, silu, stream);
}

}  // namespace foxhunt::models
