#include "gpu/cast.hpp"

#include <cstdint>

#include "gpu/pointwise.cuh"

namespace foxhunt::gpu {
namespace {

// 4 elements per access: 16-byte f32 side, 8-byte bf16 side, 4-byte u8 side.
constexpr int kPacket = 4;

struct F32ToBf16 {
  __device__ __nv_bfloat16 operator()(float x) const { return __float2bfloat16_rn(x); }
};
struct Bf16ToF32 {
  __device__ float operator()(__nv_bfloat16 x) const { return __bfloat162float(x); }
};
struct I32ToF32 {
  __device__ float operator()(std::int32_t x) const { return __int2float_rn(x); }
};
struct U32ToF32 {
  __device__ float operator()(std::uint32_t x) const { return __uint2float_rn(x); }
};
struct U8ToF32 {
  __device__ float operator()(std::uint8_t x) const { return static_cast<float>(x); }
};
struct F32ToI32 {
  // Explicit saturation and NaN handling, so the documented behaviour does not rest on cvt's
  // out-of-range rules. 2^31 is the first float above INT32_MAX; -2^31 is exactly INT32_MIN.
  __device__ std::int32_t operator()(float x) const {
    if (isnan(x)) return 0;
    if (x >= 2147483648.0f) return INT32_MAX;
    if (x <= -2147483648.0f) return INT32_MIN;
    return __float2int_rn(x);
  }
};

}  // namespace

void cast_f32_to_bf16(__nv_bfloat16* out, const float* in, std::int64_t n, cudaStream_t stream) {
  launch_map<kPacket>(out, n, stream, F32ToBf16{}, in);
}
void cast_bf16_to_f32(float* out, const __nv_bfloat16* in, std::int64_t n, cudaStream_t stream) {
  launch_map<kPacket>(out, n, stream, Bf16ToF32{}, in);
}
void cast_i32_to_f32(float* out, const std::int32_t* in, std::int64_t n, cudaStream_t stream) {
  launch_map<kPacket>(out, n, stream, I32ToF32{}, in);
}
void cast_u32_to_f32(float* out, const std::uint32_t* in, std::int64_t n, cudaStream_t stream) {
  launch_map<kPacket>(out, n, stream, U32ToF32{}, in);
}
void cast_u8_to_f32(float* out, const std::uint8_t* in, std::int64_t n, cudaStream_t stream) {
  launch_map<kPacket>(out, n, stream, U8ToF32{}, in);
}
void cast_f32_to_i32(std::int32_t* out, const float* in, std::int64_t n, cudaStream_t stream) {
  launch_map<kPacket>(out, n, stream, F32ToI32{}, in);
}

}  // namespace foxhunt::gpu
