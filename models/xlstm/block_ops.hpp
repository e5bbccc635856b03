#pragma once
// Small kernels of the xLSTM blocks.
//   head_norm: GroupNorm with one group per head over the channels of each row (per-head layer
//     norm, population variance, eps inside the square root), then a per-channel weight (no bias):
//     x, y (rows, H * D); y[r, h, d] = (x[r, h, d] - mean_rh) * rstd_rh * weight[h * D + d].
//   skip_gate (the mLSTM block's output): s = hn + skip ⊙ xc, out = s ⊙ silu(z), all (rows, C)
//     with skip (C).
//   pack_halves: out (rows, 2W) = [a | b] with a, b (rows, W); unpack_halves the inverse.
// Parameter gradients are deterministic two-pass column sums (models/blocks/column_sum.cuh).
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace foxhunt::models {

// mean, rstd (rows, H), nullable (the step form needs neither).
void head_norm_forward(float* y, float* mean, float* rstd, const float* x, const float* weight, std::int64_t rows,
                       std::int64_t H, std::int64_t D, float eps, cudaStream_t stream);
// Scratch floats of head_norm_backward and skip_gate_backward over (rows, C).
std::size_t block_ops_scratch_floats(std::int64_t rows, std::int64_t C);
// dx (rows, H * D) and dweight (H * D), overwritten. dx must not alias dy or x.
void head_norm_backward(float* dx, float* dweight, const float* dy, const float* x, const float* mean,
                        const float* rstd, const float* weight, std::int64_t rows, std::int64_t H, std::int64_t D,
                        float* scratch, cudaStream_t stream);

void skip_gate_forward(float* out, const float* hn, const float* xc, const float* skip, const float* z,
                       std::int64_t rows, std::int64_t C, cudaStream_t stream);
// d_hn = d_out ⊙ silu(z), d_z = d_out ⊙ s ⊙ silu'(z), d_xc = d_hn ⊙ skip (all overwritten),
// d_skip (C) = sum over rows of d_hn ⊙ xc (overwritten).
void skip_gate_backward(float* d_hn, float* d_z, float* d_xc, float* d_skip, const float* d_out, const float* hn,
                        const float* xc, const float* skip, const float* z, std::int64_t rows, std::int64_t C,
                        float* scratch, cudaStream_t stream);

void pack_halves(float* out, const float* a, const float* b, std::int64_t rows, std::int64_t W, cudaStream_t stream);
void unpack_halves(float* a, float* b, const float* in, std::int64_t rows, std::int64_t W, cudaStream_t stream);

}  // namespace foxhunt::models
