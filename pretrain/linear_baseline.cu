// The least-squares baseline's kernels: tiled Gram accumulation, a one-block Cholesky
// factorization with both triangular solves, and the per-target evaluation sums.
#include "pretrain/linear_baseline.hpp"

#include "gpu/check.hpp"
#include "gpu/launch.cuh"

namespace foxhunt::pretrain {
namespace {

constexpr int kTile = 16;
constexpr int kSolveThreads = 1024;
constexpr int kEvalThreads = 256;

// Element (i, j) of [m, 1...]: m's columns 0 .. cols-1 (f32, row-major), then ones up to `width`.
__device__ __forceinline__ double augmented(const float* m, int cols, int width, std::int64_t i, int j) {
  if (j < cols) return static_cast<double>(m[i * cols + j]);
  return j < width ? 1.0 : 0.0;
}

// c (P x Q, row-major) += aug(a)^T aug(b) over rows 0 .. n-1, one 16 x 16 tile of c per block: rows of
// both operands are staged 16 at a time in shared memory and summed in row order (deterministic).
__global__ void __launch_bounds__(kTile * kTile)
    gram_kernel(double* c, const float* a, int a_cols, int P, const float* b, int b_cols, int Q, std::int64_t n) {
  __shared__ double as[kTile][kTile + 1];
  __shared__ double bs[kTile][kTile + 1];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int p0 = blockIdx.y * kTile, q0 = blockIdx.x * kTile;
  double acc = 0.0;
  for (std::int64_t i0 = 0; i0 < n; i0 += kTile) {
    const std::int64_t i = i0 + ty;
    as[ty][tx] = i < n ? augmented(a, a_cols, P, i, p0 + tx) : 0.0;
    bs[ty][tx] = i < n ? augmented(b, b_cols, Q, i, q0 + tx) : 0.0;
    __syncthreads();
#pragma unroll
    for (int r = 0; r < kTile; ++r) acc += as[r][ty] * bs[r][tx];
    __syncthreads();
  }
  const int p = p0 + ty, q = q0 + tx;
  if (p < P && q < Q) c[static_cast<std::int64_t>(p) * Q + q] += acc;
}

// L = chol(G + ridge I) (lower, right-looking: column j scaled, then the trailing triangle updated
// by warps over rows and lanes over columns), then w = L^-T L^-1 b for the K columns of b.
__global__ void __launch_bounds__(kSolveThreads)
    cholesky_solve_kernel(double* L, double* w, const double* G, const double* xty, int D, int K) {
  __shared__ double ridge;
  const int tid = threadIdx.x, nt = blockDim.x;
  const int lane = tid & 31, warp = tid >> 5, warps = nt >> 5;
  if (tid == 0) {
    double trace = 0.0;
    for (int i = 0; i < D; ++i) trace += G[static_cast<std::int64_t>(i) * D + i];
    ridge = 1e-10 * trace / D;
  }
  __syncthreads();
  for (std::int64_t e = tid; e < static_cast<std::int64_t>(D) * D; e += nt) {
    const std::int64_t i = e / D, j = e - i * D;
    L[e] = j <= i ? G[e] + (i == j ? ridge : 0.0) : 0.0;
  }
  for (std::int64_t e = tid; e < static_cast<std::int64_t>(D) * K; e += nt) w[e] = xty[e];
  __syncthreads();

  for (int j = 0; j < D; ++j) {
    double* col = L + j;  // column j: element (i, j) at col[i * D]
    if (tid == 0) col[static_cast<std::int64_t>(j) * D] = sqrt(col[static_cast<std::int64_t>(j) * D]);
    __syncthreads();
    const double djj = col[static_cast<std::int64_t>(j) * D];
    for (int i = j + 1 + tid; i < D; i += nt) col[static_cast<std::int64_t>(i) * D] /= djj;
    __syncthreads();
    for (int i = j + 1 + warp; i < D; i += warps) {
      double* row = L + static_cast<std::int64_t>(i) * D;
      const double lij = row[j];
      for (int k = j + 1 + lane; k <= i; k += 32) row[k] -= lij * L[static_cast<std::int64_t>(k) * D + j];
    }
    __syncthreads();
  }

  // Forward: L z = b, column-oriented (z_i final, then removed from the rows below).
  for (int i = 0; i < D; ++i) {
    const double lii = L[static_cast<std::int64_t>(i) * D + i];
    for (int c = tid; c < K; c += nt) w[static_cast<std::int64_t>(i) * K + c] /= lii;
    __syncthreads();
    const std::int64_t rest = static_cast<std::int64_t>(D - i - 1) * K;
    for (std::int64_t e = tid; e < rest; e += nt) {
      const std::int64_t m = i + 1 + e / K, c = e % K;
      w[m * K + c] -= L[m * D + i] * w[static_cast<std::int64_t>(i) * K + c];
    }
    __syncthreads();
  }
  // Backward: L^T w = z (w_i final, then removed from the rows above).
  for (int i = D - 1; i >= 0; --i) {
    const double lii = L[static_cast<std::int64_t>(i) * D + i];
    for (int c = tid; c < K; c += nt) w[static_cast<std::int64_t>(i) * K + c] /= lii;
    __syncthreads();
    const std::int64_t rest = static_cast<std::int64_t>(i) * K;
    for (std::int64_t e = tid; e < rest; e += nt) {
      const std::int64_t m = e / K, c = e % K;
      w[m * K + c] -= L[static_cast<std::int64_t>(i) * D + m] * w[static_cast<std::int64_t>(i) * K + c];
    }
    __syncthreads();
  }
}

// One block per target c: SSE, sum y, sum y^2 and n over the batch, each thread's samples in order,
// then a fixed tree; added to the target's accumulators (one writer per target).
__global__ void __launch_bounds__(kEvalThreads)
    eval_kernel(double* acc, const double* w, const float* x, const float* y, int d, int K, std::int64_t n) {
  __shared__ double s_sse[kEvalThreads], s_sy[kEvalThreads], s_syy[kEvalThreads];
  const int c = blockIdx.x, tid = threadIdx.x;
  double sse = 0.0, sy = 0.0, syy = 0.0;
  for (std::int64_t i = tid; i < n; i += kEvalThreads) {
    const float* xi = x + i * d;
    double yhat = w[static_cast<std::int64_t>(d) * K + c];
    for (int p = 0; p < d; ++p) yhat += static_cast<double>(xi[p]) * w[static_cast<std::int64_t>(p) * K + c];
    const double yi = y[i * K + c];
    const double r = yi - yhat;
    sse += r * r;
    sy += yi;
    syy += yi * yi;
  }
  s_sse[tid] = sse;
  s_sy[tid] = sy;
  s_syy[tid] = syy;
  __syncthreads();
  for (int s = kEvalThreads / 2; s > 0; s >>= 1) {
    if (tid < s) {
      s_sse[tid] += s_sse[tid + s];
      s_sy[tid] += s_sy[tid + s];
      s_syy[tid] += s_syy[tid + s];
    }
    __syncthreads();
  }
  if (tid == 0) {
    acc[c * 4 + 0] += s_sse[0];
    acc[c * 4 + 1] += s_sy[0];
    acc[c * 4 + 2] += s_syy[0];
    acc[c * 4 + 3] += static_cast<double>(n);
  }
}

__global__ void r2_kernel(double* r2, const double* acc, int K) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= K) return;
  const double sse = acc[c * 4], sy = acc[c * 4 + 1], syy = acc[c * 4 + 2], n = acc[c * 4 + 3];
  const double sst = syy - sy * sy / n;
  r2[c] = 1.0 - sse / sst;
}

void launch_gram(double* c, const float* a, int a_cols, int P, const float* b, int b_cols, int Q, std::int64_t n,
                 cudaStream_t stream) {
  const dim3 grid(gpu::ceil_div(Q, kTile), gpu::ceil_div(P, kTile));
  gram_kernel<<<grid, dim3(kTile, kTile), 0, stream>>>(c, a, a_cols, P, b, b_cols, Q, n);
  FH_CHECK_LAUNCH();
}

}  // namespace

LinearBaseline::LinearBaseline(std::int64_t features, std::int64_t targets) : d_(features), k_(targets) {
  FH_EXPECT(features >= 1 && features <= 4096, "LinearBaseline: features must be in [1, 4096]");
  FH_EXPECT(targets >= 1 && targets <= 65535, "LinearBaseline: targets must be in [1, 65535]");
  const std::size_t D = static_cast<std::size_t>(features + 1), K = static_cast<std::size_t>(targets);
  gram_ = gpu::DeviceBuffer<double>(D * D);
  xty_ = gpu::DeviceBuffer<double>(D * K);
  chol_ = gpu::DeviceBuffer<double>(D * D);
  weights_ = gpu::DeviceBuffer<double>(D * K);
  eval_ = gpu::DeviceBuffer<double>(4 * K);
  r2_ = gpu::DeviceBuffer<double>(K);
}

void LinearBaseline::reset_fit(cudaStream_t stream) {
  FH_CHECK(cudaMemsetAsync(gram_.data(), 0, gram_.bytes(), stream));
  FH_CHECK(cudaMemsetAsync(xty_.data(), 0, xty_.bytes(), stream));
}

void LinearBaseline::accumulate(const float* x, const float* y, std::int64_t batch, cudaStream_t stream) {
  FH_EXPECT(x != nullptr && y != nullptr, "LinearBaseline::accumulate: x and y must be device buffers");
  FH_EXPECT(batch >= 1, "LinearBaseline::accumulate: batch must be >= 1");
  const int d = static_cast<int>(d_), D = d + 1, K = static_cast<int>(k_);
  launch_gram(gram_.data(), x, d, D, x, d, D, batch, stream);
  launch_gram(xty_.data(), x, d, D, y, K, K, batch, stream);
}

void LinearBaseline::solve(cudaStream_t stream) {
  cholesky_solve_kernel<<<1, kSolveThreads, 0, stream>>>(chol_.data(), weights_.data(), gram_.data(), xty_.data(),
                                                         static_cast<int>(d_ + 1), static_cast<int>(k_));
  FH_CHECK_LAUNCH();
}

void LinearBaseline::reset_eval(cudaStream_t stream) { FH_CHECK(cudaMemsetAsync(eval_.data(), 0, eval_.bytes(), stream)); }

void LinearBaseline::evaluate(const float* x, const float* y, std::int64_t batch, cudaStream_t stream) {
  FH_EXPECT(x != nullptr && y != nullptr, "LinearBaseline::evaluate: x and y must be device buffers");
  FH_EXPECT(batch >= 1, "LinearBaseline::evaluate: batch must be >= 1");
  eval_kernel<<<static_cast<unsigned>(k_), kEvalThreads, 0, stream>>>(eval_.data(), weights_.data(), x, y,
                                                                     static_cast<int>(d_), static_cast<int>(k_), batch);
  FH_CHECK_LAUNCH();
}

void LinearBaseline::finish_eval(cudaStream_t stream) {
  r2_kernel<<<gpu::ceil_div(k_, 128), 128, 0, stream>>>(r2_.data(), eval_.data(), static_cast<int>(k_));
  FH_CHECK_LAUNCH();
}

}  // namespace foxhunt::pretrain
