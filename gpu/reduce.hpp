#pragma once
// Deterministic reductions of f32 data: whole arrays to one device scalar, and the rows of a
// row-major (rows, cols) matrix to one value per row. Results stay on the device.
//
// Whole-array reductions: per-block partials (accumulated in double for sums, Welford/Chan
// in double for mean/variance) in the caller's workspace, then one single-block pass. The
// combination order depends only on n, the input's 16-byte alignment and the device's SM
// count: the same call on the same GPU model gives the same bits, run after run.
// Empty input (n == 0): sum writes 0, mean / mean_var write NaN, min writes +inf, max -inf.
// NaN: min, max and sums propagate NaN (as numpy.min / torch.min do).
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace foxhunt::gpu {

// Workspace bytes every whole-array reduction below needs for n elements (0 for small n).
// The workspace must be 8-byte aligned.
std::size_t reduce_workspace_bytes(std::int64_t n);

// out: (1); in: (n).
void reduce_sum(float* out, const float* in, std::int64_t n, void* workspace, cudaStream_t stream);
void reduce_mean(float* out, const float* in, std::int64_t n, void* workspace, cudaStream_t stream);
void reduce_min(float* out, const float* in, std::int64_t n, void* workspace, cudaStream_t stream);
void reduce_max(float* out, const float* in, std::int64_t n, void* workspace, cudaStream_t stream);
// out_mean, out_var: (1); population variance (divides by n). in: (n).
void reduce_mean_var(float* out_mean, float* out_var, const float* in, std::int64_t n, void* workspace,
                     cudaStream_t stream);

// out: (rows); in: (rows, cols), cols >= 1. Sums accumulate in double.
void row_sum(float* out, const float* in, std::int64_t rows, std::int64_t cols, cudaStream_t stream);
// NaN-propagating: a row holding a NaN gives NaN.
void row_max(float* out, const float* in, std::int64_t rows, std::int64_t cols, cudaStream_t stream);
// First column index of the row maximum (ties: the lowest index, as numpy/PyTorch argmax).
// NaN counts as larger than every number (numpy/PyTorch): a row holding NaN gives its first
// NaN's index. -0.0 and +0.0 tie. cols must fit in int32.
void row_argmax(std::int32_t* out, const float* in, std::int64_t rows, std::int64_t cols, cudaStream_t stream);

}  // namespace foxhunt::gpu
