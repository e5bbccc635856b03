#pragma once
// Observation element I/O shared by the insert and gather kernels: f32 or bf16, one element or
// four at a time (float4 / 8-byte loads; the host picks 4 only for aligned rows with obs_dim % 4 == 0).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace foxhunt::rl::obs_io {

template <class T>
__device__ __forceinline__ float to_f32(T v);
template <>
__device__ __forceinline__ float to_f32<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ float to_f32<__nv_bfloat16>(__nv_bfloat16 v) {
  return __bfloat162float(v);
}

template <class T>
__device__ __forceinline__ T from_f32(float v);
template <>
__device__ __forceinline__ float from_f32<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// v[0..VEC) = src[i .. i + VEC) as f32.
template <class T, int VEC>
__device__ __forceinline__ void load(const T* src, std::int64_t i, float v[VEC]) {
  if constexpr (VEC == 1) {
    v[0] = to_f32<T>(src[i]);
  } else if constexpr (sizeof(T) == 4) {
    const float4 a = *reinterpret_cast<const float4*>(src + i);
    v[0] = a.x;
    v[1] = a.y;
    v[2] = a.z;
    v[3] = a.w;
  } else {
    const uint2 a = *reinterpret_cast<const uint2*>(src + i);
    const __nv_bfloat162 lo = *reinterpret_cast<const __nv_bfloat162*>(&a.x);
    const __nv_bfloat162 hi = *reinterpret_cast<const __nv_bfloat162*>(&a.y);
    v[0] = __low2float(lo);
    v[1] = __high2float(lo);
    v[2] = __low2float(hi);
    v[3] = __high2float(hi);
  }
}

// dst[i .. i + VEC) = v (rounded to nearest even for bf16).
template <class T, int VEC>
__device__ __forceinline__ void store(T* dst, std::int64_t i, const float v[VEC]) {
  if constexpr (VEC == 1) {
    dst[i] = from_f32<T>(v[0]);
  } else if constexpr (sizeof(T) == 4) {
    *reinterpret_cast<float4*>(dst + i) = make_float4(v[0], v[1], v[2], v[3]);
  } else {
    const __nv_bfloat162 lo = __floats2bfloat162_rn(v[0], v[1]);
    const __nv_bfloat162 hi = __floats2bfloat162_rn(v[2], v[3]);
    uint2 a;
    a.x = *reinterpret_cast<const unsigned*>(&lo);
    a.y = *reinterpret_cast<const unsigned*>(&hi);
    *reinterpret_cast<uint2*>(dst + i) = a;
  }
}

// A warp copies one row of `dim` elements (lanes stride over groups of VEC).
template <class In, class Out, int VEC>
__device__ __forceinline__ void copy_row(Out* dst, const In* src, std::int64_t dim, int lane) {
  for (std::int64_t g = lane; g < dim / VEC; g += 32) {
    float v[VEC];
    load<In, VEC>(src, g * VEC, v);
    store<Out, VEC>(dst, g * VEC, v);
  }
}

}  // namespace foxhunt::rl::obs_io
