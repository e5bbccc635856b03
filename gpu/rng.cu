#include "gpu/rng.hpp"

#include <cmath>
#include <cstdint>

#include "gpu/check.hpp"
#include "gpu/launch.cuh"
#include "gpu/philox.cuh"

namespace foxhunt::gpu {
namespace {

enum class Dist { uniform, normal };

// One thread per group of 4 elements (one Philox block), grid-stride over groups. Full groups
// store one float4 when `out` is 16-byte aligned; the tail group (n % 4) stores lane by lane.
template <Dist D, bool kAligned>
__global__ void fill_kernel(float* __restrict__ out, std::int64_t n, float a, float b, std::uint64_t seed,
                            std::uint32_t stream_id, std::uint64_t counter_offset) {
  const std::int64_t groups = (n + 3) / 4;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t g = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; g < groups; g += stride) {
    const std::uint64_t counter = counter_offset + static_cast<std::uint64_t>(g);
    float4 v;
    if constexpr (D == Dist::uniform) {
      v = uniform4(seed, stream_id, counter);
      v = make_float4(uniform_in(v.x, a, b), uniform_in(v.y, a, b), uniform_in(v.z, a, b), uniform_in(v.w, a, b));
    } else {
      v = normal4(seed, stream_id, counter);
      v = make_float4(normal_scaled(v.x, a, b), normal_scaled(v.y, a, b), normal_scaled(v.z, a, b),
                      normal_scaled(v.w, a, b));
    }
    const std::int64_t i = g * 4;
    if (kAligned && i + 4 <= n) {
      *reinterpret_cast<float4*>(out + i) = v;
    } else {
      const float lane[4] = {v.x, v.y, v.z, v.w};
      for (int j = 0; j < 4 && i + j < n; ++j) out[i + j] = lane[j];
    }
  }
}

template <Dist D>
void launch_fill(float* out, std::int64_t n, float a, float b, std::uint64_t seed, std::uint32_t stream_id,
                 std::uint64_t counter_offset, cudaStream_t stream) {
  const std::int64_t groups = (n + 3) / 4;
  const int blocks = grid_stride_blocks(groups);
  if (reinterpret_cast<std::uintptr_t>(out) % 16 == 0)
    fill_kernel<D, true><<<blocks, kBlock, 0, stream>>>(out, n, a, b, seed, stream_id, counter_offset);
  else
    fill_kernel<D, false><<<blocks, kBlock, 0, stream>>>(out, n, a, b, seed, stream_id, counter_offset);
  FH_CHECK_LAUNCH();
}

}  // namespace

void fill_uniform(float* out, std::int64_t n, float lo, float hi, std::uint64_t seed, std::uint32_t stream_id,
                  std::uint64_t counter_offset, cudaStream_t stream) {
  FH_EXPECT(n >= 0, "fill_uniform: n must be >= 0");
  if (n == 0) return;
  FH_EXPECT(out != nullptr, "fill_uniform: out is null");
  FH_EXPECT(std::isfinite(lo) && std::isfinite(hi) && lo <= hi, "fill_uniform: need finite lo <= hi");
  launch_fill<Dist::uniform>(out, n, lo, hi, seed, stream_id, counter_offset, stream);
}

void fill_normal(float* out, std::int64_t n, float mean, float stddev, std::uint64_t seed, std::uint32_t stream_id,
                 std::uint64_t counter_offset, cudaStream_t stream) {
  FH_EXPECT(n >= 0, "fill_normal: n must be >= 0");
  if (n == 0) return;
  FH_EXPECT(out != nullptr, "fill_normal: out is null");
  FH_EXPECT(std::isfinite(mean) && std::isfinite(stddev) && stddev >= 0.f,
            "fill_normal: need finite mean and finite stddev >= 0");
  launch_fill<Dist::normal>(out, n, mean, stddev, seed, stream_id, counter_offset, stream);
}

}  // namespace foxhunt::gpu
