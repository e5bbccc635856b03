// Softmax / log-softmax, forward and backward (gpu/softmax.hpp).
// cols <= 1024: one warp per row, the row in registers: one read, one write.
// Longer rows: one block per row. The row is cached in shared memory when it fits (still one
// read); otherwise it is read twice from global memory (forward: online max/sum pass, then the
// write pass; backward: dot pass, then the write pass), mostly from L2.
#include "gpu/softmax.hpp"

#include <cmath>
#include <string>

#include "gpu/check.hpp"
#include "gpu/launch.cuh"
#include "gpu/reduce.cuh"
#include "gpu/rows.cuh"

namespace foxhunt::gpu {
namespace {

enum class Kind { softmax, log_softmax };

// ---- one warp per row ---------------------------------------------------------------------

template <Kind kKind, int kVec, int kIters>
__global__ void __launch_bounds__(rows::kWarpsPerBlock * 32)
    forward_warp_kernel(float* out, const float* in, std::int64_t nrows, int cols) {
  using Frag = rows::Frag<kVec, kIters>;
  const int lane = threadIdx.x & 31;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * rows::kWarpsPerBlock;
  for (std::int64_t r = static_cast<std::int64_t>(blockIdx.x) * rows::kWarpsPerBlock + (threadIdx.x >> 5); r < nrows;
       r += stride) {
    Frag x;
    x.load(in + r * cols, cols, lane, -INFINITY);  // -inf padding: adds 0 to the exp-sum
    float m = -INFINITY;
#pragma unroll
    for (int i = 0; i < Frag::kN; ++i) m = fmaxf(m, x.v[i]);
    m = warp_max(m);
    float s = 0.f;
    if constexpr (kKind == Kind::softmax) {
#pragma unroll
      for (int i = 0; i < Frag::kN; ++i) {
        x.v[i] = expf(x.v[i] - m);
        s += x.v[i];
      }
      const float inv = 1.f / warp_sum(s);
#pragma unroll
      for (int i = 0; i < Frag::kN; ++i) x.v[i] *= inv;
    } else {
#pragma unroll
      for (int i = 0; i < Frag::kN; ++i) s += expf(x.v[i] - m);
      const float log_s = logf(warp_sum(s));
#pragma unroll
      for (int i = 0; i < Frag::kN; ++i) x.v[i] = (x.v[i] - m) - log_s;
    }
    x.store(out + r * cols, cols, lane);
  }
}

template <Kind kKind, int kVec, int kIters>
__global__ void __launch_bounds__(rows::kWarpsPerBlock * 32)
    backward_warp_kernel(float* d_in, const float* d_out, const float* out, std::int64_t nrows, int cols) {
  using Frag = rows::Frag<kVec, kIters>;
  const int lane = threadIdx.x & 31;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * rows::kWarpsPerBlock;
  for (std::int64_t r = static_cast<std::int64_t>(blockIdx.x) * rows::kWarpsPerBlock + (threadIdx.x >> 5); r < nrows;
       r += stride) {
    Frag dy, y;
    dy.load(d_out + r * cols, cols, lane, 0.f);
    y.load(out + r * cols, cols, lane, 0.f);
    float s = 0.f;
    if constexpr (kKind == Kind::softmax) {
#pragma unroll
      for (int i = 0; i < Frag::kN; ++i) s += dy.v[i] * y.v[i];
      s = warp_sum(s);
#pragma unroll
      for (int i = 0; i < Frag::kN; ++i) dy.v[i] = y.v[i] * (dy.v[i] - s);
    } else {
#pragma unroll
      for (int i = 0; i < Frag::kN; ++i) s += dy.v[i];
      s = warp_sum(s);
#pragma unroll
      for (int i = 0; i < Frag::kN; ++i) dy.v[i] = dy.v[i] - expf(y.v[i]) * s;
    }
    dy.store(d_in + r * cols, cols, lane);
  }
}

// ---- one block per row --------------------------------------------------------------------
// Thread t touches columns t, t + blockDim.x, ... in every pass, so the shared-memory row
// cache needs no barriers of its own: each thread reads back only what it wrote.

// Running max and sum of exp(x - max) over one thread's elements.
struct MaxSum {
  float m = -INFINITY;
  float s = 0.f;
  __device__ __forceinline__ void add(float x) {
    if (x > m) {
      s = s * expf(m - x) + 1.f;  // m == -inf: s is 0 and expf(-inf) is 0
      m = x;
    } else if (x != -INFINITY) {  // skipping -inf keeps (-inf) - (-inf) = NaN out; NaN x still poisons s
      s += expf(x - m);
    }
  }
};

template <Kind kKind, bool kCached>
__global__ void __launch_bounds__(rows::kRowBlockMax)
    forward_block_kernel(float* out, const float* in, std::int64_t nrows, std::int64_t cols) {
  extern __shared__ float cache[];  // (cols) when kCached
  __shared__ float scratch[32];
  for (std::int64_t r = blockIdx.x; r < nrows; r += gridDim.x) {
    const float* x = in + r * cols;
    float* y = out + r * cols;
    float m, s = 0.f;
    if constexpr (kCached) {
      m = -INFINITY;
#pragma unroll 4
      for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
        const float v = x[c];
        cache[c] = v;
        m = fmaxf(m, v);
      }
      m = block_max(m, scratch);
      for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
        const float e = expf(cache[c] - m);
        if constexpr (kKind == Kind::softmax) cache[c] = e;
        s += e;
      }
      s = block_sum(s, scratch);
    } else {
      MaxSum a;
#pragma unroll 4
      for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x) a.add(x[c]);
      m = block_max(a.m, scratch);
      s = block_sum(a.m == -INFINITY ? 0.f : a.s * expf(a.m - m), scratch);
    }
    if constexpr (kKind == Kind::softmax) {
      const float inv = 1.f / s;
#pragma unroll 4
      for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x) y[c] = (kCached ? cache[c] : expf(x[c] - m)) * inv;
    } else {
      const float log_s = logf(s);
#pragma unroll 4
      for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x) y[c] = ((kCached ? cache[c] : x[c]) - m) - log_s;
    }
  }
}

template <Kind kKind, bool kCached>
__global__ void __launch_bounds__(rows::kRowBlockMax)
    backward_block_kernel(float* d_in, const float* d_out, const float* out, std::int64_t nrows, std::int64_t cols) {
  extern __shared__ float cache[];  // (2, cols) when kCached: d_out row, then out row
  __shared__ float scratch[32];
  for (std::int64_t r = blockIdx.x; r < nrows; r += gridDim.x) {
    const float* dy = d_out + r * cols;
    const float* y = out + r * cols;
    float* dx = d_in + r * cols;
    float s = 0.f;
#pragma unroll 4
    for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const float g = dy[c], v = y[c];
      if constexpr (kCached) {
        cache[c] = g;
        cache[cols + c] = v;
      }
      s += kKind == Kind::softmax ? g * v : g;
    }
    s = block_sum(s, scratch);
#pragma unroll 4
    for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const float g = kCached ? cache[c] : dy[c];
      const float v = kCached ? cache[cols + c] : y[c];
      dx[c] = kKind == Kind::softmax ? v * (g - s) : g - expf(v) * s;
    }
  }
}

// ---- launchers ----------------------------------------------------------------------------

void check_args(const char* name, const void* a, const void* b, const void* c, std::int64_t nrows, std::int64_t cols) {
  FH_EXPECT(nrows >= 0, std::string(name) + ": rows must be >= 0");
  FH_EXPECT(cols >= 1, std::string(name) + ": cols must be >= 1");
  FH_EXPECT(nrows == 0 || (a != nullptr && b != nullptr && c != nullptr),
            std::string(name) + ": device pointers must not be null");
}

template <Kind kKind>
void forward(float* out, const float* in, std::int64_t nrows, std::int64_t cols, cudaStream_t stream) {
  if (cols <= rows::kWarpMaxCols) {
    rows::dispatch_frag(static_cast<int>(cols), rows::vec4_ok(cols, {out, in}), [&](auto vec, auto iters) {
      forward_warp_kernel<kKind, decltype(vec)::value, decltype(iters)::value>
          <<<rows::warp_grid(nrows), rows::kWarpsPerBlock * 32, 0, stream>>>(out, in, nrows, static_cast<int>(cols));
    });
  } else {
    const std::size_t bytes = static_cast<std::size_t>(cols) * sizeof(float);
    if (bytes <= rows::smem_optin_bytes()) {
      auto kernel = forward_block_kernel<kKind, true>;
      rows::allow_smem(kernel, bytes);
      kernel<<<rows::block_grid(nrows), rows::block_threads(cols), bytes, stream>>>(out, in, nrows, cols);
    } else {
      forward_block_kernel<kKind, false>
          <<<rows::block_grid(nrows), rows::block_threads(cols), 0, stream>>>(out, in, nrows, cols);
    }
  }
  FH_CHECK_LAUNCH();
}

template <Kind kKind>
void backward(float* d_in, const float* d_out, const float* out, std::int64_t nrows, std::int64_t cols,
              cudaStream_t stream) {
  if (cols <= rows::kWarpMaxCols) {
    rows::dispatch_frag(static_cast<int>(cols), rows::vec4_ok(cols, {d_in, d_out, out}), [&](auto vec, auto iters) {
      backward_warp_kernel<kKind, decltype(vec)::value, decltype(iters)::value>
          <<<rows::warp_grid(nrows), rows::kWarpsPerBlock * 32, 0, stream>>>(d_in, d_out, out, nrows,
                                                                             static_cast<int>(cols));
    });
  } else {
    const std::size_t bytes = 2 * static_cast<std::size_t>(cols) * sizeof(float);
    if (bytes <= rows::smem_optin_bytes()) {
      auto kernel = backward_block_kernel<kKind, true>;
      rows::allow_smem(kernel, bytes);
      kernel<<<rows::block_grid(nrows), rows::block_threads(cols), bytes, stream>>>(d_in, d_out, out, nrows, cols);
    } else {
      backward_block_kernel<kKind, false>
          <<<rows::block_grid(nrows), rows::block_threads(cols), 0, stream>>>(d_in, d_out, out, nrows, cols);
    }
  }
  FH_CHECK_LAUNCH();
}

}  // namespace

void softmax_forward(float* out, const float* in, std::int64_t rows, std::int64_t cols, cudaStream_t stream) {
  check_args("softmax_forward", out, in, in, rows, cols);
  if (rows == 0) return;
  forward<Kind::softmax>(out, in, rows, cols, stream);
}

void log_softmax_forward(float* out, const float* in, std::int64_t rows, std::int64_t cols, cudaStream_t stream) {
  check_args("log_softmax_forward", out, in, in, rows, cols);
  if (rows == 0) return;
  forward<Kind::log_softmax>(out, in, rows, cols, stream);
}

void softmax_backward(float* d_in, const float* d_out, const float* out, std::int64_t rows, std::int64_t cols,
                      cudaStream_t stream) {
  check_args("softmax_backward", d_in, d_out, out, rows, cols);
  if (rows == 0) return;
  backward<Kind::softmax>(d_in, d_out, out, rows, cols, stream);
}

void log_softmax_backward(float* d_in, const float* d_out, const float* out, std::int64_t rows, std::int64_t cols,
                          cudaStream_t stream) {
  check_args("log_softmax_backward", d_in, d_out, out, rows, cols);
  if (rows == 0) return;
  backward<Kind::log_softmax>(d_in, d_out, out, rows, cols, stream);
}

}  // namespace foxhunt::gpu
