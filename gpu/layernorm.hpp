#pragma once
// Layer normalisation over the last dimension of a row-major f32 matrix (rows, cols), with a
// per-column affine (gamma, beta), as torch.nn.LayerNorm: population variance, eps inside the
// square root. Deterministic: reduction orders depend on the shape only.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace foxhunt::gpu {

// out, in: (rows, cols); gamma, beta: (cols); mean, rstd: (rows), saved for the backward pass
// (either may be null to skip it). out may alias in.
// out = (in - mean) * rstd * gamma + beta, rstd = 1 / sqrt(var + eps).
void layernorm_forward(float* out, float* mean, float* rstd, const float* in, const float* gamma, const float* beta,
                       std::int64_t rows, std::int64_t cols, float eps, cudaStream_t stream);

// Scratch for layernorm_backward: per-block partial column sums of d_gamma and d_beta.
std::size_t layernorm_backward_workspace_bytes(std::int64_t rows, std::int64_t cols);

// d_in, d_out, in: (rows, cols); d_gamma, d_beta, gamma: (cols); mean, rstd: (rows) from the
// forward pass. d_gamma and d_beta are OVERWRITTEN (not accumulated):
//   d_gamma = sum_rows d_out * xhat,  d_beta = sum_rows d_out,  xhat = (in - mean) * rstd
//   d_in = rstd * (g - mean_cols(g) - xhat * mean_cols(g * xhat)),  g = d_out * gamma.
// workspace: layernorm_backward_workspace_bytes(rows, cols) bytes, 4-byte aligned.
// d_in may alias d_out or in (the column sums read them before d_in is written).
void layernorm_backward(float* d_in, float* d_gamma, float* d_beta, const float* d_out, const float* in,
                        const float* mean, const float* rstd, const float* gamma, std::int64_t rows, std::int64_t cols,
                        void* workspace, cudaStream_t stream);

}  // namespace foxhunt::gpu
