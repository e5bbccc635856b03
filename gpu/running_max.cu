#include "gpu/running_max.hpp"

#include "gpu/atomics.cuh"
#include "gpu/pointwise.cuh"

namespace foxhunt::gpu {
namespace {

constexpr int kPacket = 4;
constexpr int kWarps = kBlock / 32;

// Each thread folds its grid-stride share with fmaxf (which drops NaN operands), starting from 0
// so negative values never win; the block reduces through warp shuffles and one shared slot per
// warp, and thread 0 issues the block's single atomic.
template <int N>
__global__ void __launch_bounds__(kBlock) raise_max_kernel(float* running_max, const float* values, std::int64_t n) {
  using P = Packet<float, N>;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  const std::int64_t tid = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::int64_t packets = n / N;
  float m = 0.0f;
  for (std::int64_t p = tid; p < packets; p += stride) {
    const P x = reinterpret_cast<const P*>(values)[p];
#pragma unroll
    for (int k = 0; k < N; ++k) m = fmaxf(m, x.v[k]);
  }
  for (std::int64_t i = packets * N + tid; i < n; i += stride) m = fmaxf(m, values[i]);

#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, offset));
  __shared__ float warp_max[kWarps];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) warp_max[warp] = m;
  __syncthreads();
  if (warp == 0) {
    m = lane < kWarps ? warp_max[lane] : 0.0f;
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, offset));
    if (lane == 0) atomic_max_nonneg(running_max, m);
  }
}

}  // namespace

void raise_max_nonneg(float* running_max, const float* values, std::int64_t n, cudaStream_t stream) {
  FH_EXPECT(n >= 0, "element count n must be >= 0");
  FH_EXPECT(running_max != nullptr, "running_max must point at device memory");
  if (n == 0) return;
  if (is_aligned(values, sizeof(float) * kPacket)) {
    raise_max_kernel<kPacket>
        <<<grid_stride_blocks((n + kPacket - 1) / kPacket), kBlock, 0, stream>>>(running_max, values, n);
  } else {
    raise_max_kernel<1><<<grid_stride_blocks(n), kBlock, 0, stream>>>(running_max, values, n);
  }
  FH_CHECK_LAUNCH();
}

}  // namespace foxhunt::gpu
