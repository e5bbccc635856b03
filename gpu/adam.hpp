#pragma once
// Fused Adam / AdamW step over one flat parameter buffer: one pass reads p, m, v, g and writes
// p, m, v (float4 when all four are 16-byte aligned). Follows PyTorch's torch.optim.Adam / AdamW
// (amsgrad=False, maximize=False) step for step.
#include <cuda_runtime.h>

#include <cstdint>

namespace foxhunt::gpu {

struct AdamConfig {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.f;
  bool decoupled = true;  // true: AdamW (p -= lr*wd*p first); false: Adam's L2 (g += wd*p)
};

// params, m, v: (n), updated in place. grads: (n).
// step: 1-based count of this update (host-known), for the bias corrections 1 - beta^step.
// grad_scale: device scalar multiplying every gradient before anything else (e.g. clip_scale's
//   output), or nullptr for 1.
// skip_flag: device scalar; when *skip_flag != 0 the whole update is skipped and params, m, v stay
//   bitwise unchanged (non-finite gradients). nullptr: never skip.
// Per element, with g = grad * scale:
//   Adam (decoupled=false): g += wd * p
//   AdamW (decoupled=true): p *= 1 - lr * wd
//   m = m + (1 - beta1) (g - m);  v = beta2 v + (1 - beta2) g^2
//   p -= (lr / (1 - beta1^step)) * m / (sqrt(v) / sqrt(1 - beta2^step) + eps)
void adam_step(float* params, float* m, float* v, const float* grads, std::int64_t n, const AdamConfig& config,
               std::int64_t step, const float* grad_scale, const std::uint32_t* skip_flag, cudaStream_t stream);

// The same step with the learning rate and the step count read from device memory, so that one
// captured CUDA graph serves every update (nothing host-side changes between replays).
// lr: device scalar (config.lr is ignored). step: device counter of the updates already applied;
// this update is number *step + 1 (bias corrections use it). The kernel does not advance *step:
// the caller does (e.g. only when the update was not skipped). Everything else as adam_step.
void adam_step_device(float* params, float* m, float* v, const float* grads, std::int64_t n, const AdamConfig& config,
                      const float* lr, const std::int64_t* step, const float* grad_scale,
                      const std::uint32_t* skip_flag, cudaStream_t stream);

// *out = scale * *lr (device scalars, one thread): a second optimizer's rate that follows the
// first's schedule (a fine-tuned feature extractor at features.lr_scale times the agent's rate).
void scale_lr(float* out, const float* lr, float scale, cudaStream_t stream);

}  // namespace foxhunt::gpu
