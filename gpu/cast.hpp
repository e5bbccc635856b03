#pragma once
// Element-type conversions over flat arrays of n elements. Any alignment works (vector path when
// both pointers are aligned to 4 elements). n == 0 launches nothing.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace foxhunt::gpu {

// Round to nearest, ties to even (__float2bfloat16_rn). NaN stays NaN, ±inf stays ±inf, finite
// values beyond the bf16 range round to ±inf.
void cast_f32_to_bf16(__nv_bfloat16* out, const float* in, std::int64_t n, cudaStream_t stream);
// Exact (every bf16 is an f32).
void cast_bf16_to_f32(float* out, const __nv_bfloat16* in, std::int64_t n, cudaStream_t stream);

// Round to nearest even where the integer has more than 24 significant bits (|v| > 2^24).
void cast_i32_to_f32(float* out, const std::int32_t* in, std::int64_t n, cudaStream_t stream);
void cast_u32_to_f32(float* out, const std::uint32_t* in, std::int64_t n, cudaStream_t stream);
// Exact: 0..255.
void cast_u8_to_f32(float* out, const std::uint8_t* in, std::int64_t n, cudaStream_t stream);

// Round to nearest, ties to even (__float2int_rn: 2.5 -> 2, -0.5 -> 0). Saturating: values at or
// beyond the int32 range, ±inf included, become INT32_MIN / INT32_MAX. NaN becomes 0.
void cast_f32_to_i32(std::int32_t* out, const float* in, std::int64_t n, cudaStream_t stream);

}  // namespace foxhunt::gpu
