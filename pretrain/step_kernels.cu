#include "pretrain/step_kernels.hpp"

#include <cmath>

#include "gpu/adam.hpp"
#include "gpu/check.hpp"
#include "gpu/grad_norm.hpp"

namespace foxhunt::pretrain {
namespace {

__global__ void lr_kernel(float* lr, const std::uint64_t* step, float lr0, std::int64_t warmup, std::int64_t steps,
                          Decay decay) {
  const double s = static_cast<double>(*step);
  double v = lr0;
  if (warmup > 0 && s < static_cast<double>(warmup)) {
    v = lr0 * (s + 1.0) / static_cast<double>(warmup);
  } else if (decay != Decay::none) {
    const double span = static_cast<double>(steps - warmup > 1 ? steps - warmup : 1);
    const double p = fmin(1.0, fmax(0.0, (s - static_cast<double>(warmup)) / span));
    v = decay == Decay::cosine ? lr0 * 0.5 * (1.0 + cospi(p)) : lr0 * (1.0 - p);
  }
  *lr = static_cast<float>(v);
}

__global__ void advance_kernel(std::uint64_t* counters, double* sums, const float* scalars) {
  counters[kStepIndex] += 1;
  counters[kDataIndex] += 1;
  sums[0] += static_cast<double>(scalars[kLossScalar]);
  sums[1] += static_cast<double>(scalars[kNormScalar]);
}

__global__ void stats_kernel(TrainStats* out, double* sums, std::uint64_t* counters, const float* scalars) {
  const std::uint64_t step = counters[kStepIndex];
  const std::uint64_t n = step - counters[kWindowStartIndex];
  TrainStats t;
  t.step = step;
  t.steps = n;
  t.loss = n > 0 ? sums[0] / static_cast<double>(n) : nan("");
  t.grad_norm = n > 0 ? sums[1] / static_cast<double>(n) : nan("");
  t.lr = scalars[kLrScalar];
  *out = t;
  sums[0] = 0;
  sums[1] = 0;
  counters[kWindowStartIndex] = step;
}

}  // namespace

void launch_step_lr(float* lr, const std::uint64_t* step, float lr0, std::int64_t warmup, std::int64_t steps,
                    Decay decay, cudaStream_t stream) {
  lr_kernel<<<1, 1, 0, stream>>>(lr, step, lr0, warmup, steps, decay);
  FH_CHECK_LAUNCH();
}

void launch_optimizer_step(gpu::ParameterArena& arena, const OptimSpec& o, float* scalars, std::uint64_t* counters,
                           double* sums, std::byte* norm_ws, cudaStream_t stream) {
  gpu::global_grad_norm(scalars + kNormScalar, arena.grads(), arena.padded_count(), norm_ws, stream);
  const float* scale = nullptr;
  if (o.grad_clip > 0.f) {
    gpu::clip_scale(scalars + kScaleScalar, scalars + kNormScalar, o.grad_clip, stream);
    scale = scalars + kScaleScalar;
  }
  gpu::AdamConfig adam;
  adam.beta1 = o.beta1;
  adam.beta2 = o.beta2;
  adam.eps = o.eps;
  adam.weight_decay = o.weight_decay;
  adam.decoupled = true;
  auto* adam_steps = reinterpret_cast<const std::int64_t*>(counters + kStepIndex);
  gpu::adam_step_device(arena.params(), arena.adam_m(), arena.adam_v(), arena.grads(), arena.padded_count(), adam,
                        scalars + kLrScalar, adam_steps, scale, nullptr, stream);
  launch_step_advance(counters, sums, scalars, stream);
}

void launch_step_advance(std::uint64_t* counters, double* sums, const float* scalars, cudaStream_t stream) {
  advance_kernel<<<1, 1, 0, stream>>>(counters, sums, scalars);
  FH_CHECK_LAUNCH();
}

void launch_step_stats(TrainStats* out, double* sums, std::uint64_t* counters, const float* scalars,
                       cudaStream_t stream) {
  stats_kernel<<<1, 1, 0, stream>>>(out, sums, counters, scalars);
  FH_CHECK_LAUNCH();
}

}  // namespace foxhunt::pretrain
