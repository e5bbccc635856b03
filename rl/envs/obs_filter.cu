#include "rl/envs/obs_filter.hpp"

#include <cuda_bf16.h>

#include <algorithm>
#include <utility>
#include <string>

#include "gpu/check.hpp"
#include "gpu/launch.cuh"

namespace foxhunt::rl {
namespace {

template <class T>
__global__ void select_columns_kernel(T* __restrict__ out, const float* __restrict__ in,
                                      const std::int32_t* __restrict__ columns, std::int64_t rows,
                                      std::int64_t in_cols, std::int64_t k) {
  const std::int64_t total = rows * k;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t r = i / k, j = i % k;
    out[i] = static_cast<T>(in[r * in_cols + columns[j]]);
  }
}

}  // namespace

void select_columns(void* out, gpu::DType out_dtype, const float* in, const std::int32_t* columns, std::int64_t rows,
                    std::int64_t in_cols, std::int64_t k, cudaStream_t stream) {
  const std::int64_t total = rows * k;
  if (total <= 0) return;
  if (out_dtype == gpu::DType::bf16)
    select_columns_kernel<<<gpu::grid_stride_blocks(total), gpu::kBlock, 0, stream>>>(
        static_cast<__nv_bfloat16*>(out), in, columns, rows, in_cols, k);
  else
    select_columns_kernel<<<gpu::grid_stride_blocks(total), gpu::kBlock, 0, stream>>>(static_cast<float*>(out), in,
                                                                                      columns, rows, in_cols, k);
  FH_CHECK_LAUNCH();
}

ObservationFilter::ObservationFilter(std::unique_ptr<VecEnv> inner, std::vector<std::int32_t> columns,
                                     cudaStream_t stream)
    : inner_(std::move(inner)), columns_(std::move(columns)) {
  FH_EXPECT(inner_ != nullptr, "ObservationFilter: no inner environment");
  FH_EXPECT(!columns_.empty(), "ObservationFilter: at least one column");
  std::vector<std::int32_t> sorted = columns_;
  std::sort(sorted.begin(), sorted.end());
  for (std::size_t i = 0; i < sorted.size(); ++i) {
    FH_EXPECT(sorted[i] >= 0 && sorted[i] < inner_->obs_dim(),
              "ObservationFilter: column " + std::to_string(sorted[i]) + " outside the observation [0, " +
                  std::to_string(inner_->obs_dim() - 1) + "]");
    FH_EXPECT(i == 0 || sorted[i] != sorted[i - 1], "ObservationFilter: column " + std::to_string(sorted[i]) +
                                                        " listed twice");
  }
  d_columns_ = gpu::DeviceBuffer<std::int32_t>(columns_.size());
  d_columns_.upload(columns_, stream);
  const auto n = static_cast<std::size_t>(inner_->num_envs() * inner_->obs_dim());
  obs_ = gpu::DeviceBuffer<float>(n);
  final_obs_ = gpu::DeviceBuffer<float>(n);
  final_obs_.zero(stream);
}

void ObservationFilter::reset(void* obs, gpu::DType obs_dtype, std::uint64_t seed, cudaStream_t stream) {
  inner_->reset(obs_.data(), gpu::DType::f32, seed, stream);
  select_columns(obs, obs_dtype, obs_.data(), d_columns_.data(), num_envs(), inner_->obs_dim(), obs_dim(), stream);
}

void ObservationFilter::step(const StepOutputs& out, const ActionInput& actions, std::int64_t steps,
                             cudaStream_t stream) {
  check_step_args(out, actions, steps);
  const std::int64_t n = num_envs(), c = inner_->obs_dim(), k = obs_dim();
  const std::size_t elem = out.obs_dtype == gpu::DType::bf16 ? 2 : 4;
  // One inner step at a time: the staging buffers hold one step of full observations.
  for (std::int64_t t = 0; t < steps; ++t) {
    StepOutputs o;
    o.obs = obs_.data();
    o.reward = out.reward + t * n;
    o.terminated = out.terminated + t * n;
    o.truncated = out.truncated + t * n;
    o.final_obs = out.final_obs ? final_obs_.data() : nullptr;
    o.obs_dtype = gpu::DType::f32;
    ActionInput a = actions;
    const int w = action_space().width();
    if (a.discrete) a.discrete += t * n * w;
    if (a.continuous) a.continuous += t * n * w;
    inner_->step(o, a, 1, stream);
    select_columns(static_cast<std::byte*>(out.obs) + t * n * k * elem, out.obs_dtype, obs_.data(), d_columns_.data(),
                   n, c, k, stream);
    if (out.final_obs)
      select_columns(static_cast<std::byte*>(out.final_obs) + t * n * k * elem, out.obs_dtype, final_obs_.data(),
                     d_columns_.data(), n, c, k, stream);
  }
}

}  // namespace foxhunt::rl
