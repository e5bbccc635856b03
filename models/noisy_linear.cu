#include "models/noisy_linear.hpp"

#include <string>

#include "gpu/check.hpp"
#include "gpu/launch.cuh"
#include "gpu/philox.cuh"

namespace foxhunt::models {
namespace {

__device__ __forceinline__ float signed_sqrt(float x) { return copysignf(sqrtf(fabsf(x)), x); }

__global__ void resample_kernel(float* __restrict__ f_in, float* __restrict__ f_out, std::int64_t in_f,
                                std::int64_t out_f, std::uint64_t seed, std::uint32_t stream_id,
                                const std::uint64_t* __restrict__ counter) {
  const std::uint64_t base = *counter * kNoiseCounterStride;
  const std::int64_t total = in_f + out_f;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride) {
    const float4 z = gpu::normal4(seed, stream_id, base + static_cast<std::uint64_t>(i / 4));
    const int lane = static_cast<int>(i % 4);
    const float e = lane == 0 ? z.x : lane == 1 ? z.y : lane == 2 ? z.z : z.w;
    if (i < in_f)
      f_in[i] = signed_sqrt(e);
    else
      f_out[i - in_f] = signed_sqrt(e);
  }
}

__global__ void compose_kernel(float* __restrict__ w, float* __restrict__ b, const float* __restrict__ w_mu,
                               const float* __restrict__ w_sigma, const float* __restrict__ b_mu,
                               const float* __restrict__ b_sigma, const float* __restrict__ f_in,
                               const float* __restrict__ f_out, std::int64_t in_f, std::int64_t out_f) {
  const std::int64_t n = in_f * out_f;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n + out_f; i += stride) {
    if (i < n) {
      const std::int64_t o = i / in_f, k = i - o * in_f;
      w[i] = fmaf(w_sigma[i], f_out[o] * f_in[k], w_mu[i]);
    } else {
      const std::int64_t o = i - n;
      b[o] = fmaf(b_sigma[o], f_out[o], b_mu[o]);
    }
  }
}

__global__ void param_grads_kernel(float* __restrict__ d_w_mu, float* __restrict__ d_w_sigma,
                                   float* __restrict__ d_b_mu, float* __restrict__ d_b_sigma,
                                   const float* __restrict__ d_w, const float* __restrict__ d_b,
                                   const float* __restrict__ f_in, const float* __restrict__ f_out, std::int64_t in_f,
                                   std::int64_t out_f) {
  const std::int64_t n = in_f * out_f;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n + out_f; i += stride) {
    if (i < n) {
      const std::int64_t o = i / in_f, k = i - o * in_f;
      const float g = d_w[i];
      d_w_mu[i] = g;
      d_w_sigma[i] = g * (f_out[o] * f_in[k]);
    } else {
      const std::int64_t o = i - n;
      const float g = d_b[o];
      d_b_mu[o] = g;
      d_b_sigma[o] = g * f_out[o];
    }
  }
}

void check_sizes(const char* fn, std::int64_t in_f, std::int64_t out_f) {
  FH_EXPECT(in_f >= 1 && out_f >= 1, std::string(fn) + ": in_features and out_features must be >= 1, got " +
                                         std::to_string(in_f) + ", " + std::to_string(out_f));
}

}  // namespace

void noisy_resample(float* f_eps_in, float* f_eps_out, std::int64_t in_features, std::int64_t out_features,
                    std::uint64_t seed, std::uint32_t stream_id, const std::uint64_t* counter, cudaStream_t stream) {
  check_sizes("noisy_resample", in_features, out_features);
  FH_EXPECT(static_cast<std::uint64_t>(in_features + out_features) <= 4 * kNoiseCounterStride,
            "noisy_resample: in_features + out_features must be <= 4 * kNoiseCounterStride");
  FH_EXPECT(f_eps_in && f_eps_out && counter, "noisy_resample: null pointer");
  const std::int64_t total = in_features + out_features;
  resample_kernel<<<gpu::grid_stride_blocks(total), gpu::kBlock, 0, stream>>>(f_eps_in, f_eps_out, in_features,
                                                                              out_features, seed, stream_id, counter);
  FH_CHECK_LAUNCH();
}

void noisy_compose(float* weight, float* bias, const float* w_mu, const float* w_sigma, const float* b_mu,
                   const float* b_sigma, const float* f_eps_in, const float* f_eps_out, std::int64_t in_features,
                   std::int64_t out_features, cudaStream_t stream) {
  check_sizes("noisy_compose", in_features, out_features);
  FH_EXPECT(weight && bias && w_mu && w_sigma && b_mu && b_sigma && f_eps_in && f_eps_out,
            "noisy_compose: null pointer");
  const std::int64_t total = in_features * out_features + out_features;
  compose_kernel<<<gpu::grid_stride_blocks(total), gpu::kBlock, 0, stream>>>(
      weight, bias, w_mu, w_sigma, b_mu, b_sigma, f_eps_in, f_eps_out, in_features, out_features);
  FH_CHECK_LAUNCH();
}

void noisy_param_grads(float* d_w_mu, float* d_w_sigma, float* d_b_mu, float* d_b_sigma, const float* d_weight,
                       const float* d_bias, const float* f_eps_in, const float* f_eps_out, std::int64_t in_features,
                       std::int64_t out_features, cudaStream_t stream) {
  check_sizes("noisy_param_grads", in_features, out_features);
  FH_EXPECT(d_w_mu && d_w_sigma && d_b_mu && d_b_sigma && d_weight && d_bias && f_eps_in && f_eps_out,
            "noisy_param_grads: null pointer");
  const std::int64_t total = in_features * out_features + out_features;
  param_grads_kernel<<<gpu::grid_stride_blocks(total), gpu::kBlock, 0, stream>>>(
      d_w_mu, d_w_sigma, d_b_mu, d_b_sigma, d_weight, d_bias, f_eps_in, f_eps_out, in_features, out_features);
  FH_CHECK_LAUNCH();
}

}  // namespace foxhunt::models
