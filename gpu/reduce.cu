// Whole-array and row reductions (gpu/reduce.hpp).
// Whole arrays: own two-pass kernels rather than cub::DeviceReduce, for double accumulation
// and a one-pass Welford/Chan mean/variance. Pass 1: a grid of one wave (4 blocks per SM),
// grid-stride float4 loads four deep, per-block partials in the workspace; pass 2: one block
// combines the partials in index order. Small inputs (one block) finish in pass 1.
// Rows: one warp per row up to 1024 columns, one block per row above.
#include "gpu/reduce.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <string>

#include "gpu/check.hpp"
#include "gpu/launch.cuh"
#include "gpu/reduce.cuh"
#include "gpu/rows.cuh"

namespace foxhunt::gpu {
namespace {

constexpr int kThreads = 256;
constexpr std::int64_t kBlockElems = kThreads * 16;  // fewest elements worth another block
constexpr int kBlocksPerSm = 4;                      // with __launch_bounds__(256, 4): one full wave
constexpr std::int64_t kMaxBlocks = 1024;
constexpr std::size_t kPartialBytes = 32;  // >= sizeof every Op::P below

std::int64_t max_blocks(std::int64_t n) {
  return std::clamp<std::int64_t>((n + kBlockElems - 1) / kBlockElems, 1, kMaxBlocks);
}
int launch_blocks(std::int64_t n) {
  return static_cast<int>(std::min<std::int64_t>(max_blocks(n), static_cast<std::int64_t>(sm_count()) * kBlocksPerSm));
}

// ---- operators: partial type, identity, element/float4 accumulation, combine, result ----

struct SumR {
  using P = double;
  __device__ static P identity() { return 0.0; }
  __device__ static void add(P& a, float x) { a += x; }
  // Four floats pairwise in f32 (error ~2 ulp of their magnitude), then into the double sum.
  __device__ static void add4(P& a, float4 v) { a += static_cast<double>((v.x + v.y) + (v.z + v.w)); }
  __device__ static void add16(P& a, float4 v0, float4 v1, float4 v2, float4 v3) {
    add4(a, v0);
    add4(a, v1);
    add4(a, v2);
    add4(a, v3);
  }
  __device__ static P combine(P a, P b) { return a + b; }
  __device__ static P shfl_down(P a, int o) { return __shfl_down_sync(kFullMask, a, o); }
  __device__ static void finish(P a, std::int64_t, float* out0, float*) { *out0 = static_cast<float>(a); }
};

struct MeanR : SumR {
  // n == 0: 0.0 / 0.0 is NaN, the documented mean of nothing.
  __device__ static void finish(P a, std::int64_t n, float* out0, float*) {
    *out0 = static_cast<float>(a / static_cast<double>(n));
  }
};

template <class F, unsigned kIdentityBits>
struct ExtremeR {
  using P = float;
  __device__ static P identity() { return __uint_as_float(kIdentityBits); }
  __device__ static void add(P& a, float x) { a = F{}(a, x); }
  __device__ static void add4(P& a, float4 v) { a = F{}(a, F{}(F{}(v.x, v.y), F{}(v.z, v.w))); }
  __device__ static void add16(P& a, float4 v0, float4 v1, float4 v2, float4 v3) {
    add4(a, v0);
    add4(a, v1);
    add4(a, v2);
    add4(a, v3);
  }
  __device__ static P combine(P a, P b) { return F{}(a, b); }
  __device__ static P shfl_down(P a, int o) { return __shfl_down_sync(kFullMask, a, o); }
  __device__ static void finish(P a, std::int64_t, float* out0, float*) { *out0 = a; }
};
using MinR = ExtremeR<NanMinOp, 0x7f800000u>;  // +inf: min of nothing
using MaxR = ExtremeR<NanMaxOp, 0xff800000u>;  // -inf: max of nothing

// Count, mean and sum of squared deviations; trivially constructible (lives in __shared__).
struct Moments {
  double n, mean, m2;
};
struct MeanVarR {
  using P = Moments;
  __device__ static P identity() { return {0.0, 0.0, 0.0}; }
  // Chan et al. pairwise update: stable for any split, exact when either side is empty.
  __device__ static P combine(P a, P b) {
    if (b.n == 0.0) return a;
    if (a.n == 0.0) return b;
    const double n = a.n + b.n, d = b.mean - a.mean, f = b.n / n;
    return {n, a.mean + d * f, a.m2 + b.m2 + d * d * a.n * f};
  }
  __device__ static void add(P& a, float x) { a = combine(a, {1.0, static_cast<double>(x), 0.0}); }
  // A float4 batch: exact-enough two-pass moments in f32 around the batch's own mean (the
  // deviations are small, so f32 loses nothing that matters), then one double Chan update.
  __device__ static void add4(P& a, float4 v) {
    const float m = ((v.x + v.y) + (v.z + v.w)) * 0.25f;
    const float dx = v.x - m, dy = v.y - m, dz = v.z - m, dw = v.w - m;
    a = combine(a, {4.0, static_cast<double>(m), static_cast<double>((dx * dx + dy * dy) + (dz * dz + dw * dw))});
  }
  __device__ static float sq_dev(float4 v, float m) {
    const float dx = v.x - m, dy = v.y - m, dz = v.z - m, dw = v.w - m;
    return (dx * dx + dy * dy) + (dz * dz + dw * dw);
  }
  // 16 elements per double update: one double division per 16 elements keeps FP64 off the
  // critical path at full memory bandwidth.
  __device__ static void add16(P& a, float4 v0, float4 v1, float4 v2, float4 v3) {
    const float s = (((v0.x + v0.y) + (v0.z + v0.w)) + ((v1.x + v1.y) + (v1.z + v1.w))) +
                    (((v2.x + v2.y) + (v2.z + v2.w)) + ((v3.x + v3.y) + (v3.z + v3.w)));
    const float m = s * 0.0625f;
    const float q = (sq_dev(v0, m) + sq_dev(v1, m)) + (sq_dev(v2, m) + sq_dev(v3, m));
    a = combine(a, {16.0, static_cast<double>(m), static_cast<double>(q)});
  }
  __device__ static P shfl_down(P a, int o) {
    return {__shfl_down_sync(kFullMask, a.n, o), __shfl_down_sync(kFullMask, a.mean, o),
            __shfl_down_sync(kFullMask, a.m2, o)};
  }
  __device__ static void finish(P a, std::int64_t, float* out_mean, float* out_var) {
    const float nan = __int_as_float(0x7fffffff);
    *out_mean = a.n > 0.0 ? static_cast<float>(a.mean) : nan;
    *out_var = a.n > 0.0 ? static_cast<float>(a.m2 / a.n) : nan;
  }
};

// Op over the block; the result is valid in thread 0. Fixed shfl_down tree, then warp order.
// Ends with a barrier so the caller may call it again at once.
template <class Op>
__device__ typename Op::P block_reduce(typename Op::P v) {
  using P = typename Op::P;
  __shared__ P warp_parts[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = Op::combine(v, Op::shfl_down(v, o));
  if (lane == 0) warp_parts[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < static_cast<int>(blockDim.x >> 5) ? warp_parts[lane] : Op::identity();
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = Op::combine(v, Op::shfl_down(v, o));
  }
  __syncthreads();
  return v;
}

// ---- whole-array reduction ------------------------------------------------------------------

// Pass 1. One block: writes the result. Several: partials[blockIdx.x].
template <class Op>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm)
    reduce_partials_kernel(typename Op::P* partials, float* out0, float* out1, const float* in, std::int64_t n) {
  using P = typename Op::P;
  P acc = Op::identity();
  const std::int64_t tid = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::int64_t threads = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  // Scalar head up to the first 16-byte boundary, float4 body, scalar tail (< 4 elements).
  const std::int64_t head =
      std::min<std::int64_t>(n, ((16 - (reinterpret_cast<std::uintptr_t>(in) & 15u)) & 15u) / sizeof(float));
  if (tid < head) Op::add(acc, in[tid]);
  const float4* in4 = reinterpret_cast<const float4*>(in + head);
  const std::int64_t n4 = (n - head) / 4;
  std::int64_t i = tid;
  for (; i + 3 * threads < n4; i += 4 * threads) {  // four independent 16-byte loads in flight
    const float4 v0 = __ldg(in4 + i), v1 = __ldg(in4 + i + threads);
    const float4 v2 = __ldg(in4 + i + 2 * threads), v3 = __ldg(in4 + i + 3 * threads);
    Op::add16(acc, v0, v1, v2, v3);
  }
  for (; i < n4; i += threads) Op::add4(acc, __ldg(in4 + i));
  const std::int64_t tail = head + n4 * 4;
  if (tail + tid < n) Op::add(acc, in[tail + tid]);
  acc = block_reduce<Op>(acc);
  if (threadIdx.x == 0) {
    if (gridDim.x == 1)
      Op::finish(acc, n, out0, out1);
    else
      partials[blockIdx.x] = acc;
  }
}

// Pass 2: one block combines `count` partials; thread t takes t, t + blockDim.x, ... in order.
template <class Op>
__global__ void __launch_bounds__(kThreads)
    reduce_final_kernel(float* out0, float* out1, const typename Op::P* partials, int count, std::int64_t n) {
  typename Op::P acc = Op::identity();
  for (int i = threadIdx.x; i < count; i += blockDim.x) acc = Op::combine(acc, partials[i]);
  acc = block_reduce<Op>(acc);
  if (threadIdx.x == 0) Op::finish(acc, n, out0, out1);
}

template <class Op>
void reduce(const char* name, float* out0, float* out1, const float* in, std::int64_t n, void* workspace,
            cudaStream_t stream) {
  using P = typename Op::P;
  static_assert(sizeof(P) <= kPartialBytes);
  FH_EXPECT(n >= 0, std::string(name) + ": n must be >= 0");
  FH_EXPECT(out0 != nullptr, std::string(name) + ": output pointer must not be null");
  FH_EXPECT(n == 0 || in != nullptr, std::string(name) + ": in must not be null");
  const int blocks = launch_blocks(n);
  if (blocks > 1)
    FH_EXPECT(workspace != nullptr && (reinterpret_cast<std::uintptr_t>(workspace) & 7u) == 0,
              std::string(name) + ": workspace must be non-null and 8-byte aligned (reduce_workspace_bytes(n) bytes)");
  P* partials = static_cast<P*>(workspace);
  // n == 0 still launches: the empty-input value (0, NaN, +inf, -inf) is written on the device.
  reduce_partials_kernel<Op><<<blocks, kThreads, 0, stream>>>(partials, out0, out1, in, n);
  FH_CHECK_LAUNCH();
  if (blocks > 1) {
    reduce_final_kernel<Op><<<1, kThreads, 0, stream>>>(out0, out1, partials, blocks, n);
    FH_CHECK_LAUNCH();
  }
}

// ---- row reductions -------------------------------------------------------------------------

struct RowSumR {
  using P = double;
  using Out = float;
  __device__ static P identity() { return 0.0; }
  __device__ static void add(P& a, float x, std::int64_t) { a += x; }
  __device__ static P combine(P a, P b) { return a + b; }
  __device__ static P shfl_down(P a, int o) { return __shfl_down_sync(kFullMask, a, o); }
  __device__ static Out result(P a) { return static_cast<float>(a); }
};

struct RowMaxR {
  using P = float;
  using Out = float;
  __device__ static P identity() { return -INFINITY; }
  __device__ static void add(P& a, float x, std::int64_t) { a = NanMaxOp{}(a, x); }
  __device__ static P combine(P a, P b) { return NanMaxOp{}(a, b); }
  __device__ static P shfl_down(P a, int o) { return __shfl_down_sync(kFullMask, a, o); }
  __device__ static Out result(P a) { return a; }
};

struct ValueIndex {
  float v;
  int i;
};
struct RowArgmaxR {
  using P = ValueIndex;
  using Out = std::int32_t;
  // Is (x, i) preferred to (y, j)? NaN above everything, then larger value, then lower index.
  // A strict total order on (value, index) pairs, so any combination tree picks the same one.
  __device__ static bool better(float x, int i, float y, int j) {
    const bool xn = x != x, yn = y != y;
    if (xn || yn) return xn && (!yn || i < j);
    return x > y || (x == y && i < j);
  }
  __device__ static P identity() { return {-INFINITY, INT_MAX}; }  // loses to any element, -inf included
  __device__ static void add(P& a, float x, std::int64_t c) {
    if (better(x, static_cast<int>(c), a.v, a.i)) a = {x, static_cast<int>(c)};
  }
  __device__ static P combine(P a, P b) { return better(b.v, b.i, a.v, a.i) ? b : a; }
  __device__ static P shfl_down(P a, int o) {
    return {__shfl_down_sync(kFullMask, a.v, o), __shfl_down_sync(kFullMask, a.i, o)};
  }
  __device__ static Out result(P a) { return a.i; }
};

// One warp per row. kVec == 4: cols % 4 == 0 and 16-byte aligned rows.
template <class Op, int kVec>
__global__ void __launch_bounds__(rows::kWarpsPerBlock * 32)
    row_reduce_warp_kernel(typename Op::Out* out, const float* in, std::int64_t nrows, std::int64_t cols) {
  const int lane = threadIdx.x & 31;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * rows::kWarpsPerBlock;
  for (std::int64_t r = static_cast<std::int64_t>(blockIdx.x) * rows::kWarpsPerBlock + (threadIdx.x >> 5); r < nrows;
       r += stride) {
    const float* x = in + r * cols;
    typename Op::P a = Op::identity();
    if constexpr (kVec == 4) {
#pragma unroll 4
      for (std::int64_t c = 4 * lane; c < cols; c += 128) {
        const float4 v = *reinterpret_cast<const float4*>(x + c);
        Op::add(a, v.x, c);
        Op::add(a, v.y, c + 1);
        Op::add(a, v.z, c + 2);
        Op::add(a, v.w, c + 3);
      }
    } else {
#pragma unroll 4
      for (std::int64_t c = lane; c < cols; c += 32) Op::add(a, x[c], c);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) a = Op::combine(a, Op::shfl_down(a, o));
    if (lane == 0) out[r] = Op::result(a);
  }
}

// One block per row.
template <class Op>
__global__ void __launch_bounds__(rows::kRowBlockMax)
    row_reduce_block_kernel(typename Op::Out* out, const float* in, std::int64_t nrows, std::int64_t cols) {
  for (std::int64_t r = blockIdx.x; r < nrows; r += gridDim.x) {
    const float* x = in + r * cols;
    typename Op::P a = Op::identity();
#pragma unroll 4
    for (std::int64_t c = threadIdx.x; c < cols; c += blockDim.x) Op::add(a, x[c], c);
    a = block_reduce<Op>(a);
    if (threadIdx.x == 0) out[r] = Op::result(a);
  }
}

template <class Op>
void row_reduce(const char* name, typename Op::Out* out, const float* in, std::int64_t nrows, std::int64_t cols,
                cudaStream_t stream) {
  FH_EXPECT(nrows >= 0, std::string(name) + ": rows must be >= 0");
  FH_EXPECT(cols >= 1, std::string(name) + ": cols must be >= 1");
  if (nrows == 0) return;
  FH_EXPECT(out != nullptr && in != nullptr, std::string(name) + ": out and in must not be null");
  if (cols <= rows::kWarpMaxCols) {
    if (rows::vec4_ok(cols, {in}))
      row_reduce_warp_kernel<Op, 4>
          <<<rows::warp_grid(nrows), rows::kWarpsPerBlock * 32, 0, stream>>>(out, in, nrows, cols);
    else
      row_reduce_warp_kernel<Op, 1>
          <<<rows::warp_grid(nrows), rows::kWarpsPerBlock * 32, 0, stream>>>(out, in, nrows, cols);
  } else {
    row_reduce_block_kernel<Op>
        <<<rows::block_grid(nrows), rows::block_threads(cols), 0, stream>>>(out, in, nrows, cols);
  }
  FH_CHECK_LAUNCH();
}

}  // namespace

std::size_t reduce_workspace_bytes(std::int64_t n) {
  const std::int64_t blocks = max_blocks(std::max<std::int64_t>(n, 0));
  return blocks > 1 ? static_cast<std::size_t>(blocks) * kPartialBytes : 0;
}

void reduce_sum(float* out, const float* in, std::int64_t n, void* workspace, cudaStream_t stream) {
  reduce<SumR>("reduce_sum", out, nullptr, in, n, workspace, stream);
}
void reduce_mean(float* out, const float* in, std::int64_t n, void* workspace, cudaStream_t stream) {
  reduce<MeanR>("reduce_mean", out, nullptr, in, n, workspace, stream);
}
void reduce_min(float* out, const float* in, std::int64_t n, void* workspace, cudaStream_t stream) {
  reduce<MinR>("reduce_min", out, nullptr, in, n, workspace, stream);
}
void reduce_max(float* out, const float* in, std::int64_t n, void* workspace, cudaStream_t stream) {
  reduce<MaxR>("reduce_max", out, nullptr, in, n, workspace, stream);
}
void reduce_mean_var(float* out_mean, float* out_var, const float* in, std::int64_t n, void* workspace,
                     cudaStream_t stream) {
  FH_EXPECT(out_var != nullptr, "reduce_mean_var: out_var must not be null");
  reduce<MeanVarR>("reduce_mean_var", out_mean, out_var, in, n, workspace, stream);
}

void row_sum(float* out, const float* in, std::int64_t rows, std::int64_t cols, cudaStream_t stream) {
  row_reduce<RowSumR>("row_sum", out, in, rows, cols, stream);
}
void row_max(float* out, const float* in, std::int64_t rows, std::int64_t cols, cudaStream_t stream) {
  row_reduce<RowMaxR>("row_max", out, in, rows, cols, stream);
}
void row_argmax(std::int32_t* out, const float* in, std::int64_t rows, std::int64_t cols, cudaStream_t stream) {
  FH_EXPECT(cols <= INT32_MAX, "row_argmax: cols must fit in int32");
  row_reduce<RowArgmaxR>("row_argmax", out, in, rows, cols, stream);
}

}  // namespace foxhunt::gpu
