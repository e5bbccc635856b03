#pragma once
// Scalar gate functions shared by the xLSTM cell kernels (device and host, so the float64 test
// references can mirror them).
#include <cuda_runtime.h>

#include <cmath>

namespace foxhunt::models::xlstm_detail {

// log sigmoid(x) without overflow or cancellation: min(x, 0) - log1p(exp(-|x|)).
__host__ __device__ __forceinline__ float log_sigmoid(float x) { return fminf(x, 0.f) - log1pf(expf(-fabsf(x))); }

// sigmoid(-x) = 1 - sigmoid(x), the derivative of log sigmoid at x.
__host__ __device__ __forceinline__ float sigmoid_neg(float x) { return 1.f / (1.f + expf(x)); }

__host__ __device__ __forceinline__ float sigmoid(float x) { return 1.f / (1.f + expf(-x)); }

}  // namespace foxhunt::models::xlstm_detail
