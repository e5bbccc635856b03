#pragma once
// DiffusionSampler: the reverse process on the device, over a subsequence of S of the T steps,
//   tau_i = round(i (T - 1) / (S - 1)), i = 0 .. S-1 (S = 1: tau_0 = T - 1), so the first reverse
// step always starts from the noisiest level. With ab_i = ab[tau_i] and ab_-1 = 1, step i takes
// x at level i to level i - 1 from eps = eps_fn(x, tau_i):
//   ddpm (ancestral, Ho et al. 2020, with the subsequence's own alpha_i = ab_i / ab_i-1):
//     x' = (x - beta_i / sqrt(1 - ab_i) eps) / sqrt(alpha_i) + sigma_i z,
//     sigma_i^2 = beta_i (1 - ab_i-1) / (1 - ab_i) (the posterior variance; 0 at the last step)
//   ddim (Song et al. 2021):
//     x0_hat = (x - sqrt(1 - ab_i) eps) / sqrt(ab_i)
//     sigma_i = eta sqrt((1 - ab_i-1) / (1 - ab_i)) sqrt(1 - ab_i / ab_i-1)
//     x' = sqrt(ab_i-1) x0_hat + sqrt(1 - ab_i-1 - sigma_i^2) eps + sigma_i z
//     (eta = 0: deterministic; eta = 1: the ddpm step in another form)
// Each step is x' = cx_i x + ce_i eps + cz_i z with coefficients computed once in double
// (coefficients()) and passed to the step kernels as arguments, so a sampling call is a fixed
// sequence of kernels: no host decision, capturable as one CUDA graph.
// invert (ddim, eta = 0 only): the deterministic ODE run forward, level i - 1 to level i with
// eps = eps_fn(x, tau_max(i-1, 0)), x' = sqrt(ab_i) x0_hat + sqrt(1 - ab_i) eps; decode(invert(x0))
// returns x0 up to the discretization error.
// Noise (gpu/philox.cuh; row b < 2^24, element j, D <= 2^18, c = *counter < 2^36, S < 2^12):
//   x_T: stream (kSampleTag << 24 | b), counter (c << 28 | S << 16 | j / 4)
//   z_i: stream (kSampleTag << 24 | b), counter (c << 28 | i << 16 | j / 4)
#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "gpu/buffer.hpp"
#include "models/diffusion/schedule.hpp"

namespace foxhunt::models {

inline constexpr std::uint32_t kSampleTag = 0xD3;
inline constexpr std::int64_t kMaxSampleSteps = 4095;

enum class SamplerKind : std::uint8_t { ddpm, ddim };
// "ddpm" | "ddim"; std::invalid_argument otherwise.
SamplerKind parse_sampler_kind(const std::string& name);

struct SamplerSpec {
  SamplerKind kind = SamplerKind::ddim;
  std::int64_t steps = 50;  // S in [1, min(T, kMaxSampleSteps)]
  double eta = 0.0;         // ddim only, in [0, 1]
};

// eps (B, D) = the model's noise prediction for x (B, D) at the steps t (B, device int32), on `stream`.
using EpsilonFn = std::function<void(float* eps, const float* x, const std::int32_t* t, std::int64_t batch,
                                     cudaStream_t stream)>;

struct StepCoefficients {
  std::int64_t index = 0;         // i: names the step's noise
  std::int64_t t = 0;             // the step the model is asked about
  double cx = 0, ce = 0, cz = 0;  // x' = cx x + ce eps + cz z
};

class DiffusionSampler {
 public:
  // Set-up: the coefficients, and eps / t buffers for max_batch rows of dim.
  DiffusionSampler(const ScheduleTables& schedule, SamplerSpec spec, std::int64_t max_batch, std::int64_t dim);

  const SamplerSpec& spec() const noexcept { return spec_; }
  std::int64_t dim() const noexcept { return dim_; }
  // The subsequence tau (S), ascending.
  const std::vector<std::int64_t>& timesteps() const noexcept { return tau_; }
  // Reverse steps in the order they run (i = S-1 .. 0).
  const std::vector<StepCoefficients>& coefficients() const noexcept { return reverse_; }
  // Inversion steps in the order they run (i = 0 .. S-1), cz = 0.
  const std::vector<StepCoefficients>& inversion_coefficients() const noexcept { return forward_; }

  // x (B, D) = x_T ~ N(0, I) of (seed, *counter).
  void initial_noise(float* x, std::int64_t batch, std::uint64_t seed, const std::uint64_t* counter,
                     cudaStream_t stream);
  // x (B, D), in place, from the noisiest level to a sample; z of (seed, *counter).
  void reverse(float* x, const EpsilonFn& eps_fn, std::int64_t batch, std::uint64_t seed, const std::uint64_t* counter,
               cudaStream_t stream);
  // initial_noise, then reverse: x (B, D) samples.
  void sample(float* x, const EpsilonFn& eps_fn, std::int64_t batch, std::uint64_t seed, const std::uint64_t* counter,
              cudaStream_t stream);
  // x (B, D), in place, from data to the noisiest level (ddim with eta = 0 only).
  void invert(float* x, const EpsilonFn& eps_fn, std::int64_t batch, cudaStream_t stream);

 private:
  void run(float* x, const EpsilonFn& eps_fn, const std::vector<StepCoefficients>& steps, bool noisy,
           std::int64_t batch, std::uint64_t seed, const std::uint64_t* counter, cudaStream_t stream);

  SamplerSpec spec_;
  std::int64_t max_batch_, dim_;
  std::vector<std::int64_t> tau_;
  std::vector<StepCoefficients> reverse_, forward_;
  gpu::DeviceBuffer<float> eps_;
  gpu::DeviceBuffer<std::int32_t> t_;
};

}  // namespace foxhunt::models
