#include "models/diffusion/noising.hpp"

#include "gpu/check.hpp"
#include "gpu/launch.cuh"
#include "gpu/loss.hpp"
#include "gpu/philox.cuh"

namespace foxhunt::models {
namespace {

// One thread per (row, group of 4 elements): one Philox block of normals.
__global__ void noising_kernel(float* __restrict__ x_t, float* __restrict__ eps, std::int32_t* __restrict__ t,
                               const float* __restrict__ x0, std::int64_t B, std::int64_t D, ScheduleView sched,
                               std::int32_t fixed_step, bool shared_rows, std::uint64_t seed,
                               const std::uint64_t* __restrict__ counter) {
  const std::int64_t groups = (D + 3) / 4, n = B * groups;
  const std::uint64_t c = *counter;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t b = i / groups, q = i % groups;
    const auto row = shared_rows ? 0u : static_cast<std::uint32_t>(b);  // whose draws
    std::int32_t step = fixed_step;
    if (step < 0) {
      const uint4 tb = gpu::random_bits4(seed, kTimestepTag << 24 | row, c);
      step = static_cast<std::int32_t>((static_cast<std::uint64_t>(tb.x) * static_cast<std::uint64_t>(sched.steps)) >> 32);
    }
    if (q == 0) t[b] = step;
    const float sa = sched.sqrt_alpha_bar[step], so = sched.sqrt_one_minus_alpha_bar[step];
    const float4 z = gpu::normal4(seed, kNoiseTag << 24 | row, c << 16 | static_cast<std::uint64_t>(q));
    const float zs[4] = {z.x, z.y, z.z, z.w};
    for (int k = 0; k < 4; ++k) {
      const std::int64_t j = 4 * q + k;
      if (j >= D) break;
      const std::int64_t at = b * D + j;
      eps[at] = zs[k];
      x_t[at] = sa * x0[at] + so * zs[k];
    }
  }
}

__global__ void row_mse_kernel(float* __restrict__ out, const float* __restrict__ a, const float* __restrict__ b,
                               std::int64_t B, std::int64_t D) {
  const std::int64_t warps = static_cast<std::int64_t>(gridDim.x) * (blockDim.x / 32);
  const int lane = static_cast<int>(threadIdx.x % 32);
  for (std::int64_t r = blockIdx.x * static_cast<std::int64_t>(blockDim.x / 32) + threadIdx.x / 32; r < B; r += warps) {
    double s = 0;
    for (std::int64_t j = lane; j < D; j += 32) {
      const double d = static_cast<double>(a[r * D + j]) - static_cast<double>(b[r * D + j]);
      s += d * d;
    }
    for (int o = 16; o > 0; o /= 2) s += __shfl_down_sync(0xffffffffu, s, o);
    if (lane == 0) out[r] = static_cast<float>(s / static_cast<double>(D));
  }
}

}  // namespace

void diffusion_noising(float* x_t, float* eps, std::int32_t* t, const float* x0, std::int64_t batch, std::int64_t dim,
                       const ScheduleView& schedule, std::uint64_t seed, const std::uint64_t* counter,
                       cudaStream_t stream) {
  FH_EXPECT(batch >= 1 && batch <= kMaxDiffusionBatch, "diffusion_noising: batch outside [1, 2^24]");
  FH_EXPECT(dim >= 1 && dim <= kMaxDiffusionDim, "diffusion_noising: dim outside [1, 2^18]");
  const std::int64_t n = batch * ((dim + 3) / 4);
  noising_kernel<<<gpu::grid_stride_blocks(n), gpu::kBlock, 0, stream>>>(x_t, eps, t, x0, batch, dim, schedule, -1,
                                                                          false, seed, counter);
  FH_CHECK_LAUNCH();
}

void diffusion_noising_at(float* x_t, float* eps, std::int32_t* t, const float* x0, std::int64_t batch,
                          std::int64_t dim, const ScheduleView& schedule, std::int32_t step, std::uint64_t seed,
                          const std::uint64_t* counter, cudaStream_t stream) {
  FH_EXPECT(batch >= 1 && batch <= kMaxDiffusionBatch, "diffusion_noising_at: batch outside [1, 2^24]");
  FH_EXPECT(dim >= 1 && dim <= kMaxDiffusionDim, "diffusion_noising_at: dim outside [1, 2^18]");
  FH_EXPECT(step >= 0 && step < schedule.steps, "diffusion_noising_at: step outside [0, T)");
  const std::int64_t n = batch * ((dim + 3) / 4);
  noising_kernel<<<gpu::grid_stride_blocks(n), gpu::kBlock, 0, stream>>>(x_t, eps, t, x0, batch, dim, schedule, step,
                                                                          false, seed, counter);
  FH_CHECK_LAUNCH();
}

void diffusion_noising_shared_at(float* x_t, float* eps, std::int32_t* t, const float* x0, std::int64_t batch,
                                 std::int64_t dim, const ScheduleView& schedule, std::int32_t step, std::uint64_t seed,
                                 const std::uint64_t* counter, cudaStream_t stream) {
  FH_EXPECT(batch >= 1 && batch <= kMaxDiffusionBatch, "diffusion_noising_shared_at: batch outside [1, 2^24]");
  FH_EXPECT(dim >= 1 && dim <= kMaxDiffusionDim, "diffusion_noising_shared_at: dim outside [1, 2^18]");
  FH_EXPECT(step >= 0 && step < schedule.steps, "diffusion_noising_shared_at: step outside [0, T)");
  const std::int64_t n = batch * ((dim + 3) / 4);
  noising_kernel<<<gpu::grid_stride_blocks(n), gpu::kBlock, 0, stream>>>(x_t, eps, t, x0, batch, dim, schedule, step,
                                                                          true, seed, counter);
  FH_CHECK_LAUNCH();
}

void row_mean_squared_error(float* out, const float* a, const float* b, std::int64_t batch, std::int64_t dim,
                            cudaStream_t stream) {
  if (batch == 0) return;
  // One warp per row: batch x 32 threads in blocks of kBlock (8 warps).
  row_mse_kernel<<<gpu::grid_stride_blocks(batch * 32), gpu::kBlock, 0, stream>>>(out, a, b, batch, dim);
  FH_CHECK_LAUNCH();
}

std::size_t epsilon_loss_workspace_bytes(std::int64_t batch, std::int64_t dim) {
  return gpu::loss_workspace_bytes(batch * dim);
}

void epsilon_loss(float* loss, float* d_eps_hat, const float* eps_hat, const float* eps, std::int64_t batch,
                  std::int64_t dim, void* workspace, cudaStream_t stream) {
  gpu::mse_loss(loss, d_eps_hat, eps_hat, eps, nullptr, batch * dim, workspace, stream);
}

}  // namespace foxhunt::models
