#include "models/diffusion/sampler.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "gpu/check.hpp"
#include "gpu/launch.cuh"
#include "gpu/philox.cuh"
#include "models/diffusion/noising.hpp"

namespace foxhunt::models {
namespace {

__global__ void fill_steps_kernel(std::int32_t* __restrict__ t, std::int32_t value, std::int64_t B) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < B;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    t[i] = value;
}

// One thread per (row, group of 4 elements): one Philox block of normals.
__global__ void initial_noise_kernel(float* __restrict__ x, std::int64_t B, std::int64_t D, std::uint64_t seed,
                                     const std::uint64_t* __restrict__ counter, std::uint64_t slot) {
  const std::int64_t groups = (D + 3) / 4, n = B * groups;
  const std::uint64_t c = *counter;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t b = i / groups, q = i % groups;
    const float4 z = gpu::normal4(seed, kSampleTag << 24 | static_cast<std::uint32_t>(b),
                                  c << 28 | slot << 16 | static_cast<std::uint64_t>(q));
    const float zs[4] = {z.x, z.y, z.z, z.w};
    for (int k = 0; k < 4 && 4 * q + k < D; ++k) x[b * D + 4 * q + k] = zs[k];
  }
}

// x = cx x + ce eps (+ cz z when noisy), z as initial_noise_kernel's for slot = the step index.
__global__ void step_kernel(float* __restrict__ x, const float* __restrict__ eps, std::int64_t B, std::int64_t D,
                            float cx, float ce, float cz, bool noisy, std::uint64_t seed,
                            const std::uint64_t* __restrict__ counter, std::uint64_t slot) {
  const std::int64_t groups = (D + 3) / 4, n = B * groups;
  const std::uint64_t c = noisy ? *counter : 0;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t b = i / groups, q = i % groups;
    float zs[4] = {0.f, 0.f, 0.f, 0.f};
    if (noisy) {
      const float4 z = gpu::normal4(seed, kSampleTag << 24 | static_cast<std::uint32_t>(b),
                                    c << 28 | slot << 16 | static_cast<std::uint64_t>(q));
      zs[0] = z.x, zs[1] = z.y, zs[2] = z.z, zs[3] = z.w;
    }
    for (int k = 0; k < 4 && 4 * q + k < D; ++k) {
      const std::int64_t at = b * D + 4 * q + k;
      x[at] = cx * x[at] + ce * eps[at] + cz * zs[k];
    }
  }
}

}  // namespace

SamplerKind parse_sampler_kind(const std::string& name) {
  if (name == "ddpm") return SamplerKind::ddpm;
  if (name == "ddim") return SamplerKind::ddim;
  throw std::invalid_argument("sampler = \"" + name + "\": must be one of \"ddpm\" | \"ddim\"");
}

DiffusionSampler::DiffusionSampler(const ScheduleTables& schedule, SamplerSpec spec, std::int64_t max_batch,
                                   std::int64_t dim)
    : spec_(spec), max_batch_(max_batch), dim_(dim) {
  const auto T = static_cast<std::int64_t>(schedule.alpha_bar.size());
  const std::int64_t S = spec_.steps;
  FH_EXPECT(T >= 2, "DiffusionSampler: the schedule needs >= 2 steps");
  FH_EXPECT(S >= 1 && S <= std::min(T, kMaxSampleSteps),
            "DiffusionSampler: steps must be in [1, min(T, 4095)], got " + std::to_string(S));
  FH_EXPECT(spec_.eta >= 0.0 && spec_.eta <= 1.0, "DiffusionSampler: eta must be in [0, 1]");
  FH_EXPECT(max_batch >= 1 && max_batch <= kMaxDiffusionBatch, "DiffusionSampler: max_batch outside [1, 2^24]");
  FH_EXPECT(dim >= 1 && dim <= kMaxDiffusionDim, "DiffusionSampler: dim outside [1, 2^18]");
  for (std::int64_t i = 0; i < S; ++i)
    tau_.push_back(S == 1 ? T - 1
                          : static_cast<std::int64_t>(std::llround(static_cast<double>(i) * static_cast<double>(T - 1) /
                                                                   static_cast<double>(S - 1))));
  const auto ab = [&](std::int64_t i) { return i < 0 ? 1.0 : schedule.alpha_bar[static_cast<std::size_t>(tau_[static_cast<std::size_t>(i)])]; };
  for (std::int64_t i = S - 1; i >= 0; --i) {
    const double abi = ab(i), abp = ab(i - 1);
    StepCoefficients c;
    c.index = i;
    c.t = tau_[static_cast<std::size_t>(i)];
    if (spec_.kind == SamplerKind::ddpm) {
      const double alpha = abi / abp, beta = 1.0 - alpha;
      c.cx = 1.0 / std::sqrt(alpha);
      c.ce = -beta / (std::sqrt(alpha) * std::sqrt(1.0 - abi));
      c.cz = i > 0 ? std::sqrt(beta * (1.0 - abp) / (1.0 - abi)) : 0.0;
    } else {
      const double sigma = spec_.eta * std::sqrt((1.0 - abp) / (1.0 - abi)) * std::sqrt(1.0 - abi / abp);
      c.cx = std::sqrt(abp / abi);
      c.ce = std::sqrt(std::max(0.0, 1.0 - abp - sigma * sigma)) - std::sqrt(abp) * std::sqrt(1.0 - abi) / std::sqrt(abi);
      c.cz = sigma;
    }
    reverse_.push_back(c);
  }
  for (std::int64_t i = 0; i < S; ++i) {
    const double abc = ab(i - 1), abn = ab(i);
    StepCoefficients c;
    c.index = i;
    c.t = tau_[static_cast<std::size_t>(std::max<std::int64_t>(i - 1, 0))];
    c.cx = std::sqrt(abn / abc);
    c.ce = std::sqrt(1.0 - abn) - std::sqrt(abn) * std::sqrt(1.0 - abc) / std::sqrt(abc);
    forward_.push_back(c);
  }
  eps_ = gpu::DeviceBuffer<float>(static_cast<std::size_t>(max_batch * dim));
  t_ = gpu::DeviceBuffer<std::int32_t>(static_cast<std::size_t>(max_batch));
}

void DiffusionSampler::initial_noise(float* x, std::int64_t batch, std::uint64_t seed, const std::uint64_t* counter,
                                     cudaStream_t stream) {
  FH_EXPECT(batch >= 1 && batch <= max_batch_, "DiffusionSampler: batch outside [1, max_batch]");
  const std::int64_t n = batch * ((dim_ + 3) / 4);
  initial_noise_kernel<<<gpu::grid_stride_blocks(n), gpu::kBlock, 0, stream>>>(
      x, batch, dim_, seed, counter, static_cast<std::uint64_t>(spec_.steps));
  FH_CHECK_LAUNCH();
}

void DiffusionSampler::run(float* x, const EpsilonFn& eps_fn, const std::vector<StepCoefficients>& steps, bool noisy,
                           std::int64_t batch, std::uint64_t seed, const std::uint64_t* counter, cudaStream_t stream) {
  FH_EXPECT(batch >= 1 && batch <= max_batch_, "DiffusionSampler: batch outside [1, max_batch]");
  const std::int64_t n = batch * ((dim_ + 3) / 4);
  for (const StepCoefficients& c : steps) {
    fill_steps_kernel<<<gpu::grid_stride_blocks(batch), gpu::kBlock, 0, stream>>>(t_.data(),
                                                                                  static_cast<std::int32_t>(c.t), batch);
    FH_CHECK_LAUNCH();
    eps_fn(eps_.data(), x, t_.data(), batch, stream);
    const bool z = noisy && c.cz > 0.0;
    step_kernel<<<gpu::grid_stride_blocks(n), gpu::kBlock, 0, stream>>>(
        x, eps_.data(), batch, dim_, static_cast<float>(c.cx), static_cast<float>(c.ce), static_cast<float>(c.cz), z,
        seed, counter, static_cast<std::uint64_t>(c.index));
    FH_CHECK_LAUNCH();
  }
}

void DiffusionSampler::reverse(float* x, const EpsilonFn& eps_fn, std::int64_t batch, std::uint64_t seed,
                               const std::uint64_t* counter, cudaStream_t stream) {
  run(x, eps_fn, reverse_, true, batch, seed, counter, stream);
}

void DiffusionSampler::sample(float* x, const EpsilonFn& eps_fn, std::int64_t batch, std::uint64_t seed,
                              const std::uint64_t* counter, cudaStream_t stream) {
  initial_noise(x, batch, seed, counter, stream);
  reverse(x, eps_fn, batch, seed, counter, stream);
}

void DiffusionSampler::invert(float* x, const EpsilonFn& eps_fn, std::int64_t batch, cudaStream_t stream) {
  FH_EXPECT(spec_.kind == SamplerKind::ddim && spec_.eta == 0.0, "DiffusionSampler::invert needs ddim with eta = 0");
  run(x, eps_fn, forward_, false, batch, 0, nullptr, stream);
}

}  // namespace foxhunt::models
