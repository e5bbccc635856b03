#pragma once
// Device helpers that write observations as f32 or bf16 (the two observation dtypes).
#include <cuda_bf16.h>

#include <cstdint>

namespace foxhunt::rl {

__device__ __forceinline__ void store_obs(float* p, float v) { *p = v; }
__device__ __forceinline__ void store_obs(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }

// Four consecutive values; p must be 16-byte aligned (f32) or 8-byte aligned (bf16).
__device__ __forceinline__ void store_obs4(float* p, float4 v) { *reinterpret_cast<float4*>(p) = v; }
__device__ __forceinline__ void store_obs4(__nv_bfloat16* p, float4 v) {
  const __nv_bfloat162 lo = __floats2bfloat162_rn(v.x, v.y);
  const __nv_bfloat162 hi = __floats2bfloat162_rn(v.z, v.w);
  uint2 u;
  u.x = *reinterpret_cast<const std::uint32_t*>(&lo);
  u.y = *reinterpret_cast<const std::uint32_t*>(&hi);
  *reinterpret_cast<uint2*>(p) = u;
}

// The whole block copies `count` staged floats from shared memory to dst (f32 or bf16) with
// 16-byte stores where dst allows it. src must be 16-byte aligned shared memory. Every thread of
// the block must call this (it has no barrier of its own; the caller syncs around it).
__device__ __forceinline__ void block_store_staged(float* dst, const float* src, int count) {
  if ((reinterpret_cast<std::uintptr_t>(dst) & 15u) == 0) {
    const int vec = count / 4;
    for (int k = threadIdx.x; k < vec; k += blockDim.x)
      reinterpret_cast<float4*>(dst)[k] = reinterpret_cast<const float4*>(src)[k];
    for (int k = vec * 4 + threadIdx.x; k < count; k += blockDim.x) dst[k] = src[k];
  } else {
    for (int k = threadIdx.x; k < count; k += blockDim.x) dst[k] = src[k];
  }
}
__device__ __forceinline__ void block_store_staged(__nv_bfloat16* dst, const float* src, int count) {
  if ((reinterpret_cast<std::uintptr_t>(dst) & 15u) == 0) {
    const int vec = count / 8;  // 8 bf16 = 16 bytes
    for (int k = threadIdx.x; k < vec; k += blockDim.x) {
      const float4 a = reinterpret_cast<const float4*>(src)[2 * k];
      const float4 b = reinterpret_cast<const float4*>(src)[2 * k + 1];
      const __nv_bfloat162 p0 = __floats2bfloat162_rn(a.x, a.y), p1 = __floats2bfloat162_rn(a.z, a.w);
      const __nv_bfloat162 p2 = __floats2bfloat162_rn(b.x, b.y), p3 = __floats2bfloat162_rn(b.z, b.w);
      uint4 u;
      u.x = *reinterpret_cast<const std::uint32_t*>(&p0);
      u.y = *reinterpret_cast<const std::uint32_t*>(&p1);
      u.z = *reinterpret_cast<const std::uint32_t*>(&p2);
      u.w = *reinterpret_cast<const std::uint32_t*>(&p3);
      reinterpret_cast<uint4*>(dst)[k] = u;
    }
    for (int k = vec * 8 + threadIdx.x; k < count; k += blockDim.x) dst[k] = __float2bfloat16_rn(src[k]);
  } else {
    for (int k = threadIdx.x; k < count; k += blockDim.x) dst[k] = __float2bfloat16_rn(src[k]);
  }
}

}  // namespace foxhunt::rl
