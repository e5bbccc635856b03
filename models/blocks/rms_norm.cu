#include "models/blocks/rms_norm.hpp"

#include <algorithm>
#include <string>
#include <vector>

#include "gpu/activation.cuh"
#include "gpu/check.hpp"
#include "gpu/launch.cuh"
#include "gpu/reduce.cuh"
#include "models/blocks/column_sum.cuh"

namespace foxhunt::models {
namespace {

constexpr int kRowBlock = 128;  // 4 warps, one row each

int row_grid(std::int64_t rows) {
  return static_cast<int>(std::clamp<std::int64_t>((rows + 3) / 4, 1, std::int64_t{1} << 16));
}

__device__ __forceinline__ float silu(float v) { return gpu::activate<gpu::Activation::silu>(v, 0.f); }
__device__ __forceinline__ float silu_grad(float v) { return gpu::activate_grad<gpu::Activation::silu>(v, 0.f); }

// The normalised input g of row r, column c: x, or x ⊙ silu(z) when gated.
template <bool kGated>
__device__ __forceinline__ float norm_input(const float* x, const float* z, std::int64_t z_stride, std::int64_t r,
                                            std::int64_t C, std::int64_t c) {
  const float v = x[r * C + c];
  if constexpr (kGated) return v * silu(z[r * z_stride + c]);
  return v;
}

// One warp per row (grid-stride over rows): the mean square by an xor butterfly (every lane holds
// the same bits), then y = g * rstd * weight.
template <bool kGated>
__global__ void rms_forward_kernel(float* __restrict__ y, float* __restrict__ rstd, const float* __restrict__ x,
                                   const float* __restrict__ z, std::int64_t z_stride, const float* __restrict__ w,
                                   std::int64_t rows, std::int64_t C, float eps) {
  const int lane = threadIdx.x & 31;
  const std::int64_t warps = (static_cast<std::int64_t>(gridDim.x) * blockDim.x) >> 5;
  for (std::int64_t r = (blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x) >> 5; r < rows; r += warps) {
    float ss = 0.f;
    for (std::int64_t c = lane; c < C; c += 32) {
      const float g = norm_input<kGated>(x, z, z_stride, r, C, c);
      ss = fmaf(g, g, ss);
    }
    ss = gpu::warp_sum(ss);
    const float rs = rsqrtf(ss / static_cast<float>(C) + eps);
    if (rstd != nullptr && lane == 0) rstd[r] = rs;
    for (std::int64_t c = lane; c < C; c += 32) y[r * C + c] = norm_input<kGated>(x, z, z_stride, r, C, c) * rs * w[c];
  }
}

// One warp per row: dg = rstd (dn - n mean(dn n)), then dx (and dz) from dg.
template <bool kGated>
__global__ void rms_backward_kernel(float* __restrict__ dx, float* __restrict__ dz, std::int64_t dz_stride,
                                    const float* __restrict__ dy, const float* __restrict__ x,
                                    const float* __restrict__ z, std::int64_t z_stride, const float* __restrict__ w,
                                    const float* __restrict__ rstd, std::int64_t rows, std::int64_t C) {
  const int lane = threadIdx.x & 31;
  const std::int64_t warps = (static_cast<std::int64_t>(gridDim.x) * blockDim.x) >> 5;
  for (std::int64_t r = (blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x) >> 5; r < rows; r += warps) {
    const float rs = rstd[r];
    float dot = 0.f;
    for (std::int64_t c = lane; c < C; c += 32) {
      const float n = norm_input<kGated>(x, z, z_stride, r, C, c) * rs;
      dot = fmaf(dy[r * C + c] * w[c], n, dot);
    }
    const float mean = gpu::warp_sum(dot) / static_cast<float>(C);
    for (std::int64_t c = lane; c < C; c += 32) {
      const float n = norm_input<kGated>(x, z, z_stride, r, C, c) * rs;
      const float dg = rs * (dy[r * C + c] * w[c] - n * mean);
      if constexpr (kGated) {
        const float zv = z[r * z_stride + c];
        if (dx != nullptr) dx[r * C + c] = dg * silu(zv);
        if (dz != nullptr) dz[r * dz_stride + c] = dg * x[r * C + c] * silu_grad(zv);
      } else {
        dx[r * C + c] = dg;
      }
    }
  }
}

// d_weight's summand at (r, c): dy ⊙ n.
template <bool kGated>
struct WeightGradTerm {
  const float *dy, *x, *z, *rstd;
  std::int64_t z_stride, C;
  __device__ float operator()(std::int64_t r, std::int64_t c) const {
    return dy[r * C + c] * (norm_input<kGated>(x, z, z_stride, r, C, c) * rstd[r]);
  }
};

void check_shape(const char* what, std::int64_t rows, std::int64_t C) {
  FH_EXPECT(rows >= 0 && C >= 1, std::string(what) + ": rows must be >= 0 and C >= 1, got rows " +
                                     std::to_string(rows) + ", C " + std::to_string(C));
}

template <bool kGated>
void backward_impl(float* dx, float* dz, std::int64_t dz_stride, float* dweight, const float* dy, const float* x,
                   const float* z, std::int64_t z_stride, const float* weight, const float* rstd, std::int64_t rows,
                   std::int64_t C, std::byte* workspace, cudaStream_t stream) {
  if (rows == 0) return;
  if (dweight != nullptr) {
    FH_EXPECT(workspace != nullptr, "rms_norm backward: workspace is null");
    blocks_detail::column_sum(dweight, rows, C, WeightGradTerm<kGated>{dy, x, z, rstd, z_stride, C},
                              reinterpret_cast<float*>(workspace), stream);
  }
  if (dx != nullptr || dz != nullptr) {
    rms_backward_kernel<kGated>
        <<<row_grid(rows), kRowBlock, 0, stream>>>(dx, dz, dz_stride, dy, x, z, z_stride, weight, rstd, rows, C);
    FH_CHECK_LAUNCH();
  }
}

}  // namespace

void rms_norm_forward(float* y, float* rstd, const float* x, const float* weight, std::int64_t rows, std::int64_t C,
                      float eps, cudaStream_t stream) {
  check_shape("rms_norm_forward", rows, C);
  if (rows == 0) return;
  rms_forward_kernel<false><<<row_grid(rows), kRowBlock, 0, stream>>>(y, rstd, x, nullptr, 0, weight, rows, C, eps);
  FH_CHECK_LAUNCH();
}

std::size_t rms_norm_backward_workspace_bytes(std::int64_t rows, std::int64_t C) {
  return blocks_detail::column_sum_floats(rows, C) * sizeof(float);
}

void rms_norm_backward(float* dx, float* dweight, const float* dy, const float* x, const float* weight,
                       const float* rstd, std::int64_t rows, std::int64_t C, std::byte* workspace,
                       cudaStream_t stream) {
  check_shape("rms_norm_backward", rows, C);
  backward_impl<false>(dx, nullptr, 0, dweight, dy, x, nullptr, 0, weight, rstd, rows, C, workspace, stream);
}

void rms_norm_gated_forward(float* y, float* rstd, const float* x, const float* z, std::int64_t z_stride,
                            const float* weight, std::int64_t rows, std::int64_t C, float eps, cudaStream_t stream) {
  check_shape("rms_norm_gated_forward", rows, C);
  FH_EXPECT(z_stride >= C, "rms_norm_gated_forward: z_stride must be >= C, got " + std::to_string(z_stride));
  if (rows == 0) return;
  rms_forward_kernel<true><<<row_grid(rows), kRowBlock, 0, stream>>>(y, rstd, x, z, z_stride, weight, rows, C, eps);
  FH_CHECK_LAUNCH();
}

void rms_norm_gated_backward(float* dx, float* dz, std::int64_t dz_stride, float* dweight, const float* dy,
                             const float* x, const float* z, std::int64_t z_stride, const float* weight,
                             const float* rstd, std::int64_t rows, std::int64_t C, std::byte* workspace,
                             cudaStream_t stream) {
  check_shape("rms_norm_gated_backward", rows, C);
  FH_EXPECT(z_stride >= C, "rms_norm_gated_backward: z_stride must be >= C, got " + std::to_string(z_stride));
  FH_EXPECT(dz == nullptr || dz_stride >= C,
            "rms_norm_gated_backward: dz_stride must be >= C, got " + std::to_string(dz_stride));
  backward_impl<true>(dx, dz, dz_stride, dweight, dy, x, z, z_stride, weight, rstd, rows, C, workspace, stream);
}

RmsNorm::RmsNorm(RmsNormSpec spec) : spec_(std::move(spec)) {
  FH_EXPECT(!spec_.name.empty(), "RmsNorm: name must not be empty");
  FH_EXPECT(spec_.features >= 1,
            "RmsNorm " + spec_.name + ": features must be >= 1, got " + std::to_string(spec_.features));
  FH_EXPECT(spec_.eps > 0.f, "RmsNorm " + spec_.name + ": eps must be > 0");
}

void RmsNorm::declare(gpu::ParameterArena& arena) const { arena.declare(weight_name(), gpu::Shape{spec_.features}); }

void RmsNorm::init(gpu::ParameterArena& arena, std::mt19937_64&, cudaStream_t stream) const {
  arena.upload_param(weight_name(), std::vector<float>(static_cast<std::size_t>(spec_.features), 1.f), stream);
}

void RmsNorm::bind(gpu::ParameterArena& arena) {
  FH_EXPECT(arena.finalized(), "RmsNorm " + spec_.name + ": bind needs a finalized arena");
  w_ = arena.param(weight_name()).as<float>();
  dw_ = arena.grad(weight_name()).as<float>();
  bound_ = true;
}

std::size_t RmsNorm::workspace_bytes(std::int64_t max_batch, bool) const {
  FH_EXPECT(max_batch >= 1, "RmsNorm " + spec_.name + ": workspace max_batch must be >= 1");
  WorkspaceCarver c;
  c.take<float>(static_cast<std::size_t>(max_batch));                               // rstd
  c.take<std::byte>(rms_norm_backward_workspace_bytes(max_batch, spec_.features));  // d_weight partials
  return c.bytes();
}

void RmsNorm::forward(float* out, const float* in, std::int64_t batch, bool, const Workspace& ws, gpu::BlasLane lane) {
  FH_EXPECT(bound_, "RmsNorm " + spec_.name + ": forward before bind");
  FH_EXPECT(ws.data != nullptr && batch >= 1 && batch <= ws.max_batch,
            "RmsNorm " + spec_.name + ": forward: batch must be in [1, ws.max_batch] with a workspace, got " +
                std::to_string(batch));
  WorkspaceCarver c(ws.data);
  float* rstd = c.take<float>(static_cast<std::size_t>(ws.max_batch));
  rms_norm_forward(out, rstd, in, w_, batch, spec_.features, spec_.eps, lane.stream);
}

void RmsNorm::backward(float* d_in, const float* d_out, const float* in, std::int64_t batch, const Workspace& ws,
                       gpu::BlasLane lane, const SideLane* side) {
  FH_EXPECT(bound_, "RmsNorm " + spec_.name + ": backward before bind");
  FH_EXPECT(ws.data != nullptr && batch >= 1 && batch <= ws.max_batch,
            "RmsNorm " + spec_.name + ": backward: batch must be in [1, ws.max_batch] with a workspace, got " +
                std::to_string(batch));
  WorkspaceCarver c(ws.data);
  float* rstd = c.take<float>(static_cast<std::size_t>(ws.max_batch));
  std::byte* partials = c.take<std::byte>(rms_norm_backward_workspace_bytes(ws.max_batch, spec_.features));
  rms_norm_backward(d_in, dw_, d_out, in, w_, rstd, batch, spec_.features, partials, lane.stream);
  if (side != nullptr) {  // Module::backward's contract: the caller's side work is joined too
    FH_CHECK(cudaEventRecord(side->join, side->lane.stream));
    FH_CHECK(cudaStreamWaitEvent(lane.stream, side->join, 0));
  }
}

}  // namespace foxhunt::models
