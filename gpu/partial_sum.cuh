#pragma once
// Deterministic two-pass sums for scalar results (losses, norms): every block of the first pass
// writes one partial into a caller-given workspace, then a single block adds the partials in a
// fixed order. No float atomics, so a result depends only on the inputs and the grid size.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "gpu/launch.cuh"

namespace foxhunt::gpu {

// Upper bound on first-pass blocks. Fixed (not derived from the SM count), so a workspace sized on
// one device is large enough on any other.
inline constexpr int kMaxPartials = 2048;

// Blocks the first pass launches for n items (kBlock threads each, grid-stride).
inline int partial_blocks(std::int64_t n) { return std::min(grid_stride_blocks(n), kMaxPartials); }
// Workspace for the partials of a pass over n items: never below what partial_blocks(n) uses.
inline std::size_t partial_bytes(std::int64_t n) {
  const std::int64_t blocks = std::min<std::int64_t>((n + kBlock - 1) / kBlock, kMaxPartials);
  return static_cast<std::size_t>(std::max<std::int64_t>(blocks, 1)) * sizeof(float);
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// Sum over a 1-D block (blockDim.x a multiple of 32); the result is valid in thread 0. Every
// thread of the block must call it (it synchronizes), at most once per kernel.
__device__ __forceinline__ float block_sum(float v) {
  __shared__ float warp_sums[32];
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  v = warp_sum(v);
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  const int warps = blockDim.x >> 5;
  v = (threadIdx.x < warps) ? warp_sums[threadIdx.x] : 0.f;
  if (warp == 0) v = warp_sum(v);
  return v;
}

// Second pass: one block adds `count` partials in a fixed order and writes finish(sum) to *out.
template <class Finish>
__global__ void finish_partial_sum_kernel(float* out, const float* partials, int count, Finish finish) {
  float acc = 0.f;
  for (int i = threadIdx.x; i < count; i += blockDim.x) acc += partials[i];
  acc = block_sum(acc);
  if (threadIdx.x == 0) *out = finish(acc);
}

// 16-byte alignment of every non-null pointer: the float4 paths need it.
__host__ __device__ inline bool aligned16(const void* p) { return (reinterpret_cast<std::uintptr_t>(p) & 15u) == 0; }

}  // namespace foxhunt::gpu
