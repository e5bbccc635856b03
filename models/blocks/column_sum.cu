#include "models/blocks/column_sum.cuh"

namespace foxhunt::models::blocks_detail {
namespace {

__global__ void column_finish_kernel(float* __restrict__ out, const float* __restrict__ part, std::int64_t P,
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
  column_finish_kernel<<<gpu::ceil_div(J, gpu::kBlock), gpu::kBlock, 0, stream>>>(out, part, P, J);
  FH_CHECK_LAUNCH();
}

}  // namespace foxhunt::models::blocks_detail
