#pragma once
// The per-step bookkeeping both pretrain trainers (PretrainTrainer, DiffusionTrainer) run on the
// device, over one layout of counters and scalars: the learning rate of the step, the optimizer
// step that follows the backward, the counters' advance with the statistics window's sums, and the
// window's TrainStats. Launchers are capturable (no host decision).
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "gpu/arena.hpp"
#include "pretrain/trainer.hpp"

namespace foxhunt::pretrain {

// counters (uint64): step, data counter, eval counter, window start. scalars (f32): lr, gradient
// norm, clip scale, loss. sums (f64): the window's loss and norm sums.
inline constexpr int kStepIndex = 0, kDataIndex = 1, kEvalIndex = 2, kWindowStartIndex = 3, kStepCounterCount = 4;
inline constexpr int kLrScalar = 0, kNormScalar = 1, kScaleScalar = 2, kLossScalar = 3, kStepScalarCount = 4;

// *lr from the device step counter: linear warmup, then cosine / linear decay or constant.
void launch_step_lr(float* lr, const std::uint64_t* step, float lr0, std::int64_t warmup, std::int64_t steps,
                    Decay decay, cudaStream_t stream);
// After the backward: the global gradient norm into scalars[kNormScalar], clipped to o.grad_clip
// when > 0, then AdamW over the arena at the device learning rate and step, then the advance below.
// norm_ws: gpu::grad_norm_workspace_bytes(arena.padded_count()).
void launch_optimizer_step(gpu::ParameterArena& arena, const OptimSpec& o, float* scalars, std::uint64_t* counters,
                           double* sums, std::byte* norm_ws, cudaStream_t stream);
// After an applied step: step and data counters += 1; the window's sums take the loss and norm.
void launch_step_advance(std::uint64_t* counters, double* sums, const float* scalars, cudaStream_t stream);
// *out = the window's means and the state now; the window restarts at this step.
void launch_step_stats(TrainStats* out, double* sums, std::uint64_t* counters, const float* scalars,
                       cudaStream_t stream);

}  // namespace foxhunt::pretrain
