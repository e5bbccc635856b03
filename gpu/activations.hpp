#pragma once
// Stand-alone activation kernels (forward and backward) for every foxhunt::gpu::Activation.
// The scalar functions themselves live in gpu/activation.cuh, shared with fused kernels.
//
// `param` is read by leaky_relu (negative slope), elu (alpha) and softplus (beta, must be > 0);
// the other activations ignore it. Any alignment works (float4 path when 16-byte aligned).
#include <cuda_runtime.h>

#include <cstdint>

#include "gpu/activation.hpp"

namespace foxhunt::gpu {

// out = f(in). out == in (in-place) is allowed.
void activation_forward(float* out, const float* in, std::int64_t n, Activation act, float param, cudaStream_t stream);

// d_in = d_out * f'(in), with `in` the pre-activation input of the forward pass.
// d_in may alias d_out (in-place) or in.
void activation_backward(float* d_in, const float* d_out, const float* in, std::int64_t n, Activation act, float param,
                         cudaStream_t stream);

}  // namespace foxhunt::gpu
