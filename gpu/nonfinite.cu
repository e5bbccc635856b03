#include "gpu/nonfinite.hpp"

#include "gpu/pointwise.cuh"

namespace foxhunt::gpu {
namespace {

// Tested on the raw bits (exponent all ones = inf or NaN), so no compiler flag can fold it away.
template <class Bits>
struct NonfiniteMask;
template <>
struct NonfiniteMask<std::uint32_t> {  // f32
  static constexpr std::uint32_t value = 0x7f800000u;
};
template <>
struct NonfiniteMask<std::uint16_t> {  // bf16
  static constexpr std::uint16_t value = 0x7f80u;
};

// N elements per 16-byte access: 4 f32 or 8 bf16.
template <class Bits>
constexpr int kPacket = 16 / sizeof(Bits);

template <class Bits, int N>
__global__ void __launch_bounds__(kBlock) flag_nonfinite_kernel(std::uint32_t* flag, const Bits* x, std::int64_t n) {
  constexpr Bits mask = NonfiniteMask<Bits>::value;
  using P = Packet<Bits, N>;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  const std::int64_t tid = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::int64_t packets = n / N;
  bool bad = false;
  for (std::int64_t p = tid; p < packets; p += stride) {
    const P v = reinterpret_cast<const P*>(x)[p];
#pragma unroll
    for (int k = 0; k < N; ++k) bad |= (v.v[k] & mask) == mask;
  }
  for (std::int64_t i = packets * N + tid; i < n; i += stride) bad |= (x[i] & mask) == mask;
  // Every thread reaches this barrier (no early exit above).
  if (__syncthreads_or(bad) && threadIdx.x == 0) atomicOr(flag, 1u);
}

template <class Bits>
void launch_flag(std::uint32_t* flag, const Bits* x, std::int64_t n, cudaStream_t stream) {
  FH_EXPECT(n >= 0, "element count n must be >= 0");
  FH_EXPECT(flag != nullptr, "flag must point at device memory");
  if (n == 0) return;
  constexpr int N = kPacket<Bits>;
  if (is_aligned(x, 16)) {
    flag_nonfinite_kernel<Bits, N><<<grid_stride_blocks((n + N - 1) / N), kBlock, 0, stream>>>(flag, x, n);
  } else {
    flag_nonfinite_kernel<Bits, 1><<<grid_stride_blocks(n), kBlock, 0, stream>>>(flag, x, n);
  }
  FH_CHECK_LAUNCH();
}

}  // namespace

void flag_nonfinite(std::uint32_t* flag, const float* x, std::int64_t n, cudaStream_t stream) {
  launch_flag(flag, reinterpret_cast<const std::uint32_t*>(x), n, stream);
}
void flag_nonfinite(std::uint32_t* flag, const __nv_bfloat16* x, std::int64_t n, cudaStream_t stream) {
  launch_flag(flag, reinterpret_cast<const std::uint16_t*>(x), n, stream);
}

}  // namespace foxhunt::gpu
