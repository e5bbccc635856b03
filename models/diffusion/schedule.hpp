#pragma once
// NoiseSchedule: the forward (noising) process of a DDPM (Ho et al. 2020), 0-based steps
// t = 0 .. T-1:
//   q(x_t | x_0) = N(sqrt(ab_t) x_0, (1 - ab_t) I),  ab_t = prod_{i <= t} (1 - beta_i)
//   linear  beta_t = beta_start + (beta_end - beta_start) t / (T - 1)   (Ho et al.: 1e-4 -> 0.02)
//   cosine  ab(t) = f(t + 1) / f(0), f(s) = cos^2((s / T + 0.008) / 1.008 * pi / 2) (Nichol & Dhariwal
//           2021), beta_t = min(1 - f(t + 1) / f(t), 0.999), ab_t again the product of (1 - beta_i)
//           (so the clip is consistent with the betas).
// Computed once at set-up in double (host()) and uploaded as f32 arrays of T (device()); the
// training noising kernel reads sqrt(ab_t) and sqrt(1 - ab_t) per row, the samplers take their
// step coefficients (double, from host()) as kernel arguments.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "gpu/buffer.hpp"

namespace foxhunt::models {

enum class ScheduleKind : std::uint8_t { linear, cosine };

struct ScheduleSpec {
  ScheduleKind kind = ScheduleKind::cosine;
  std::int64_t steps = 1000;  // T >= 2
  double beta_start = 1e-4, beta_end = 0.02;  // linear only
};

// "linear" | "cosine"; std::invalid_argument otherwise.
ScheduleKind parse_schedule_kind(const std::string& name);

// The schedule in double (host, set-up only).
struct ScheduleTables {
  std::vector<double> beta, alpha, alpha_bar;  // (T) each
};
ScheduleTables schedule_tables(const ScheduleSpec& spec);

// Device views (T floats each), valid for the schedule's lifetime.
struct ScheduleView {
  const float* beta = nullptr;
  const float* alpha_bar = nullptr;
  const float* sqrt_alpha_bar = nullptr;            // sqrt(ab_t)
  const float* sqrt_one_minus_alpha_bar = nullptr;  // sqrt(1 - ab_t)
  std::int64_t steps = 0;
};

class NoiseSchedule {
 public:
  // Computes the tables and uploads them on `stream` (set-up: synchronizes before returning).
  NoiseSchedule(const ScheduleSpec& spec, cudaStream_t stream);
  const ScheduleSpec& spec() const noexcept { return spec_; }
  std::int64_t steps() const noexcept { return spec_.steps; }
  const ScheduleTables& host() const noexcept { return tables_; }
  ScheduleView device() const noexcept;

 private:
  ScheduleSpec spec_;
  ScheduleTables tables_;
  gpu::DeviceBuffer<float> table_;  // (4, T): beta, ab, sqrt(ab), sqrt(1 - ab)
};

}  // namespace foxhunt::models
