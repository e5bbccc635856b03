#include "models/dueling.hpp"

#include <string>

#include "gpu/check.hpp"
#include "gpu/launch.cuh"

namespace foxhunt::models {
namespace {

// One thread per (b, d, z): the mean over actions is a short serial loop (A is small).
__global__ void dueling_forward_kernel(float* __restrict__ out, const float* __restrict__ value,
                                       const float* __restrict__ adv, std::int64_t batch, std::int64_t branches,
                                       std::int64_t actions, std::int64_t atoms) {
  const std::int64_t n = batch * branches * atoms;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t t = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < n; t += stride) {
    const std::int64_t z = t % atoms;
    const std::int64_t bd = t / atoms;  // b * D + d
    const std::int64_t b = bd / branches;
    const std::int64_t base = bd * actions * atoms + z;
    float mean = 0.f;
    for (std::int64_t a = 0; a < actions; ++a) mean += adv[base + a * atoms];
    mean /= static_cast<float>(actions);
    const float v = value[b * atoms + z];
    for (std::int64_t a = 0; a < actions; ++a) out[base + a * atoms] = v + (adv[base + a * atoms] - mean);
  }
}

// One thread per (b, z): walks every branch, so the value gradient is a fixed-order sum.
__global__ void dueling_backward_kernel(float* __restrict__ d_value, float* __restrict__ d_adv,
                                        const float* __restrict__ d_out, std::int64_t batch, std::int64_t branches,
                                        std::int64_t actions, std::int64_t atoms) {
  const std::int64_t n = batch * atoms;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t t = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; t < n; t += stride) {
    const std::int64_t z = t % atoms;
    const std::int64_t b = t / atoms;
    float dv = 0.f;
    for (std::int64_t d = 0; d < branches; ++d) {
      const std::int64_t base = (b * branches + d) * actions * atoms + z;
      float sum = 0.f;
      for (std::int64_t a = 0; a < actions; ++a) sum += d_out[base + a * atoms];
      const float mean = sum / static_cast<float>(actions);
      for (std::int64_t a = 0; a < actions; ++a) d_adv[base + a * atoms] = d_out[base + a * atoms] - mean;
      dv += sum;
    }
    d_value[b * atoms + z] = dv;
  }
}

void check_dims(const char* fn, std::int64_t batch, std::int64_t branches, std::int64_t actions, std::int64_t atoms) {
  FH_EXPECT(batch >= 0 && branches >= 1 && actions >= 1 && atoms >= 1,
            std::string(fn) + ": need batch >= 0 and branches, actions, atoms >= 1; got " + std::to_string(batch) +
                ", " + std::to_string(branches) + ", " + std::to_string(actions) + ", " + std::to_string(atoms));
}

}  // namespace

void dueling_forward(float* out, const float* value, const float* adv, std::int64_t batch, std::int64_t branches,
                     std::int64_t actions, std::int64_t atoms, cudaStream_t stream) {
  check_dims("dueling_forward", batch, branches, actions, atoms);
  if (batch == 0) return;
  FH_EXPECT(out && value && adv, "dueling_forward: null pointer");
  const std::int64_t n = batch * branches * atoms;
  dueling_forward_kernel<<<gpu::grid_stride_blocks(n), gpu::kBlock, 0, stream>>>(out, value, adv, batch, branches,
                                                                                 actions, atoms);
  FH_CHECK_LAUNCH();
}

void dueling_backward(float* d_value, float* d_adv, const float* d_out, std::int64_t batch, std::int64_t branches,
                      std::int64_t actions, std::int64_t atoms, cudaStream_t stream) {
  check_dims("dueling_backward", batch, branches, actions, atoms);
  if (batch == 0) return;
  FH_EXPECT(d_value && d_adv && d_out, "dueling_backward: null pointer");
  const std::int64_t n = batch * atoms;
  dueling_backward_kernel<<<gpu::grid_stride_blocks(n), gpu::kBlock, 0, stream>>>(d_value, d_adv, d_out, batch,
                                                                                  branches, actions, atoms);
  FH_CHECK_LAUNCH();
}

}  // namespace foxhunt::models
