#include "models/kan/kan_layer.hpp"

#include <cub/device/device_segmented_sort.cuh>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

#include "gpu/activation.cuh"
#include "gpu/check.hpp"
#include "gpu/device.hpp"
#include "gpu/launch.cuh"
#include "models/kan/bspline.cuh"

namespace foxhunt::models {
namespace {

using gpu::Activation;

constexpr int kThreads = 256;
// Forward tile: 16 * R rows x 64 outputs, 4 inputs per step; 16 x 16 threads of R x 4 results each.
// R = 4 (64 rows) while that fills the device; a batch too small for one block per multiprocessor
// (acting: 4096 rows, one 64-wide layer, 64 blocks on 132 SMs) takes R = 2, twice the blocks. Each
// output's FMAs run in the same order either way: the same bits.
constexpr int kFwdOuts = 64, kFwdIns = 4, kFwdRowsMax = 64;
// Input-gradient tile: 64 rows x 16 inputs, 16 outputs per step; 16 x 16 threads of 4 rows each.
constexpr int kDxRows = 64, kDxIns = 16, kDxOuts = 16;
// Parameter-gradient tile: 16 outputs x 16 inputs (one (o, i) per thread), rows in chunks of 16;
// each block sums kSplitRows rows into its partial sums.
constexpr int kPgOuts = 16, kPgIns = 16, kPgChunk = 16;
constexpr std::int64_t kSplitRows = 256;
constexpr int kMaxNb = static_cast<int>(kKanMaxBases);

std::int64_t splits_of(std::int64_t batch) { return (batch + kSplitRows - 1) / kSplitRows; }

__device__ __forceinline__ float silu(float x) { return gpu::activate<Activation::silu>(x, 0.f); }
__device__ __forceinline__ float silu_grad(float x) { return gpu::activate_grad<Activation::silu>(x, 0.f); }

// ---- bases ----------------------------------------------------------------------------------
template <int K>
__global__ void bases_kernel(std::int32_t* __restrict__ first, float* __restrict__ values,
                             float* __restrict__ slopes, const float* __restrict__ x, const float* __restrict__ grid,
                             std::int64_t rows, int in, int n_knots) {
  const std::int64_t n = rows * in;
  for (std::int64_t e = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const int i = static_cast<int>(e % in);
    float v[K + 1], dv[K + 1];
    std::int32_t f;
    kan::bspline_local<K, float>(x[e], grid + static_cast<std::int64_t>(i) * n_knots, n_knots, &f, v, dv);
    first[e] = f;
#pragma unroll
    for (int q = 0; q <= K; ++q) values[e * (K + 1) + q] = v[q];
    if (slopes != nullptr) {
#pragma unroll
      for (int q = 0; q <= K; ++q) slopes[e * (K + 1) + q] = dv[q];
    }
  }
}

// ---- forward: y = silu(x) W^T + the spline branch, tiled -----------------------------------------
template <int K1, int R>
__global__ void __launch_bounds__(kThreads) forward_kernel(float* __restrict__ y, const float* __restrict__ x,
                                                           const std::int32_t* __restrict__ first,
                                                           const float* __restrict__ values,
                                                           const float* __restrict__ w, const float* __restrict__ c,
                                                           int rows, int in, int out, int nb) {
  constexpr int kFwdRows = 16 * R;
  __shared__ float cs[kFwdIns * kMaxNb * (kFwdOuts + 1)];  // [ii][j][oo], rows padded against conflicts
  __shared__ float ws[kFwdIns][kFwdOuts];
  __shared__ float ss[kFwdIns][kFwdRows];  // silu(x)
  __shared__ float vs[kFwdIns][K1][kFwdRows];
  __shared__ std::int32_t fs[kFwdIns][kFwdRows];
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int b0 = blockIdx.x * kFwdRows, o0 = blockIdx.y * kFwdOuts;
  float acc[R][4] = {};
  for (int i0 = 0; i0 < in; i0 += kFwdIns) {
    // Coefficients c[o0 + oo, i0 + ii, j]: j fastest in memory, so consecutive threads read
    // consecutive addresses.
    for (int e = threadIdx.x; e < kFwdIns * nb * kFwdOuts; e += kThreads) {
      const int j = e % nb, ii = (e / nb) % kFwdIns, oo = e / (nb * kFwdIns);
      const int o = o0 + oo, i = i0 + ii;
      cs[(ii * nb + j) * (kFwdOuts + 1) + oo] =
          (o < out && i < in) ? c[(static_cast<std::int64_t>(o) * in + i) * nb + j] : 0.f;
    }
    for (int e = threadIdx.x; e < kFwdIns * kFwdOuts; e += kThreads) {
      const int ii = e % kFwdIns, oo = e / kFwdIns;
      const int o = o0 + oo, i = i0 + ii;
      ws[ii][oo] = (o < out && i < in) ? w[static_cast<std::int64_t>(o) * in + i] : 0.f;
    }
    for (int e = threadIdx.x; e < kFwdIns * kFwdRows; e += kThreads) {
      const int ii = e % kFwdIns, rr = e / kFwdIns;
      const int b = b0 + rr, i = i0 + ii;
      const bool ok = b < rows && i < in;
      const std::int64_t at = static_cast<std::int64_t>(b) * in + i;
      ss[ii][rr] = ok ? silu(x[at]) : 0.f;
      fs[ii][rr] = ok ? first[at] : 0;
#pragma unroll
      for (int q = 0; q < K1; ++q) vs[ii][q][rr] = ok ? values[at * K1 + q] : 0.f;
    }
    __syncthreads();
#pragma unroll
    for (int ii = 0; ii < kFwdIns; ++ii) {
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const int rr = ty + 16 * r;
        const float s = ss[ii][rr];
        const float* crow = cs + (ii * nb + fs[ii][rr]) * (kFwdOuts + 1);
        float v[K1];
#pragma unroll
        for (int q = 0; q < K1; ++q) v[q] = vs[ii][q][rr];
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          const int oo = tx + 16 * u;
          float a = s * ws[ii][oo];
#pragma unroll
          for (int q = 0; q < K1; ++q) a = fmaf(v[q], crow[q * (kFwdOuts + 1) + oo], a);
          acc[r][u] += a;
        }
      }
    }
    __syncthreads();
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int b = b0 + ty + 16 * r;
    if (b >= rows) continue;
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const int o = o0 + tx + 16 * u;
      if (o < out) y[static_cast<std::int64_t>(b) * out + o] = acc[r][u];
    }
  }
}

// ---- d_x[b, i] = silu'(x) sum_o dy W[o, i] + sum_t slope_t sum_o dy c[o, i, first + t] ------------
template <int K1>
__global__ void __launch_bounds__(kThreads) input_grad_kernel(float* __restrict__ dx, const float* __restrict__ dy,
                                                              const float* __restrict__ x,
                                                              const std::int32_t* __restrict__ first,
                                                              const float* __restrict__ slopes,
                                                              const float* __restrict__ w, const float* __restrict__ c,
                                                              int rows, int in, int out, int nb) {
  constexpr int kStride = kDxOuts * kDxIns + 1;  // per basis j: [oo][ii], padded against conflicts
  __shared__ float cs[kMaxNb * kStride];
  __shared__ float ws[kDxOuts][kDxIns];
  __shared__ float dys[kDxOuts][kDxRows];
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int i0 = blockIdx.y * kDxIns, b0 = blockIdx.x * kDxRows;
  const int i = i0 + tx;
  int f[4];
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const int b = b0 + ty + 16 * r;
    f[r] = (b < rows && i < in) ? first[static_cast<std::int64_t>(b) * in + i] : 0;
  }
  float acc[4][K1] = {};
  float accb[4] = {};
  for (int oc = 0; oc < out; oc += kDxOuts) {
    for (int e = threadIdx.x; e < kDxOuts * kDxIns * nb; e += kThreads) {
      const int j = e % nb, ii = (e / nb) % kDxIns, oo = e / (nb * kDxIns);
      const int o = oc + oo, ic = i0 + ii;
      cs[j * kStride + oo * kDxIns + ii] =
          (o < out && ic < in) ? c[(static_cast<std::int64_t>(o) * in + ic) * nb + j] : 0.f;
    }
    for (int e = threadIdx.x; e < kDxOuts * kDxIns; e += kThreads) {
      const int ii = e % kDxIns, oo = e / kDxIns;
      const int o = oc + oo, ic = i0 + ii;
      ws[oo][ii] = (o < out && ic < in) ? w[static_cast<std::int64_t>(o) * in + ic] : 0.f;
    }
    for (int e = threadIdx.x; e < kDxOuts * kDxRows; e += kThreads) {
      const int oo = e % kDxOuts, rr = e / kDxOuts;
      const int o = oc + oo, b = b0 + rr;
      dys[oo][rr] = (o < out && b < rows) ? dy[static_cast<std::int64_t>(b) * out + o] : 0.f;
    }
    __syncthreads();
    for (int oo = 0; oo < kDxOuts; ++oo) {
      const float wv = ws[oo][tx];
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const float d = dys[oo][ty + 16 * r];
        accb[r] = fmaf(d, wv, accb[r]);
        const float* col = cs + f[r] * kStride + oo * kDxIns + tx;
#pragma unroll
        for (int q = 0; q < K1; ++q) acc[r][q] = fmaf(d, col[q * kStride], acc[r][q]);
      }
    }
    __syncthreads();
  }
  if (i >= in) return;
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const int b = b0 + ty + 16 * r;
    if (b >= rows) continue;
    const std::int64_t at = static_cast<std::int64_t>(b) * in + i;
    float g = silu_grad(x[at]) * accb[r];
#pragma unroll
    for (int q = 0; q < K1; ++q) g = fmaf(slopes[at * K1 + q], acc[r][q], g);
    dx[at] = g;
  }
}

// ---- parameter gradients: partial sums over one split of kSplitRows rows -------------------------
// partial[split][o][i][j]: j < nb: sum_b dy[b, o] B_j(x[b, i]); j = nb: sum_b dy[b, o] silu(x[b, i]).
template <int K1>
__global__ void __launch_bounds__(kThreads) param_grad_partial_kernel(float* __restrict__ partial,
                                                                      const float* __restrict__ dy,
                                                                      const float* __restrict__ x,
                                                                      const std::int32_t* __restrict__ first,
                                                                      const float* __restrict__ values, int rows,
                                                                      int in, int out, int nb) {
  __shared__ float acc[kMaxNb * kThreads];  // [j][thread]: each thread owns its column
  __shared__ float dys[kPgChunk][kPgOuts];
  __shared__ float ss[kPgChunk][kPgIns];
  __shared__ float vs[kPgChunk][K1][kPgIns];
  __shared__ std::int32_t fs[kPgChunk][kPgIns];
  const int tx = threadIdx.x % kPgIns, ty = threadIdx.x / kPgIns;
  const int tiles_i = (in + kPgIns - 1) / kPgIns;
  const int i0 = (blockIdx.x % tiles_i) * kPgIns, o0 = (blockIdx.x / tiles_i) * kPgOuts;
  const int split = blockIdx.y;
  const int r0 = static_cast<int>(split * kSplitRows);
  const int r1 = min(rows, static_cast<int>(r0 + kSplitRows));
  for (int j = 0; j < nb; ++j) acc[j * kThreads + threadIdx.x] = 0.f;
  float accb = 0.f;
  for (int c0 = r0; c0 < r1; c0 += kPgChunk) {
    __syncthreads();  // the previous chunk's reads are done
    for (int e = threadIdx.x; e < kPgChunk * kPgOuts; e += kThreads) {
      const int oo = e % kPgOuts, rr = e / kPgOuts;
      const int o = o0 + oo, b = c0 + rr;
      dys[rr][oo] = (o < out && b < r1) ? dy[static_cast<std::int64_t>(b) * out + o] : 0.f;
    }
    for (int e = threadIdx.x; e < kPgChunk * kPgIns; e += kThreads) {
      const int ii = e % kPgIns, rr = e / kPgIns;
      const int i = i0 + ii, b = c0 + rr;
      const bool ok = i < in && b < r1;
      const std::int64_t at = static_cast<std::int64_t>(b) * in + i;
      ss[rr][ii] = ok ? silu(x[at]) : 0.f;
      fs[rr][ii] = ok ? first[at] : 0;
#pragma unroll
      for (int q = 0; q < K1; ++q) vs[rr][q][ii] = ok ? values[at * K1 + q] : 0.f;
    }
    __syncthreads();
    const int n = min(kPgChunk, r1 - c0);
    for (int rr = 0; rr < n; ++rr) {
      const float d = dys[rr][ty];
      accb = fmaf(d, ss[rr][tx], accb);
      float* a = acc + fs[rr][tx] * kThreads + threadIdx.x;
#pragma unroll
      for (int q = 0; q < K1; ++q) a[q * kThreads] = fmaf(d, vs[rr][q][tx], a[q * kThreads]);
    }
  }
  const int o = o0 + ty, i = i0 + tx;
  if (o >= out || i >= in) return;
  float* dst = partial + ((static_cast<std::int64_t>(split) * out + o) * in + i) * (nb + 1);
  for (int j = 0; j < nb; ++j) dst[j] = acc[j * kThreads + threadIdx.x];
  dst[nb] = accb;
}

// Sums the splits in order: dc[o, i, j] and dw[o, i].
__global__ void param_grad_reduce_kernel(float* __restrict__ dw, float* __restrict__ dc,
                                         const float* __restrict__ partial, std::int64_t splits, std::int64_t pairs,
                                         int nb) {
  const std::int64_t n = pairs * (nb + 1);
  for (std::int64_t e = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    float s = 0.f;
    for (std::int64_t p = 0; p < splits; ++p) s += partial[p * n + e];
    const std::int64_t pair = e / (nb + 1);
    const int j = static_cast<int>(e % (nb + 1));
    if (j < nb)
      dc[pair * nb + j] = s;
    else
      dw[pair] = s;
  }
}

// ---- grid update -----------------------------------------------------------------------------
// xt[i, b] = x[b, i]; offsets[i] = i B (i <= in).
__global__ void transpose_kernel(float* __restrict__ xt, std::int32_t* __restrict__ offsets,
                                 const float* __restrict__ x, int rows, int in) {
  const std::int64_t n = static_cast<std::int64_t>(rows) * in;
  const std::int64_t total = n > in ? n : in + 1;
  for (std::int64_t e = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    if (e < n) xt[(e % in) * rows + e / in] = x[e];
    if (e <= in) offsets[e] = static_cast<std::int32_t>(e * rows);
  }
}

// Input i's knots from its sorted batch s[0 .. B-1]: adaptive a_q = s[floor(q (B-1) / G)], uniform
// u_q = s_0 - margin + q h with h = (s_{B-1} - s_0 + 2 margin) / G, t_{k+q} = eps u_q + (1 - eps) a_q
// (q = 0..G), and k knots each side h apart.
__global__ void refit_grid_kernel(float* __restrict__ grid, const float* __restrict__ sorted, int rows, int in,
                                  int G, int K, float eps, float margin) {
  const int n_knots = G + 2 * K + 1;
  const int e = blockIdx.x * blockDim.x + threadIdx.x;
  if (e >= in * n_knots) return;
  const int i = e / n_knots, kn = e % n_knots;
  const float* s = sorted + static_cast<std::int64_t>(i) * rows;
  const float lo = s[0], hi = s[rows - 1];
  const float h = (hi - lo + 2.f * margin) / static_cast<float>(G);
  auto knot = [&](int q) {
    const std::int64_t idx = static_cast<std::int64_t>(q) * (rows - 1) / G;
    const float u = lo - margin + static_cast<float>(q) * h;
    return eps * u + (1.f - eps) * s[idx];
  };
  float v;
  if (kn < K)
    v = knot(0) - static_cast<float>(K - kn) * h;
  else if (kn > K + G)
    v = knot(G) + static_cast<float>(kn - K - G) * h;
  else
    v = knot(kn - K);
  grid[e] = v;
}

// One block per input i: the normal equations of the least-squares fit of the new bases to the old
// spline values on the batch, M c = r with M[j1, j2] = sum_b B'_j1 B'_j2 and
// r[o, j] = sum_b B'_j(x_b) sum_t c_old[o, i, f_b + t] B_t(x_b) (float64), a ridge of 1e-10 max diag(M)
// (only bases with no data there feel it), a Cholesky factorization, and the solves for every o.
template <int K1>
__global__ void __launch_bounds__(kThreads) refit_coefficients_kernel(
    float* __restrict__ c, double* __restrict__ rhs, const std::int32_t* __restrict__ first_old,
    const float* __restrict__ values_old, const std::int32_t* __restrict__ first_new,
    const float* __restrict__ values_new, int rows, int in, int out, int nb) {
  __shared__ double m[kMaxNb * kMaxNb];
  __shared__ double ridge;
  const int i = blockIdx.x;
  double* r = rhs + static_cast<std::int64_t>(i) * out * nb;  // [o][j]
  const int n_m = nb * nb, n_all = n_m + out * nb;
  for (int e = threadIdx.x; e < n_all; e += kThreads) {
    double s = 0.0;
    if (e < n_m) {
      const int j1 = e / nb, j2 = e % nb;
      for (int b = 0; b < rows; ++b) {
        const std::int64_t at = static_cast<std::int64_t>(b) * in + i;
        const int f = first_new[at];
        const int q1 = j1 - f, q2 = j2 - f;
        if (q1 < 0 || q1 >= K1 || q2 < 0 || q2 >= K1) continue;
        s += static_cast<double>(values_new[at * K1 + q1]) * values_new[at * K1 + q2];
      }
      m[e] = s;
    } else {
      const int o = (e - n_m) / nb, j = (e - n_m) % nb;
      const float* co = c + (static_cast<std::int64_t>(o) * in + i) * nb;
      for (int b = 0; b < rows; ++b) {
        const std::int64_t at = static_cast<std::int64_t>(b) * in + i;
        const int q = j - first_new[at];
        if (q < 0 || q >= K1) continue;
        const int fo = first_old[at];
        double y = 0.0;
#pragma unroll
        for (int t = 0; t < K1; ++t) y += static_cast<double>(co[fo + t]) * values_old[at * K1 + t];
        s += static_cast<double>(values_new[at * K1 + q]) * y;
      }
      r[o * nb + j] = s;
    }
  }
  __syncthreads();  // every read of the old coefficients of input i is done
  if (threadIdx.x == 0) {
    double dmax = 0.0;
    for (int j = 0; j < nb; ++j) dmax = fmax(dmax, m[j * nb + j]);
    ridge = 1e-10 * dmax + 1e-300;
    // In-place Cholesky: the lower triangle of m becomes L (M + ridge I = L L^T).
    for (int j = 0; j < nb; ++j) {
      double d = m[j * nb + j] + ridge;
      for (int q = 0; q < j; ++q) d -= m[j * nb + q] * m[j * nb + q];
      const double l = sqrt(fmax(d, 1e-300));
      m[j * nb + j] = l;
      for (int p = j + 1; p < nb; ++p) {
        double v = m[p * nb + j];
        for (int q = 0; q < j; ++q) v -= m[p * nb + q] * m[j * nb + q];
        m[p * nb + j] = v / l;
      }
    }
  }
  __syncthreads();
  for (int o = threadIdx.x; o < out; o += kThreads) {
    double* z = r + o * nb;
    for (int j = 0; j < nb; ++j) {  // L z = r
      double v = z[j];
      for (int q = 0; q < j; ++q) v -= m[j * nb + q] * z[q];
      z[j] = v / m[j * nb + j];
    }
    for (int j = nb - 1; j >= 0; --j) {  // L^T c = z
      double v = z[j];
      for (int q = j + 1; q < nb; ++q) v -= m[q * nb + j] * z[q];
      z[j] = v / m[j * nb + j];
    }
    float* co = c + (static_cast<std::int64_t>(o) * in + i) * nb;
    for (int j = 0; j < nb; ++j) co[j] = static_cast<float>(z[j]);
  }
}

template <template <int> class Fn, class... Args>
void dispatch_order(std::int64_t order, Args&&... args) {
  switch (order) {
    case 1: Fn<1>::run(args...); break;
    case 2: Fn<2>::run(args...); break;
    case 3: Fn<3>::run(args...); break;
    case 4: Fn<4>::run(args...); break;
    case 5: Fn<5>::run(args...); break;
    default: throw std::invalid_argument("KanLayer: order " + std::to_string(order) + " outside [1, 5]");
  }
}

template <int K>
struct LaunchBases {
  static void run(std::int32_t* first, float* values, float* slopes, const float* x, const float* grid,
                  std::int64_t rows, std::int64_t in, std::int64_t n_knots, cudaStream_t s) {
    const std::int64_t n = rows * in;
    if (n == 0) return;
    bases_kernel<K><<<gpu::grid_stride_blocks(n), kThreads, 0, s>>>(first, values, slopes, x, grid, rows,
                                                                    static_cast<int>(in), static_cast<int>(n_knots));
    FH_CHECK(cudaGetLastError());
  }
};

template <int K>
struct LaunchForward {
  static void run(float* y, const float* x, const std::int32_t* first, const float* values, const float* w,
                  const float* c, std::int64_t rows, std::int64_t in, std::int64_t out, std::int64_t nb,
                  cudaStream_t s) {
    const std::int64_t out_tiles = gpu::ceil_div(out, kFwdOuts);
    if (gpu::ceil_div(rows, kFwdRowsMax) * out_tiles >= gpu::sm_count()) {
      const dim3 grid(gpu::ceil_div(rows, kFwdRowsMax), out_tiles);  // rows on x: up to 2^31 - 1 blocks
      forward_kernel<K + 1, 4><<<grid, kThreads, 0, s>>>(y, x, first, values, w, c, static_cast<int>(rows),
                                                         static_cast<int>(in), static_cast<int>(out),
                                                         static_cast<int>(nb));
    } else {
      const dim3 grid(gpu::ceil_div(rows, kFwdRowsMax / 2), out_tiles);
      forward_kernel<K + 1, 2><<<grid, kThreads, 0, s>>>(y, x, first, values, w, c, static_cast<int>(rows),
                                                         static_cast<int>(in), static_cast<int>(out),
                                                         static_cast<int>(nb));
    }
    FH_CHECK(cudaGetLastError());
  }
};

template <int K>
struct LaunchBackward {
  static void run(float* dx, float* dw, float* dc, float* partial, const float* dy, const float* x,
                  const std::int32_t* first, const float* values, const float* slopes, const float* w, const float* c,
                  std::int64_t rows, std::int64_t in, std::int64_t out, std::int64_t nb, cudaStream_t s) {
    const int r = static_cast<int>(rows), ni = static_cast<int>(in), no = static_cast<int>(out),
              n = static_cast<int>(nb);
    if (dx != nullptr) {
      const dim3 grid(gpu::ceil_div(rows, kDxRows), gpu::ceil_div(in, kDxIns));
      input_grad_kernel<K + 1><<<grid, kThreads, 0, s>>>(dx, dy, x, first, slopes, w, c, r, ni, no, n);
      FH_CHECK(cudaGetLastError());
    }
    const std::int64_t splits = splits_of(rows);
    FH_EXPECT(splits <= 65535, "KanLayer: batch " + std::to_string(rows) + " above 65535 x 256 rows");
    const dim3 grid(gpu::ceil_div(in, kPgIns) * gpu::ceil_div(out, kPgOuts), static_cast<unsigned>(splits));
    param_grad_partial_kernel<K + 1><<<grid, kThreads, 0, s>>>(partial, dy, x, first, values, r, ni, no, n);
    FH_CHECK(cudaGetLastError());
    const std::int64_t pairs = out * in;
    param_grad_reduce_kernel<<<gpu::grid_stride_blocks(pairs * (nb + 1)), kThreads, 0, s>>>(dw, dc, partial, splits,
                                                                                           pairs, n);
    FH_CHECK(cudaGetLastError());
  }
};

template <int K>
struct LaunchRefit {
  static void run(float* c, double* rhs, const std::int32_t* first_old, const float* values_old,
                  const std::int32_t* first_new, const float* values_new, std::int64_t rows, std::int64_t in,
                  std::int64_t out, std::int64_t nb, cudaStream_t s) {
    refit_coefficients_kernel<K + 1><<<static_cast<unsigned>(in), kThreads, 0, s>>>(
        c, rhs, first_old, values_old, first_new, values_new, static_cast<int>(rows), static_cast<int>(in),
        static_cast<int>(out), static_cast<int>(nb));
    FH_CHECK(cudaGetLastError());
  }
};

}  // namespace

std::string kan_spec_problem(const KanLayerSpec& s) {
  if (s.in < 1 || s.out < 1) return "in and out must be >= 1";
  if (s.order < 1 || s.order > kKanMaxOrder) return "order must be in [1, " + std::to_string(kKanMaxOrder) + "]";
  if (s.grid < 1 || s.grid + s.order > kKanMaxBases)
    return "grid must be >= 1 with grid + order <= " + std::to_string(kKanMaxBases);
  if (!(std::isfinite(s.grid_min) && std::isfinite(s.grid_max) && s.grid_min < s.grid_max))
    return "grid_min < grid_max (finite) required";
  if (!(s.grid_eps > 0.f && s.grid_eps <= 1.f)) return "grid_eps must be in (0, 1]";
  if (!(s.grid_margin >= 0.f && std::isfinite(s.grid_margin))) return "grid_margin must be >= 0";
  if (!(s.spline_init >= 0.f && std::isfinite(s.spline_init))) return "spline_init must be >= 0";
  return {};
}

KanLayer::KanLayer(KanLayerSpec spec) : spec_(std::move(spec)) {
  const std::string why = kan_spec_problem(spec_);
  if (!why.empty()) throw std::invalid_argument("KanLayer '" + spec_.name + "': " + why);
}

void KanLayer::declare(gpu::ParameterArena& arena) const {
  arena.declare(param_name("base_weight"), gpu::Shape{spec_.out, spec_.in});
  arena.declare(param_name("spline_weight"), gpu::Shape{spec_.out, spec_.in, bases()});
  arena.declare_state(param_name("grid"), gpu::Shape{spec_.in, knots()});
}

void KanLayer::init(gpu::ParameterArena& arena, std::mt19937_64& rng, cudaStream_t stream) const {
  const float bound = 1.f / std::sqrt(static_cast<float>(spec_.in));
  std::uniform_real_distribution<float> base(-bound, bound);
  std::vector<float> w(static_cast<std::size_t>(spec_.out * spec_.in));
  for (auto& v : w) v = base(rng);
  std::uniform_real_distribution<float> spline(-spec_.spline_init * bound, spec_.spline_init * bound);
  std::vector<float> c(static_cast<std::size_t>(spec_.out * spec_.in * bases()));
  for (auto& v : c) v = spline(rng);
  // Uniform knots: h = (max - min) / G, t_m = min + (m - k) h.
  std::vector<float> g(static_cast<std::size_t>(spec_.in * knots()));
  const double h = (static_cast<double>(spec_.grid_max) - spec_.grid_min) / static_cast<double>(spec_.grid);
  for (std::int64_t i = 0; i < spec_.in; ++i)
    for (std::int64_t m = 0; m < knots(); ++m)
      g[static_cast<std::size_t>(i * knots() + m)] =
          static_cast<float>(spec_.grid_min + static_cast<double>(m - spec_.order) * h);
  arena.upload_param(param_name("base_weight"), w, stream);
  arena.upload_param(param_name("spline_weight"), c, stream);
  arena.upload_state(param_name("grid"), g, stream);
}

void KanLayer::bind(gpu::ParameterArena& arena) {
  w_ = arena.param(param_name("base_weight")).as<float>();
  dw_ = arena.grad(param_name("base_weight")).as<float>();
  c_ = arena.param(param_name("spline_weight")).as<float>();
  dc_ = arena.grad(param_name("spline_weight")).as<float>();
  grid_ = arena.state(param_name("grid")).as<float>();
  bound_ = true;
}

KanLayer::Buffers KanLayer::carve(WorkspaceCarver& c, std::int64_t max_batch) const {
  const auto n = static_cast<std::size_t>(max_batch * spec_.in);
  const auto k1 = static_cast<std::size_t>(spec_.order + 1);
  Buffers b;
  b.first = c.take<std::int32_t>(n);
  b.values = c.take<float>(n * k1);
  b.slopes = c.take<float>(n * k1);
  b.partial = c.take<float>(static_cast<std::size_t>(splits_of(max_batch) * spec_.out * spec_.in * (bases() + 1)));
  return b;
}

std::size_t KanLayer::workspace_bytes(std::int64_t max_batch, bool) const {
  WorkspaceCarver c;
  carve(c, max_batch);
  return c.bytes();
}

void KanLayer::compute_bases(std::int32_t* first, float* values, float* slopes, const float* in, std::int64_t batch,
                             cudaStream_t stream) const {
  FH_EXPECT(bound_, "KanLayer '" + spec_.name + "': compute_bases before bind()");
  dispatch_order<LaunchBases>(spec_.order, first, values, slopes, in, grid_, batch, spec_.in, knots(), stream);
}

void KanLayer::forward(float* out, const float* in, std::int64_t batch, bool, const Workspace& ws,
                       gpu::BlasLane lane) {
  FH_EXPECT(bound_, "KanLayer '" + spec_.name + "': forward before bind()");
  FH_EXPECT(batch >= 1 && batch <= ws.max_batch, "KanLayer '" + spec_.name + "': batch " + std::to_string(batch) +
                                                     " outside [1, " + std::to_string(ws.max_batch) + "]");
  WorkspaceCarver c(ws.data);
  const Buffers b = carve(c, ws.max_batch);
  compute_bases(b.first, b.values, b.slopes, in, batch, lane.stream);
  dispatch_order<LaunchForward>(spec_.order, out, in, b.first, b.values, w_, c_, batch, spec_.in, spec_.out, bases(),
                                lane.stream);
}

void KanLayer::backward(float* d_in, const float* d_out, const float* in, std::int64_t batch, const Workspace& ws,
                        gpu::BlasLane lane, const SideLane* side) {
  FH_EXPECT(bound_, "KanLayer '" + spec_.name + "': backward before bind()");
  FH_EXPECT(batch >= 1 && batch <= ws.max_batch, "KanLayer '" + spec_.name + "': batch " + std::to_string(batch) +
                                                     " outside [1, " + std::to_string(ws.max_batch) + "]");
  WorkspaceCarver c(ws.data);
  const Buffers b = carve(c, ws.max_batch);
  dispatch_order<LaunchBackward>(spec_.order, d_in, dw_, dc_, b.partial, d_out, in, b.first, b.values, b.slopes, w_,
                                 c_, batch, spec_.in, spec_.out, bases(), lane.stream);
  if (side != nullptr) {  // Module's contract: the main stream is joined to the side lane
    FH_CHECK(cudaEventRecord(side->join, side->lane.stream));
    FH_CHECK(cudaStreamWaitEvent(lane.stream, side->join, 0));
  }
}

std::size_t KanLayer::sort_temp_bytes(std::int64_t batch) const {
  std::size_t bytes = 0;
  const auto n = static_cast<int>(batch * spec_.in);
  FH_CHECK(cub::DeviceSegmentedSort::SortKeys(static_cast<void*>(nullptr), bytes, static_cast<const float*>(nullptr),
                                              static_cast<float*>(nullptr), n, static_cast<int>(spec_.in),
                                              static_cast<const std::int32_t*>(nullptr),
                                              static_cast<const std::int32_t*>(nullptr), cudaStream_t{}));
  return bytes;
}

KanLayer::UpdateBuffers KanLayer::carve_update(WorkspaceCarver& c, std::int64_t max_batch) const {
  const auto n = static_cast<std::size_t>(max_batch * spec_.in);
  const auto k1 = static_cast<std::size_t>(spec_.order + 1);
  UpdateBuffers u;
  u.xt = c.take<float>(n);
  u.sorted = c.take<float>(n);
  u.offsets = c.take<std::int32_t>(static_cast<std::size_t>(spec_.in + 1));
  u.first_old = c.take<std::int32_t>(n);
  u.first_new = c.take<std::int32_t>(n);
  u.values_old = c.take<float>(n * k1);
  u.values_new = c.take<float>(n * k1);
  u.rhs = c.take<double>(static_cast<std::size_t>(spec_.in * spec_.out * bases()));
  u.sort_temp_bytes = std::max<std::size_t>(sort_temp_bytes(max_batch), 1);
  u.sort_temp = c.take<std::byte>(u.sort_temp_bytes);
  return u;
}

std::size_t KanLayer::grid_update_workspace_bytes(std::int64_t max_batch) const {
  FH_EXPECT(max_batch * spec_.in < (std::int64_t{1} << 31), "KanLayer: grid update batch x in must be < 2^31");
  WorkspaceCarver c;
  carve_update(c, max_batch);
  return c.bytes();
}

void KanLayer::update_grid(const float* in, std::int64_t batch, const Workspace& ws, cudaStream_t stream) {
  FH_EXPECT(bound_, "KanLayer '" + spec_.name + "': update_grid before bind()");
  FH_EXPECT(batch >= 1 && batch <= ws.max_batch, "KanLayer '" + spec_.name + "': update_grid batch " +
                                                     std::to_string(batch) + " outside [1, " +
                                                     std::to_string(ws.max_batch) + "]");
  WorkspaceCarver c(ws.data);
  const UpdateBuffers u = carve_update(c, ws.max_batch);
  const std::int64_t n = batch * spec_.in;
  // The old spline values' bases, before the grid changes.
  compute_bases(u.first_old, u.values_old, nullptr, in, batch, stream);
  transpose_kernel<<<gpu::grid_stride_blocks(std::max<std::int64_t>(n, spec_.in + 1)), kThreads, 0, stream>>>(
      u.xt, u.offsets, in, static_cast<int>(batch), static_cast<int>(spec_.in));
  FH_CHECK(cudaGetLastError());
  std::size_t temp = sort_temp_bytes(batch);
  FH_EXPECT(temp <= u.sort_temp_bytes, "KanLayer: cub's sort needs more temporary storage than was reserved");
  temp = u.sort_temp_bytes;
  FH_CHECK(cub::DeviceSegmentedSort::SortKeys(u.sort_temp, temp, u.xt, u.sorted, static_cast<int>(n),
                                              static_cast<int>(spec_.in), u.offsets, u.offsets + 1, stream));
  const std::int64_t gk = spec_.in * knots();
  refit_grid_kernel<<<gpu::ceil_div(gk, kThreads), kThreads, 0, stream>>>(
      grid_, u.sorted, static_cast<int>(batch), static_cast<int>(spec_.in), static_cast<int>(spec_.grid),
      static_cast<int>(spec_.order), spec_.grid_eps, spec_.grid_margin);
  FH_CHECK(cudaGetLastError());
  compute_bases(u.first_new, u.values_new, nullptr, in, batch, stream);
  dispatch_order<LaunchRefit>(spec_.order, c_, u.rhs, u.first_old, u.values_old, u.first_new, u.values_new, batch,
                              spec_.in, spec_.out, bases(), stream);
}

}  // namespace foxhunt::models
