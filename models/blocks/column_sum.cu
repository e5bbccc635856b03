#include "models/blocks/column_sum.cuh"

#include "gpu/reduce.cuh"

namespace foxhunt::models::blocks_detail {
namespace {

// Below this many columns pass two gives each column a block (its threads stride the partials,
// then a fixed-order block sum); from it on, a thread per column adds the partials in order
// (coalesced across columns).
constexpr std::int64_t kThreadPerColumnFrom = 1024;

__global__ void column_finish_block_kernel(float* __restrict__ out, const float* __restrict__ part, std::int64_t P,
                                           std::int64_t J) {
  __shared__ float scratch[32];
  const std::int64_t j = blockIdx.x;
  float acc = 0.f;
  for (std::int64_t p = threadIdx.x; p < P; p += blockDim.x) acc += part[p * J + j];
  acc = gpu::block_sum(acc, scratch);
  if (threadIdx.x == 0) out[j] = acc;
}

__global__ void column_finish_thread_kernel(float* __restrict__ out, const float* __restrict__ part, std::int64_t P,
                                            std::int64_t J) {
  const std::int64_t j = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (j >= J) return;
  float acc = 0.f;
  for (std::int64_t p = 0; p < P; ++p) acc += part[p * J + j];
  out[j] = acc;
}

}  // namespace

void column_finish(float* out, const float* part, std::int64_t P, std::int64_t J, cudaStream_t stream) {
  if (J <= 0) return;
  if (J < kThreadPerColumnFrom)
    column_finish_block_kernel<<<static_cast<unsigned>(J), gpu::kBlock, 0, stream>>>(out, part, P, J);
  else
    column_finish_thread_kernel<<<gpu::ceil_div(J, gpu::kBlock), gpu::kBlock, 0, stream>>>(out, part, P, J);
  FH_CHECK_LAUNCH();
}

}  // namespace foxhunt::models::blocks_detail
