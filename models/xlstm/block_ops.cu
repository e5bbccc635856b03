#include "models/xlstm/block_ops.hpp"

#include "gpu/check.hpp"
#include "gpu/launch.cuh"
#include "models/blocks/column_sum.cuh"
#include "models/xlstm/gates.cuh"

namespace foxhunt::models {
namespace {

using xlstm_detail::sigmoid;

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

constexpr int kWarpsPerBlock = 8;

// One warp per (row, head) group of D channels.
__global__ void head_norm_forward_kernel(float* __restrict__ y, float* __restrict__ mean, float* __restrict__ rstd,
                                         const float* __restrict__ x, const float* __restrict__ weight,
                                         std::int64_t groups, int H, int D, float eps) {
  const int lane = threadIdx.x & 31;
  const std::int64_t grp = blockIdx.x * static_cast<std::int64_t>(kWarpsPerBlock) + (threadIdx.x >> 5);
  if (grp >= groups) return;
  const float* xg = x + grp * D;
  float s = 0.f;
  for (int d = lane; d < D; d += 32) s += xg[d];
  const float mu = warp_sum(s) / static_cast<float>(D);
  float q = 0.f;
  for (int d = lane; d < D; d += 32) {
    const float c = xg[d] - mu;
    q += c * c;
  }
  const float rs = rsqrtf(warp_sum(q) / static_cast<float>(D) + eps);
  const float* w = weight + (grp % H) * D;
  float* yg = y + grp * D;
  for (int d = lane; d < D; d += 32) yg[d] = (xg[d] - mu) * rs * w[d];
  if (lane == 0) {
    if (mean != nullptr) mean[grp] = mu;
    if (rstd != nullptr) rstd[grp] = rs;
  }
}

__global__ void head_norm_backward_kernel(float* __restrict__ dx, const float* __restrict__ dy,
                                          const float* __restrict__ x, const float* __restrict__ mean,
                                          const float* __restrict__ rstd, const float* __restrict__ weight,
                                          std::int64_t groups, int H, int D) {
  const int lane = threadIdx.x & 31;
  const std::int64_t grp = blockIdx.x * static_cast<std::int64_t>(kWarpsPerBlock) + (threadIdx.x >> 5);
  if (grp >= groups) return;
  const float* xg = x + grp * D;
  const float* dyg = dy + grp * D;
  const float* w = weight + (grp % H) * D;
  const float mu = mean[grp], rs = rstd[grp];
  float sg = 0.f, sgx = 0.f;
  for (int d = lane; d < D; d += 32) {
    const float g = dyg[d] * w[d], xh = (xg[d] - mu) * rs;
    sg += g;
    sgx += g * xh;
  }
  const float mg = warp_sum(sg) / static_cast<float>(D), mgx = warp_sum(sgx) / static_cast<float>(D);
  float* dxg = dx + grp * D;
  for (int d = lane; d < D; d += 32) {
    const float g = dyg[d] * w[d], xh = (xg[d] - mu) * rs;
    dxg[d] = rs * (g - mg - xh * mgx);
  }
}

struct HeadNormWeightTerm {
  const float *dy, *x, *mean, *rstd;
  std::int64_t C, H, D;
  __device__ float operator()(std::int64_t r, std::int64_t j) const {
    const std::int64_t g = r * H + j / D;
    return dy[r * C + j] * (x[r * C + j] - mean[g]) * rstd[g];
  }
};

__global__ void skip_gate_forward_kernel(float* __restrict__ out, const float* __restrict__ hn,
                                         const float* __restrict__ xc, const float* __restrict__ skip,
                                         const float* __restrict__ z, std::int64_t n, std::int64_t C) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const float zz = z[i];
    out[i] = (hn[i] + skip[i % C] * xc[i]) * zz * sigmoid(zz);
  }
}

__global__ void skip_gate_backward_kernel(float* __restrict__ d_hn, float* __restrict__ d_z, float* __restrict__ d_xc,
                                          const float* __restrict__ d_out, const float* __restrict__ hn,
                                          const float* __restrict__ xc, const float* __restrict__ skip,
                                          const float* __restrict__ z, std::int64_t n, std::int64_t C) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const float zz = z[i], sg = sigmoid(zz), sk = skip[i % C];
    const float s = hn[i] + sk * xc[i], d = d_out[i];
    const float dh = d * zz * sg;
    d_hn[i] = dh;
    d_z[i] = d * s * sg * (1.f + zz * (1.f - sg));
    d_xc[i] = dh * sk;
  }
}

struct SkipTerm {
  const float *d_out, *xc, *z;
  std::int64_t C;
  __device__ float operator()(std::int64_t r, std::int64_t j) const {
    const std::int64_t i = r * C + j;
    const float zz = z[i];
    return d_out[i] * zz * sigmoid(zz) * xc[i];
  }
};

__global__ void pack_halves_kernel(float* __restrict__ out, const float* __restrict__ a, const float* __restrict__ b,
                                   std::int64_t rows, std::int64_t W) {
  const std::int64_t n = rows * 2 * W;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t r = i / (2 * W), c = i - r * 2 * W;
    out[i] = c < W ? a[r * W + c] : b[r * W + c - W];
  }
}

__global__ void unpack_halves_kernel(float* __restrict__ a, float* __restrict__ b, const float* __restrict__ in,
                                     std::int64_t rows, std::int64_t W) {
  const std::int64_t n = rows * 2 * W;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t r = i / (2 * W), c = i - r * 2 * W;
    if (c < W)
      a[r * W + c] = in[i];
    else
      b[r * W + c - W] = in[i];
  }
}

}  // namespace

void head_norm_forward(float* y, float* mean, float* rstd, const float* x, const float* weight, std::int64_t rows,
                       std::int64_t H, std::int64_t D, float eps, cudaStream_t stream) {
  const std::int64_t groups = rows * H;
  head_norm_forward_kernel<<<gpu::ceil_div(groups, kWarpsPerBlock), 32 * kWarpsPerBlock, 0, stream>>>(
      y, mean, rstd, x, weight, groups, static_cast<int>(H), static_cast<int>(D), eps);
  FH_CHECK_LAUNCH();
}

std::size_t block_ops_scratch_floats(std::int64_t rows, std::int64_t C) {
  return blocks_detail::column_sum_floats(rows, C);
}

void head_norm_backward(float* dx, float* dweight, const float* dy, const float* x, const float* mean,
                        const float* rstd, const float* weight, std::int64_t rows, std::int64_t H, std::int64_t D,
                        float* scratch, cudaStream_t stream) {
  const std::int64_t groups = rows * H;
  head_norm_backward_kernel<<<gpu::ceil_div(groups, kWarpsPerBlock), 32 * kWarpsPerBlock, 0, stream>>>(
      dx, dy, x, mean, rstd, weight, groups, static_cast<int>(H), static_cast<int>(D));
  FH_CHECK_LAUNCH();
  blocks_detail::column_sum(dweight, rows, H * D, HeadNormWeightTerm{dy, x, mean, rstd, H * D, H, D}, scratch, stream);
}

void skip_gate_forward(float* out, const float* hn, const float* xc, const float* skip, const float* z,
                       std::int64_t rows, std::int64_t C, cudaStream_t stream) {
  skip_gate_forward_kernel<<<gpu::grid_stride_blocks(rows * C), gpu::kBlock, 0, stream>>>(out, hn, xc, skip, z,
                                                                                          rows * C, C);
  FH_CHECK_LAUNCH();
}

void skip_gate_backward(float* d_hn, float* d_z, float* d_xc, float* d_skip, const float* d_out, const float* hn,
                        const float* xc, const float* skip, const float* z, std::int64_t rows, std::int64_t C,
                        float* scratch, cudaStream_t stream) {
  skip_gate_backward_kernel<<<gpu::grid_stride_blocks(rows * C), gpu::kBlock, 0, stream>>>(d_hn, d_z, d_xc, d_out, hn,
                                                                                           xc, skip, z, rows * C, C);
  FH_CHECK_LAUNCH();
  blocks_detail::column_sum(d_skip, rows, C, SkipTerm{d_out, xc, z, C}, scratch, stream);
}

void pack_halves(float* out, const float* a, const float* b, std::int64_t rows, std::int64_t W, cudaStream_t stream) {
  pack_halves_kernel<<<gpu::grid_stride_blocks(rows * 2 * W), gpu::kBlock, 0, stream>>>(out, a, b, rows, W);
  FH_CHECK_LAUNCH();
}

void unpack_halves(float* a, float* b, const float* in, std::int64_t rows, std::int64_t W, cudaStream_t stream) {
  unpack_halves_kernel<<<gpu::grid_stride_blocks(rows * 2 * W), gpu::kBlock, 0, stream>>>(a, b, in, rows, W);
  FH_CHECK_LAUNCH();
}

}  // namespace foxhunt::models
