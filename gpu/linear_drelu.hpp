#pragma once
// The input gradient of a layer straight into the pre-activation gradient of the ReLU layer below
// it (the layer that produced this one's input, in_features wide), as ONE cuBLASLt GEMM with the
// DRELU_BGRAD epilogue (DRELU when d_bias_below is null), in gpu/linear's layouts:
//   d_pre_below (B, in_f) = (d_pre (B, out_f) · weight (out_f, in_f)) ⊙ [relu_mask_below bit set]
//   d_bias_below (in_f)   = sum over the batch of d_pre_below     (overwritten; nullable)
// relu_mask_below: the aux the layer below's relu linear_forward wrote (rows [0, B) of it).
// Runs only where cuBLASLt has a kernel with that epilogue in it for this GEMM; returns false and runs nothing
// where it has none, where the GEMM is one of gpu/linear's small fp32 ones, in bf16 where the operands' bf16
// copies need more than one chunk of the lane workspace, or while the unfused fallback is forced (tests): the
// caller then takes the two steps, linear_backward's d_in and the layer below's ReLU/bias-gradient pass
// (linear_backward writes d_pre_scratch whenever it is given, also with d_in and d_weight null), which give
// the same values (the bias gradient summed in another order). The choice depends only on the shapes,
// alignments, math and lane workspace size, so every call of one configuration makes the same one.
#include <cstdint>

#include "gpu/context.hpp"
#include "gpu/linear.hpp"

namespace foxhunt::gpu {

bool linear_backward_input_drelu(float* d_pre_below, float* d_bias_below, const float* d_pre, const float* weight,
                                 const void* relu_mask_below, std::int64_t batch, std::int64_t in_features,
                                 std::int64_t out_features, LinearMath math, BlasLane lane);

}  // namespace foxhunt::gpu
