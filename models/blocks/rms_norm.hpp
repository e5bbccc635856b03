#pragma once
// RMS normalisation over the last dimension of a row-major f32 matrix x (rows, C):
//   y = x * rstd * weight,  rstd = 1 / sqrt(mean_c(x^2) + eps)          (weight (C), init ones)
// and the gated variant of Mamba-2 (mamba_ssm's RMSNormGated with norm_before_gate = False):
//   g = x ⊙ silu(z),  y = g * rstd(g) * weight.
// Backward (n = g * rstd, dn = dy * weight):
//   d_weight = sum_rows dy ⊙ n,  dg = rstd * (dn - n * mean_c(dn ⊙ n)),
//   plain: dx = dg;  gated: dx = dg ⊙ silu(z), dz = dg ⊙ x ⊙ silu'(z).
// One warp per row; d_weight is a deterministic two-pass column sum (no atomics), so reruns and
// graph replays are bitwise equal. Launchers (outputs first, stream last) for use inside other
// modules, and RmsNorm, the row-wise Module.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <random>
#include <string>

#include "gpu/arena.hpp"
#include "gpu/context.hpp"
#include "models/module.hpp"

namespace foxhunt::models {

// y (rows, C); rstd (rows), nullable: saved for the backward. y may alias x.
void rms_norm_forward(float* y, float* rstd, const float* x, const float* weight, std::int64_t rows, std::int64_t C,
                      float eps, cudaStream_t stream);
// Scratch bytes of rms_norm_backward and rms_norm_gated_backward (the d_weight partials).
std::size_t rms_norm_backward_workspace_bytes(std::int64_t rows, std::int64_t C);
// dx (rows, C), nullable; dweight (C), overwritten, nullable. rstd: the forward's. workspace:
// rms_norm_backward_workspace_bytes(rows, C) bytes, 4-byte aligned. dx must not alias dy or x.
void rms_norm_backward(float* dx, float* dweight, const float* dy, const float* x, const float* weight,
                       const float* rstd, std::int64_t rows, std::int64_t C, std::byte* workspace, cudaStream_t stream);

// Gated: z (rows, C) with row stride z_stride floats (>= C: z may be a column slice of a wider
// matrix); x, y contiguous (rows, C). y must not alias x or z.
void rms_norm_gated_forward(float* y, float* rstd, const float* x, const float* z, std::int64_t z_stride,
                            const float* weight, std::int64_t rows, std::int64_t C, float eps, cudaStream_t stream);
// dx (rows, C), nullable; dz (rows, C) with row stride dz_stride, nullable; dweight (C), overwritten,
// nullable. Outputs must not alias the inputs.
void rms_norm_gated_backward(float* dx, float* dz, std::int64_t dz_stride, float* dweight, const float* dy,
                             const float* x, const float* z, std::int64_t z_stride, const float* weight,
                             const float* rstd, std::int64_t rows, std::int64_t C, std::byte* workspace,
                             cudaStream_t stream);

struct RmsNormSpec {
  std::string name;
  std::int64_t features = 0;  // C
  float eps = 1e-5f;
};

// RmsNorm: "<name>.weight" (C), init ones. A row-wise Module: in, out (B, C) (a sequence is B * T rows).
class RmsNorm final : public Module {
 public:
  explicit RmsNorm(RmsNormSpec spec);

  void declare(gpu::ParameterArena& arena) const override;
  void init(gpu::ParameterArena& arena, std::mt19937_64& rng, cudaStream_t stream) const override;
  void bind(gpu::ParameterArena& arena) override;

  std::int64_t in_features() const override { return spec_.features; }
  std::int64_t out_features() const override { return spec_.features; }
  // rstd (max_batch) and the backward's partials.
  std::size_t workspace_bytes(std::int64_t max_batch, bool side_lane) const override;
  void forward(float* out, const float* in, std::int64_t batch, bool eval, const Workspace& ws,
               gpu::BlasLane lane) override;
  // All work on lane; side is only joined (Module's contract).
  void backward(float* d_in, const float* d_out, const float* in, std::int64_t batch, const Workspace& ws,
                gpu::BlasLane lane, const SideLane* side) override;

  const RmsNormSpec& spec() const noexcept { return spec_; }
  std::string weight_name() const { return spec_.name + ".weight"; }
  const float* weight() const noexcept { return w_; }
  float* weight_grad() noexcept { return dw_; }

 private:
  RmsNormSpec spec_;
  bool bound_ = false;
  float *w_ = nullptr, *dw_ = nullptr;
};

}  // namespace foxhunt::models
