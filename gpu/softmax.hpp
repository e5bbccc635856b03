#pragma once
// Row-wise softmax and log-softmax over the last dimension of a row-major f32 matrix
// (rows, cols), forward and backward. Numerically stable (the row max is subtracted first).
//
// Semantics at the edges: a row whose entries are all -inf, or that holds a NaN or +inf,
// yields NaN in (at least) the affected entries, as in PyTorch; -inf entries in an otherwise
// finite row (masked logits) give probability 0 / log-probability -inf.
// Every output may alias its inputs (each row is read completely before it is written).
// Deterministic: the reduction order depends on cols only.
#include <cuda_runtime.h>

#include <cstdint>

namespace foxhunt::gpu {

// out, in: (rows, cols). out[r, :] = exp(in[r, :] - max) / sum(exp(in[r, :] - max)).
void softmax_forward(float* out, const float* in, std::int64_t rows, std::int64_t cols, cudaStream_t stream);

// out, in: (rows, cols). out[r, :] = in[r, :] - max - log(sum(exp(in[r, :] - max))).
void log_softmax_forward(float* out, const float* in, std::int64_t rows, std::int64_t cols, cudaStream_t stream);

// d_in, d_out, out: (rows, cols); `out` is the softmax forward output.
// d_in = out * (d_out - sum_j(d_out * out)).
void softmax_backward(float* d_in, const float* d_out, const float* out, std::int64_t rows, std::int64_t cols,
                      cudaStream_t stream);

// d_in, d_out, out: (rows, cols); `out` is the log-softmax forward output.
// d_in = d_out - exp(out) * sum_j(d_out).
void log_softmax_backward(float* d_in, const float* d_out, const float* out, std::int64_t rows, std::int64_t cols,
                          cudaStream_t stream);

}  // namespace foxhunt::gpu
