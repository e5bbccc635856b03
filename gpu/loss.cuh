#pragma once
// The pointwise regression loss terms, written once: the generic losses (gpu/loss.hpp) and the
// fused DQN TD kernel (rl/dqn/fused.cu) call these, so both compute the same bits.
#include <cuda_runtime.h>

namespace foxhunt::gpu {

// PyTorch's HuberLoss(delta) term of d = pred - target (delta > 0): returns
// 0.5 d^2 if |d| < delta, else delta (|d| - 0.5 delta); writes its derivative
// clamp(d, -delta, delta) to dl. Strict, as PyTorch: |d| == delta takes the linear branch
// (the same value there).
__device__ __forceinline__ float huber_term(float d, float delta, float& dl) {
  const float a = fabsf(d);
  if (a < delta) {
    dl = d;
    return 0.5f * d * d;
  }
  dl = copysignf(delta, d);
  return delta * (a - 0.5f * delta);
}

// The squared error d^2; writes its derivative 2 d to dl.
__device__ __forceinline__ float mse_term(float d, float& dl) {
  dl = 2.f * d;
  return d * d;
}

}  // namespace foxhunt::gpu
