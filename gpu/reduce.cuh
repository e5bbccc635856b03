#pragma once
// Warp- and block-level reductions shared by the row kernels (softmax, layernorm, row
// reductions) and the whole-array reductions. Device code only.
//
// Determinism: every combination order below is a fixed function of the launch shape, never
// of timing. The *_allreduce helpers use xor butterflies with commutative operators: each step
// combines the same two operands on both partner lanes (a+b == b+a bitwise in IEEE), so every
// lane and thread ends with the same bits, which row kernels rely on (each lane normalises its
// own elements with the shared max/sum).
#include <cuda_runtime.h>

#include <cmath>

namespace foxhunt::gpu {

inline constexpr unsigned kFullMask = 0xffffffffu;

struct SumOp {
  template <class T>
  __device__ __forceinline__ T operator()(T a, T b) const {
    return a + b;
  }
};
// fmaxf drops a NaN operand; callers that must propagate NaN use NanMaxOp.
struct MaxOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
// NaN-propagating max/min (NumPy / PyTorch semantics for max, min).
struct NanMaxOp {
  __device__ __forceinline__ float operator()(float a, float b) const {
    return (a != a || b != b) ? __int_as_float(0x7fffffff) : fmaxf(a, b);
  }
};
struct NanMinOp {
  __device__ __forceinline__ float operator()(float a, float b) const {
    return (a != a || b != b) ? __int_as_float(0x7fffffff) : fminf(a, b);
  }
};

// Every lane of the warp gets op over the 32 lanes' values (T: float, double, int).
template <class T, class Op>
__device__ __forceinline__ T warp_allreduce(T v, Op op) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(kFullMask, v, o));
  return v;
}
template <class T>
__device__ __forceinline__ T warp_sum(T v) {
  return warp_allreduce(v, SumOp{});
}
__device__ __forceinline__ float warp_max(float v) { return warp_allreduce(v, MaxOp{}); }

// Every thread of the block gets op over all threads' values. blockDim.x must be a multiple of
// 32. `scratch` holds >= 32 values in shared memory; the trailing barrier lets the caller reuse
// it at once. Warp results are combined in warp order by every thread (same bits everywhere).
template <class T, class Op>
__device__ __forceinline__ T block_allreduce(T v, Op op, T* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_allreduce(v, op);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = scratch[0];
  for (int w = 1; w < warps; ++w) v = op(v, scratch[w]);
  __syncthreads();
  return v;
}
template <class T>
__device__ __forceinline__ T block_sum(T v, T* scratch) {
  return block_allreduce(v, SumOp{}, scratch);
}
__device__ __forceinline__ float block_max(float v, float* scratch) { return block_allreduce(v, MaxOp{}, scratch); }

}  // namespace foxhunt::gpu
