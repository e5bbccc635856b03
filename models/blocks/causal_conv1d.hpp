#pragma once
// Depthwise causal convolution over time (PyTorch Conv1d(groups = C, padding = K - 1) cut to the
// first T outputs, as Mamba's and xLSTM's short convolutions), optionally followed by SiLU:
//   pre[b, t, c] = bias[c] + sum_{k < K} w[c, k] * x[b, t - (K - 1) + k, c]   (x = 0 before t = 0)
//   y = silu(pre) or pre.
// Layouts: x, y (B, T, C) batch-major rows; a row (b, t) of x starts at (b * T + t) * x_stride and
// of y at (b * T + t) * y_stride, so either may be a column slice of a wider matrix (strides >= C,
// 0 meaning C). weight (C, K) row-major, bias (C) (nullable: none).
// Backward (d_pre = dy ⊙ silu'(pre) or dy):
//   dx[b, s, c] = sum_k w[c, k] d_pre[b, s + (K - 1) - k, c]   (terms with s + K - 1 - k < T)
//   dw[c, k] = sum_{b, t} d_pre[b, t, c] x[b, t - (K - 1) + k, c],  dbias[c] = sum_{b, t} d_pre[b, t, c]
// with deterministic two-pass column sums (no atomics).
// Step form: state (B, C, K - 1) per row, state[b, c * (K - 1) + j] = x at time t - (K - 1) + j
// (oldest first, zeros at the start), rows state_stride floats apart (0 meaning C * (K - 1)), so
// a channel range [c0, c1) of a state is the contiguous piece starting at c0 * (K - 1).
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <random>
#include <string>

#include "gpu/arena.hpp"

namespace foxhunt::models {

inline constexpr std::int64_t kConvKernelMin = 2, kConvKernelMax = 8;

struct CausalConv1dShape {
  std::int64_t batch = 0, T = 0, channels = 0, kernel = 4;  // B, T, C, K (2..8)
  std::int64_t x_stride = 0;                                // floats between rows of x and dx; 0: C
  std::int64_t y_stride = 0;                                // floats between rows of y and dy; 0: C
  std::int64_t state_stride = 0;                            // floats between rows of the step state; 0: C * (K - 1)
};

// y from x. y must not alias x.
void causal_conv1d_forward(float* y, const float* x, const float* weight, const float* bias,
                           const CausalConv1dShape& shape, bool silu, cudaStream_t stream);
// Scratch bytes of causal_conv1d_backward: d_pre (B, T, C) and the column-sum partials.
std::size_t causal_conv1d_backward_workspace_bytes(const CausalConv1dShape& shape);
// From dy (B, T, C) (y_stride): dx (x_stride), dweight (C, K) and dbias (C) overwritten; each
// nullable. x, weight, bias: the forward's. workspace: causal_conv1d_backward_workspace_bytes(shape)
// bytes, 256-byte aligned. Outputs must not alias the inputs.
void causal_conv1d_backward(float* dx, float* dweight, float* dbias, const float* dy, const float* x,
                            const float* weight, const float* bias, const CausalConv1dShape& shape, bool silu,
                            std::byte* workspace, cudaStream_t stream);
// One time step: rows with reset[b] != 0 (reset nullable) first zero their state; then y (B, C)
// (y_stride) from x (B, C) (x_stride) and the state, which is shifted in place to hold x last.
// shape.T is ignored.
void causal_conv1d_step(float* y, float* state, const float* x, const float* weight, const float* bias,
                        const std::uint8_t* reset, const CausalConv1dShape& shape, bool silu, cudaStream_t stream);

struct CausalConv1dSpec {
  std::string name;
  std::int64_t channels = 0, kernel = 4;
  bool bias = true;
};

// The parameters of one convolution: "<name>.weight" (C, K) and "<name>.bias" (C), PyTorch's
// Conv1d(groups = C) init U(-1/sqrt(K), 1/sqrt(K)) for both. Owners call the launchers above with
// the bound views (a layer may run several launches on channel ranges of one convolution:
// weight() + c0 * K, bias() + c0).
class CausalConv1d {
 public:
  explicit CausalConv1d(CausalConv1dSpec spec);
  void declare(gpu::ParameterArena& arena) const;
  void init(gpu::ParameterArena& arena, std::mt19937_64& rng, cudaStream_t stream) const;
  void bind(gpu::ParameterArena& arena);

  // The launchers with this convolution's bound parameters (shape.channels == spec().channels).
  void forward(float* y, const float* x, const CausalConv1dShape& shape, bool silu, cudaStream_t stream) const;
  void backward(float* dx, const float* dy, const float* x, const CausalConv1dShape& shape, bool silu,
                std::byte* workspace, cudaStream_t stream);
  void step(float* y, float* state, const float* x, const std::uint8_t* reset, const CausalConv1dShape& shape,
            bool silu, cudaStream_t stream) const;

  const CausalConv1dSpec& spec() const noexcept { return spec_; }
  std::string weight_name() const { return spec_.name + ".weight"; }
  std::string bias_name() const { return spec_.name + ".bias"; }
  const float* weight() const noexcept { return w_; }
  const float* bias() const noexcept { return b_; }
  float* weight_grad() noexcept { return dw_; }
  float* bias_grad() noexcept { return db_; }
  std::int64_t state_features() const noexcept { return spec_.channels * (spec_.kernel - 1); }

 private:
  CausalConv1dSpec spec_;
  float *w_ = nullptr, *b_ = nullptr, *dw_ = nullptr, *db_ = nullptr;
};

}  // namespace foxhunt::models
