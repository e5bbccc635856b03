// LayerNorm forward and backward (gpu/layernorm.hpp).
// Forward, cols <= 1024: one warp per row, the row in registers, exact two-pass mean/variance
// from registers, one read and one write. Longer rows: one block per row, the row cached in
// shared memory when it fits, else re-read (three passes: sum, squared deviations, write).
// Backward, cols <= 1024: one warp per row computes d_in and keeps per-lane running column sums
// of d_gamma/d_beta in registers across the rows it handles (its columns never change), then
// writes them as one partial row per warp; a small kernel adds the partials in a fixed order.
// Longer rows: a column kernel writes per-chunk partials first, then one block per row writes
// d_in, then the same fixed-order final sum. No atomics anywhere: results are reproducible.
#include "gpu/layernorm.hpp"

#include <algorithm>
#include <cmath>

#include "gpu/check.hpp"
#include "gpu/launch.cuh"
#include "gpu/reduce.cuh"
#include "gpu/rows.cuh"

namespace foxhunt::gpu {
namespace {

constexpr std::int64_t kRowsPerWarp = 8;     // backward: rows per warp before adding warps
constexpr std::int64_t kMaxPartials = 1024;  // backward: partial rows of d_gamma/d_beta, at most
constexpr std::int64_t kTargetColumnBlocks = 2048;
constexpr std::int64_t kMinChunkRows = 64;

// Warps (= partial rows) of the fused warp-per-row backward; a multiple of kWarpsPerBlock.
std::int64_t warp_partials(std::int64_t rows) {
  const std::int64_t warps =
      std::min(std::max<std::int64_t>(1, (rows + kRowsPerWarp - 1) / kRowsPerWarp), kMaxPartials);
  return (warps + rows::kWarpsPerBlock - 1) / rows::kWarpsPerBlock * rows::kWarpsPerBlock;
}
// Row chunks (= partial rows) of the column kernel used for long rows.
std::int64_t column_chunks(std::int64_t rows, std::int64_t cols) {
  const std::int64_t tiles = (cols + 31) / 32;
  const std::int64_t want = (kTargetColumnBlocks + tiles - 1) / tiles;
  const std::int64_t most = std::max<std::int64_t>(1, (rows + kMinChunkRows - 1) / kMinChunkRows);
  return std::max<std::int64_t>(1, std::min({want, most, kMaxPartials}));
}
std::int64_t backward_partials(std::int64_t rows, std::int64_t cols) {
  return cols <= rows::kWarpMaxCols ? warp_partials(rows) : column_chunks(rows, cols);
}

// ---- forward ------------------------------------------------------------------------------

template <int kVec, int kIters>
__global__ void __launch_bounds__(rows::kWarpsPerBlock * 32)
    forward_warp_kernel(float* out, float* mean, float* rstd, const float* in, const float* gamma, const float* beta,
                        std::int64_t nrows, int cols, float eps) {
  using Frag = rows::Frag<kVec, kIters>;
  const int lane = threadIdx.x & 31;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * rows::kWarpsPerBlock;
  for (std::int64_t r = static_cast<std::int64_t>(blockIdx.x) * rows::kWarpsPerBlock + (threadIdx.x >> 5); r < nrows;
       r += stride) {
    Frag x;
    x.load(in + r * cols, cols, lane, 0.f);
    float s = 0.f;
#pragma unroll
    for (int i = 0; i < Frag::kN; ++i) s += x.v[i];
    const float mu = warp_sum(s) / static_cast<float>(cols);
    float q = 0.f;
#pragma unroll
    for (int i = 0; i < Frag::kN; ++i) {
      const float d = x.v[i] - mu;
      if (Frag::col(i, lane) < cols) q += d * d;  // padding is not a sample
    }
    const float rs = 1.f / sqrtf(warp_sum(q) / static_cast<float>(cols) + eps);
#pragma unroll
    for (int it = 0; it < kIters; ++it) {
      const int c = (it * 32 + lane) * kVec;
      if (c < cols) {
        float g[kVec], b[kVec];  // gamma/beta: L1/L2-resident after the first row; loaded per chunk to save registers
        rows::load_vec(g, gamma + c);
        rows::load_vec(b, beta + c);
#pragma unroll
        for (int k = 0; k < kVec; ++k) x.v[it * kVec + k] = (x.v[it * kVec + k] - mu) * rs * g[k] + b[k];
      }
    }
    x.store(out + r * cols, cols, lane);
    if (lane == 0) {
      if (mean) mean[r] = mu;
      if (rstd) rstd[r] = rs;
    }
  }
}

// Thread t handles columns t, t + blockDim.x, ... in every pass, so the shared-memory row
// cache needs no barriers of its own.
template <bool kCached>
__global__ void __launch_bounds__(rows::kRowBlockMax)
    forward_block_kernel(float* out, float* mean, float* rstd, const float* in, const float* gamma, const float* beta,
                         std::int64_t nrows, std::int64_t cols, float eps) {
  extern __shared__ float cache[];  // (cols) when kCached
  __shared__ float scratch[32];
  for (std::int64_t r = blockIdx.x; r < nrows; r += gridDim.x) {
    const float* x = in + r * cols;
    float* y = out + r * cols;
    float s = 0.f;
#pragma unroll 4
    for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const float v = x[c];
      if constexpr (kCached) cache[c] = v;
      s += v;
    }
    const float mu = block_sum(s, scratch) / static_cast<float>(cols);
    float q = 0.f;
#pragma unroll 4
    for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const float d = (kCached ? cache[c] : x[c]) - mu;
      q += d * d;
    }
    const float rs = 1.f / sqrtf(block_sum(q, scratch) / static_cast<float>(cols) + eps);
#pragma unroll 4
    for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x)
      y[c] = ((kCached ? cache[c] : x[c]) - mu) * rs * gamma[c] + beta[c];
    if (threadIdx.x == 0) {
      if (mean) mean[r] = mu;
      if (rstd) rstd[r] = rs;
    }
  }
}

// ---- backward -----------------------------------------------------------------------------

// part_g, part_b: (gridDim.x * kWarpsPerBlock, cols): one partial row per warp, all written.
template <int kVec, int kIters>
__global__ void __launch_bounds__(rows::kWarpsPerBlock * 32)
    backward_warp_kernel(float* d_in, float* part_g, float* part_b, const float* d_out, const float* in,
                         const float* mean, const float* rstd, const float* gamma, std::int64_t nrows, int cols) {
  using Frag = rows::Frag<kVec, kIters>;
  const int lane = threadIdx.x & 31;
  const std::int64_t warp = static_cast<std::int64_t>(blockIdx.x) * rows::kWarpsPerBlock + (threadIdx.x >> 5);
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * rows::kWarpsPerBlock;
  Frag acc_g, acc_b;
#pragma unroll
  for (int i = 0; i < Frag::kN; ++i) acc_g.v[i] = acc_b.v[i] = 0.f;
  for (std::int64_t r = warp; r < nrows; r += stride) {
    Frag x, dy, g;
    x.load(in + r * cols, cols, lane, 0.f);
    dy.load(d_out + r * cols, cols, lane, 0.f);
    g.load(gamma, cols, lane, 0.f);  // zero padding: padded g * d_out adds nothing below
    const float mu = mean[r], rs = rstd[r];
    float s1 = 0.f, s2 = 0.f;
#pragma unroll
    for (int i = 0; i < Frag::kN; ++i) {
      const float xh = (x.v[i] - mu) * rs;
      const float gh = dy.v[i] * g.v[i];
      s1 += gh;
      s2 += gh * xh;
      acc_g.v[i] += dy.v[i] * xh;
      acc_b.v[i] += dy.v[i];
      x.v[i] = xh;
      g.v[i] = gh;
    }
    const float m1 = warp_sum(s1) / static_cast<float>(cols);
    const float m2 = warp_sum(s2) / static_cast<float>(cols);
#pragma unroll
    for (int i = 0; i < Frag::kN; ++i) dy.v[i] = rs * (g.v[i] - m1 - x.v[i] * m2);
    dy.store(d_in + r * cols, cols, lane);
  }
  acc_g.store(part_g + warp * cols, cols, lane);
  acc_b.store(part_b + warp * cols, cols, lane);
}

// Long rows, step 1 (before d_in is written, so d_in may alias d_out or in):
// part_g, part_b: (gridDim.y, cols). Block (32, 8) sums 32 columns over one chunk of rows.
__global__ void __launch_bounds__(256)
    column_partials_kernel(float* part_g, float* part_b, const float* d_out, const float* in, const float* mean,
                           const float* rstd, std::int64_t nrows, std::int64_t cols, std::int64_t chunk_rows) {
  __shared__ double sg[8][33], sb[8][33];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const std::int64_t c = static_cast<std::int64_t>(blockIdx.x) * 32 + tx;
  const std::int64_t r0 = static_cast<std::int64_t>(blockIdx.y) * chunk_rows;
  const std::int64_t r1 = std::min(nrows, r0 + chunk_rows);
  double g = 0, b = 0;  // a chunk can hold many rows: double keeps the per-thread sums exact enough
  if (c < cols) {
    for (std::int64_t r = r0 + ty; r < r1; r += 8) {
      const float dy = d_out[r * cols + c];
      const float xh = (in[r * cols + c] - mean[r]) * rstd[r];
      g += dy * xh;
      b += dy;
    }
  }
  sg[ty][tx] = g;
  sb[ty][tx] = b;
  __syncthreads();
  if (ty == 0 && c < cols) {
    for (int k = 1; k < 8; ++k) {
      g += sg[k][tx];
      b += sb[k][tx];
    }
    part_g[blockIdx.y * cols + c] = static_cast<float>(g);
    part_b[blockIdx.y * cols + c] = static_cast<float>(b);
  }
}

// Long rows, step 2: d_in, one block per row.
template <bool kCached>
__global__ void __launch_bounds__(rows::kRowBlockMax)
    backward_block_kernel(float* d_in, const float* d_out, const float* in, const float* mean, const float* rstd,
                          const float* gamma, std::int64_t nrows, std::int64_t cols) {
  extern __shared__ float cache[];  // (2, cols) when kCached: xhat row, then d_out * gamma row
  __shared__ float scratch[32];
  for (std::int64_t r = blockIdx.x; r < nrows; r += gridDim.x) {
    const float* x = in + r * cols;
    const float* dy = d_out + r * cols;
    float* dx = d_in + r * cols;
    const float mu = mean[r], rs = rstd[r];
    float s1 = 0.f, s2 = 0.f;
#pragma unroll 4
    for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const float xh = (x[c] - mu) * rs;
      const float gh = dy[c] * gamma[c];
      if constexpr (kCached) {
        cache[c] = xh;
        cache[cols + c] = gh;
      }
      s1 += gh;
      s2 += gh * xh;
    }
    const float m1 = block_sum(s1, scratch) / static_cast<float>(cols);
    const float m2 = block_sum(s2, scratch) / static_cast<float>(cols);
#pragma unroll 4
    for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const float xh = kCached ? cache[c] : (x[c] - mu) * rs;
      const float gh = kCached ? cache[cols + c] : dy[c] * gamma[c];
      dx[c] = rs * (gh - m1 - xh * m2);
    }
  }
}

// d_gamma, d_beta: (cols) = sum over the `parts` partial rows, in partial order, in double.
// Block (32, 8): 32 columns, 8 threads striding over the partials, then a fixed 8-way sum.
__global__ void __launch_bounds__(256) finalize_kernel(float* d_gamma, float* d_beta, const float* part_g,
                                                       const float* part_b, std::int64_t parts, std::int64_t cols) {
  __shared__ double sg[8][33], sb[8][33];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const std::int64_t c = static_cast<std::int64_t>(blockIdx.x) * 32 + tx;
  double g = 0, b = 0;
  if (c < cols) {
    for (std::int64_t p = ty; p < parts; p += 8) {
      g += part_g[p * cols + c];
      b += part_b[p * cols + c];
    }
  }
  sg[ty][tx] = g;
  sb[ty][tx] = b;
  __syncthreads();
  if (ty == 0 && c < cols) {
    for (int k = 1; k < 8; ++k) {
      g += sg[k][tx];
      b += sb[k][tx];
    }
    d_gamma[c] = static_cast<float>(g);
    d_beta[c] = static_cast<float>(b);
  }
}

}  // namespace

void layernorm_forward(float* out, float* mean, float* rstd, const float* in, const float* gamma, const float* beta,
                       std::int64_t nrows, std::int64_t cols, float eps, cudaStream_t stream) {
  FH_EXPECT(nrows >= 0, "layernorm_forward: rows must be >= 0");
  FH_EXPECT(cols >= 1, "layernorm_forward: cols must be >= 1");
  FH_EXPECT(eps >= 0.f && std::isfinite(eps), "layernorm_forward: eps must be finite and >= 0");
  if (nrows == 0) return;
  FH_EXPECT(out != nullptr && in != nullptr, "layernorm_forward: out and in must not be null");
  FH_EXPECT(gamma != nullptr && beta != nullptr, "layernorm_forward: gamma and beta must not be null");
  if (cols <= rows::kWarpMaxCols) {
    rows::dispatch_frag(static_cast<int>(cols), rows::vec4_ok(cols, {out, in, gamma, beta}), [&](auto vec, auto iters) {
      forward_warp_kernel<decltype(vec)::value, decltype(iters)::value>
          <<<rows::warp_grid(nrows), rows::kWarpsPerBlock * 32, 0, stream>>>(out, mean, rstd, in, gamma, beta, nrows,
                                                                             static_cast<int>(cols), eps);
    });
  } else {
    const std::size_t bytes = static_cast<std::size_t>(cols) * sizeof(float);
    if (bytes <= rows::smem_optin_bytes()) {
      auto kernel = forward_block_kernel<true>;
      rows::allow_smem(kernel, bytes);
      kernel<<<rows::block_grid(nrows), rows::block_threads(cols), bytes, stream>>>(out, mean, rstd, in, gamma, beta,
                                                                                    nrows, cols, eps);
    } else {
      forward_block_kernel<false><<<rows::block_grid(nrows), rows::block_threads(cols), 0, stream>>>(
          out, mean, rstd, in, gamma, beta, nrows, cols, eps);
    }
  }
  FH_CHECK_LAUNCH();
}

std::size_t layernorm_backward_workspace_bytes(std::int64_t nrows, std::int64_t cols) {
  if (nrows <= 0 || cols <= 0) return 0;
  return static_cast<std::size_t>(backward_partials(nrows, cols)) * static_cast<std::size_t>(cols) * 2 * sizeof(float);
}

void layernorm_backward(float* d_in, float* d_gamma, float* d_beta, const float* d_out, const float* in,
                        const float* mean, const float* rstd, const float* gamma, std::int64_t nrows, std::int64_t cols,
                        void* workspace, cudaStream_t stream) {
  FH_EXPECT(nrows >= 0, "layernorm_backward: rows must be >= 0");
  FH_EXPECT(cols >= 1, "layernorm_backward: cols must be >= 1");
  FH_EXPECT(d_gamma != nullptr && d_beta != nullptr, "layernorm_backward: d_gamma and d_beta must not be null");
  if (nrows == 0) {  // empty sums: the overwritten parameter gradients are zero
    FH_CHECK(cudaMemsetAsync(d_gamma, 0, static_cast<std::size_t>(cols) * sizeof(float), stream));
    FH_CHECK(cudaMemsetAsync(d_beta, 0, static_cast<std::size_t>(cols) * sizeof(float), stream));
    return;
  }
  FH_EXPECT(d_in != nullptr && d_out != nullptr && in != nullptr,
            "layernorm_backward: d_in, d_out and in must not be null");
  FH_EXPECT(mean != nullptr && rstd != nullptr && gamma != nullptr,
            "layernorm_backward: mean, rstd and gamma must not be null");
  FH_EXPECT(workspace != nullptr && (reinterpret_cast<std::uintptr_t>(workspace) & 3u) == 0,
            "layernorm_backward: workspace must be non-null and 4-byte aligned "
            "(layernorm_backward_workspace_bytes(rows, cols) bytes)");
  const std::int64_t parts = backward_partials(nrows, cols);
  float* part_g = static_cast<float*>(workspace);
  float* part_b = part_g + parts * cols;
  if (cols <= rows::kWarpMaxCols) {
    rows::dispatch_frag(
        static_cast<int>(cols), rows::vec4_ok(cols, {d_in, d_out, in, gamma, workspace}), [&](auto vec, auto iters) {
          backward_warp_kernel<decltype(vec)::value, decltype(iters)::value>
              <<<static_cast<int>(parts / rows::kWarpsPerBlock), rows::kWarpsPerBlock * 32, 0, stream>>>(
                  d_in, part_g, part_b, d_out, in, mean, rstd, gamma, nrows, static_cast<int>(cols));
        });
    FH_CHECK_LAUNCH();
  } else {
    const std::int64_t chunk_rows = (nrows + parts - 1) / parts;
    column_partials_kernel<<<dim3(ceil_div(cols, 32), static_cast<unsigned>(parts)), dim3(32, 8), 0, stream>>>(
        part_g, part_b, d_out, in, mean, rstd, nrows, cols, chunk_rows);
    FH_CHECK_LAUNCH();
    const std::size_t bytes = 2 * static_cast<std::size_t>(cols) * sizeof(float);
    if (bytes <= rows::smem_optin_bytes()) {
      auto kernel = backward_block_kernel<true>;
      rows::allow_smem(kernel, bytes);
      kernel<<<rows::block_grid(nrows), rows::block_threads(cols), bytes, stream>>>(d_in, d_out, in, mean, rstd, gamma,
                                                                                    nrows, cols);
    } else {
      backward_block_kernel<false><<<rows::block_grid(nrows), rows::block_threads(cols), 0, stream>>>(
          d_in, d_out, in, mean, rstd, gamma, nrows, cols);
    }
    FH_CHECK_LAUNCH();
  }
  finalize_kernel<<<ceil_div(cols, 32), dim3(32, 8), 0, stream>>>(d_gamma, d_beta, part_g, part_b, parts, cols);
  FH_CHECK_LAUNCH();
}

}  // namespace foxhunt::gpu
