#pragma once
// Adam's per-element arithmetic, shared by gpu/adam.cu and the learner's fused pass
// (rl/dqn/fused.cu), so that both give the same bits.
#include <cuda_runtime.h>

namespace foxhunt::gpu {

// Step constants folded on the host in double, once per launch (or per graph replay on the device).
struct AdamConstants {
  float beta2;
  float one_minus_beta1;
  float one_minus_beta2;
  float eps;
  float weight_decay;  // coupled L2 term (0 for AdamW)
  float decay_factor;  // AdamW's 1 - lr * wd (1 for Adam)
  float step_size;     // lr / (1 - beta1^step)
  float bc2_sqrt;      // sqrt(1 - beta2^step)
};

// Operation order mirrors PyTorch's single-tensor Adam so that float rounding is alike.
__device__ __forceinline__ void adam_element(float& p, float& m, float& v, float g, float scale,
                                             const AdamConstants& c) {
  g *= scale;
  if (c.weight_decay != 0.f) g = fmaf(c.weight_decay, p, g);
  p *= c.decay_factor;
  m = fmaf(c.one_minus_beta1, g - m, m);  // m.lerp_(g, 1 - beta1)
  v = fmaf(c.one_minus_beta2 * g, g, v * c.beta2);
  const float denom = sqrtf(v) / c.bc2_sqrt + c.eps;
  p = fmaf(-c.step_size, m / denom, p);
}

// Four consecutive elements (the float4 paths of the flat-buffer kernels).
__device__ __forceinline__ void adam_element4(float4& p, float4& m, float4& v, const float4& g, float scale,
                                              const AdamConstants& c) {
  adam_element(p.x, m.x, v.x, g.x, scale, c);
  adam_element(p.y, m.y, v.y, g.y, scale, c);
  adam_element(p.z, m.z, v.z, g.z, scale, c);
  adam_element(p.w, m.w, v.w, g.w, scale, c);
}

}  // namespace foxhunt::gpu
