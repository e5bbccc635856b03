#include "gpu/adam.hpp"

#include <cmath>
#include <string>

#include "gpu/adam.cuh"
#include "gpu/check.hpp"
#include "gpu/launch.cuh"
#include "gpu/partial_sum.cuh"

namespace foxhunt::gpu {
namespace {

__global__ void adam_kernel(float* __restrict__ params, float* __restrict__ m, float* __restrict__ v,
                            const float* __restrict__ grads, std::int64_t n, AdamConstants c,
                            const float* __restrict__ grad_scale, const std::uint32_t* __restrict__ skip_flag,
                            bool vec4) {
  if (skip_flag && *skip_flag != 0u) return;  // uniform: every thread reads the same flag
  const float scale = grad_scale ? *grad_scale : 1.f;
  const std::int64_t tid = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  std::int64_t done = 0;
  if (vec4) {
    const std::int64_t n4 = n / 4;
    auto* p4 = reinterpret_cast<float4*>(params);
    auto* m4 = reinterpret_cast<float4*>(m);
    auto* v4 = reinterpret_cast<float4*>(v);
    const auto* g4 = reinterpret_cast<const float4*>(grads);
    for (std::int64_t j = tid; j < n4; j += stride) {
      float4 p = p4[j], mm = m4[j], vv = v4[j];
      const float4 g = g4[j];
      adam_element4(p, mm, vv, g, scale, c);
      p4[j] = p;
      m4[j] = mm;
      v4[j] = vv;
    }
    done = n4 * 4;
  }
  for (std::int64_t i = done + tid; i < n; i += stride) {
    float p = params[i], mm = m[i], vv = v[i];
    adam_element(p, mm, vv, grads[i], scale, c);
    params[i] = p;
    m[i] = mm;
    v[i] = vv;
  }
}

// Device-scalar variant: every block folds the step constants from *lr and *step once (thread 0,
// in double like the host path), then runs the same element update.
__global__ void adam_device_kernel(float* __restrict__ params, float* __restrict__ m, float* __restrict__ v,
                                   const float* __restrict__ grads, std::int64_t n, AdamConstants c, float beta1,
                                   float weight_decay, bool decoupled, const float* __restrict__ lr,
                                   const std::int64_t* __restrict__ step, const float* __restrict__ grad_scale,
                                   const std::uint32_t* __restrict__ skip_flag) {
  if (skip_flag && *skip_flag != 0u) return;
  __shared__ AdamConstants sc;
  if (threadIdx.x == 0) {
    const double t = static_cast<double>(*step + 1);
    const double l = static_cast<double>(*lr);
    sc = c;
    sc.decay_factor = decoupled ? static_cast<float>(1.0 - l * weight_decay) : 1.f;
    sc.step_size = static_cast<float>(l / (1.0 - pow(static_cast<double>(beta1), t)));
    sc.bc2_sqrt = static_cast<float>(sqrt(1.0 - pow(static_cast<double>(c.beta2), t)));
  }
  __syncthreads();
  const AdamConstants k = sc;
  const float scale = grad_scale ? *grad_scale : 1.f;
  const std::int64_t tid = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = tid; i < n; i += stride) {
    float p = params[i], mm = m[i], vv = v[i];
    adam_element(p, mm, vv, grads[i], scale, k);
    params[i] = p;
    m[i] = mm;
    v[i] = vv;
  }
}

// The checks both entry points share; `who` names the launcher in the message.
void check_moment_config(const AdamConfig& config, const std::string& who) {
  FH_EXPECT(config.beta1 >= 0.f && config.beta1 < 1.f,
            who + ": beta1 must be in [0, 1), got " + std::to_string(config.beta1));
  FH_EXPECT(config.beta2 >= 0.f && config.beta2 < 1.f,
            who + ": beta2 must be in [0, 1), got " + std::to_string(config.beta2));
  FH_EXPECT(config.eps >= 0.f, who + ": eps must be >= 0, got " + std::to_string(config.eps));
  FH_EXPECT(config.weight_decay >= 0.f,
            who + ": weight_decay must be >= 0, got " + std::to_string(config.weight_decay));
}

__global__ void scale_lr_kernel(float* out, const float* lr, float scale) { *out = scale * *lr; }

}  // namespace

void scale_lr(float* out, const float* lr, float scale, cudaStream_t stream) {
  FH_EXPECT(out != nullptr && lr != nullptr, "scale_lr: out and lr (device scalars) must not be null");
  scale_lr_kernel<<<1, 1, 0, stream>>>(out, lr, scale);
  FH_CHECK_LAUNCH();
}

void adam_step_device(float* params, float* m, float* v, const float* grads, std::int64_t n, const AdamConfig& config,
                      const float* lr, const std::int64_t* step, const float* grad_scale,
                      const std::uint32_t* skip_flag, cudaStream_t stream) {
  FH_EXPECT(n >= 0, "adam_step_device: n must be >= 0");
  check_moment_config(config, "adam_step_device");
  if (n == 0) return;
  FH_EXPECT(params != nullptr && m != nullptr && v != nullptr && grads != nullptr && lr != nullptr && step != nullptr,
            "adam_step_device: params, m, v, grads, lr and step must not be null");
  AdamConstants c{};
  c.beta2 = config.beta2;
  c.one_minus_beta1 = static_cast<float>(1.0 - static_cast<double>(config.beta1));
  c.one_minus_beta2 = static_cast<float>(1.0 - static_cast<double>(config.beta2));
  c.eps = config.eps;
  c.weight_decay = config.decoupled ? 0.f : config.weight_decay;
  adam_device_kernel<<<grid_stride_blocks(n), kBlock, 0, stream>>>(
      params, m, v, grads, n, c, config.beta1, config.weight_decay, config.decoupled, lr, step, grad_scale, skip_flag);
  FH_CHECK_LAUNCH();
}

void adam_step(float* params, float* m, float* v, const float* grads, std::int64_t n, const AdamConfig& config,
               std::int64_t step, const float* grad_scale, const std::uint32_t* skip_flag, cudaStream_t stream) {
  FH_EXPECT(n >= 0, "adam_step: n must be >= 0");
  FH_EXPECT(step >= 1, "adam_step: step is 1-based and must be >= 1, got " + std::to_string(step));
  FH_EXPECT(config.lr >= 0.f, "adam_step: lr must be >= 0, got " + std::to_string(config.lr));
  check_moment_config(config, "adam_step");
  if (n == 0) return;
  FH_EXPECT(params != nullptr && m != nullptr && v != nullptr && grads != nullptr,
            "adam_step: params, m, v and grads must not be null");

  const double t = static_cast<double>(step);
  AdamConstants c{};
  c.beta2 = config.beta2;
  c.one_minus_beta1 = static_cast<float>(1.0 - static_cast<double>(config.beta1));
  c.one_minus_beta2 = static_cast<float>(1.0 - static_cast<double>(config.beta2));
  c.eps = config.eps;
  c.weight_decay = config.decoupled ? 0.f : config.weight_decay;
  c.decay_factor =
      config.decoupled ? static_cast<float>(1.0 - static_cast<double>(config.lr) * config.weight_decay) : 1.f;
  c.step_size = static_cast<float>(config.lr / (1.0 - std::pow(static_cast<double>(config.beta1), t)));
  c.bc2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(static_cast<double>(config.beta2), t)));

  const bool vec4 = aligned16(params) && aligned16(m) && aligned16(v) && aligned16(grads);
  adam_kernel<<<grid_stride_blocks(n), kBlock, 0, stream>>>(params, m, v, grads, n, c, grad_scale, skip_flag, vec4);
  FH_CHECK_LAUNCH();
}

}  // namespace foxhunt::gpu
