#pragma once
// Factorised Gaussian noise for NoisyNet layers (Fortunato et al. 2018):
//   W = W_mu + W_sigma ⊙ (f(eps_out) ⊗ f(eps_in)),  b = b_mu + b_sigma ⊙ f(eps_out),
//   f(x) = sgn(x) sqrt(|x|), eps ~ N(0, 1).
// Only the in + out factors are stored (already passed through f). The noise is drawn on the device
// from Philox keyed by (seed, stream_id, *counter): the counter lives in device memory, so a captured
// graph resamples fresh noise on every replay once the caller advances the counter.
#include <cuda_runtime.h>

#include <cstdint>

namespace foxhunt::models {

// Philox counters one resample may use per layer: noise counter c covers
// [c * kNoiseCounterStride, (c + 1) * kNoiseCounterStride), i.e. up to 4 * stride factors.
inline constexpr std::uint64_t kNoiseCounterStride = std::uint64_t{1} << 20;

// f_eps_in (in), f_eps_out (out) = f(N(0,1)) from Philox(seed, stream_id, *counter * stride + i / 4);
// factor i of the concatenation [eps_in, eps_out] uses lane i % 4. in + out <= 4 * stride.
void noisy_resample(float* f_eps_in, float* f_eps_out, std::int64_t in_features, std::int64_t out_features,
                    std::uint64_t seed, std::uint32_t stream_id, const std::uint64_t* counter, cudaStream_t stream);

// weight (out, in) = w_mu + w_sigma * f_eps_out[o] * f_eps_in[i]; bias (out) = b_mu + b_sigma * f_eps_out.
void noisy_compose(float* weight, float* bias, const float* w_mu, const float* w_sigma, const float* b_mu,
                   const float* b_sigma, const float* f_eps_in, const float* f_eps_out, std::int64_t in_features,
                   std::int64_t out_features, cudaStream_t stream);

// Chain rule from the composed layer's gradients (overwrites):
//   d_w_mu = d_weight, d_w_sigma = d_weight * f_eps_out[o] * f_eps_in[i],
//   d_b_mu = d_bias,   d_b_sigma = d_bias * f_eps_out.
void noisy_param_grads(float* d_w_mu, float* d_w_sigma, float* d_b_mu, float* d_b_sigma, const float* d_weight,
                       const float* d_bias, const float* f_eps_in, const float* f_eps_out, std::int64_t in_features,
                       std::int64_t out_features, cudaStream_t stream);

}  // namespace foxhunt::models
