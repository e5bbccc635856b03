#pragma once
// The training side of a DDPM: noised inputs and the epsilon-prediction loss.
//
//   t_b  ~ uniform{0 .. T-1}, eps ~ N(0, I) (Philox), x_t = sqrt(ab_t) x_0 + sqrt(1 - ab_t) eps
//   L    = 1/(B D) sum (eps_hat - eps)^2,  dL/deps_hat = 2 (eps_hat - eps) / (B D)   (gpu/loss mse)
//
// Randomness (gpu/philox.cuh), a pure function of (seed, c = *counter, row b, element j), never of
// the batch size or the grid:
//   t_b:   stream (kTimestepTag << 24 | b), counter c, t = (bits.x * T) >> 32
//   eps:   stream (kNoiseTag << 24 | b), counter (c << 16 | j / 4), lane j % 4 of normal4
// Limits: b < 2^24, D <= 2^18 (j / 4 < 2^16), c < 2^48.
#include <cuda_runtime.h>

#include <cstdint>

#include "models/diffusion/schedule.hpp"

namespace foxhunt::models {

inline constexpr std::uint32_t kTimestepTag = 0xD1;
inline constexpr std::uint32_t kNoiseTag = 0xD2;
inline constexpr std::int64_t kMaxDiffusionDim = std::int64_t{1} << 18;
inline constexpr std::int64_t kMaxDiffusionBatch = std::int64_t{1} << 24;

// x_t (B, D), eps (B, D), t (B) from x0 (B, D) with the draws of (seed, *counter). counter: a
// device uint64 read, not changed.
void diffusion_noising(float* x_t, float* eps, std::int32_t* t, const float* x0, std::int64_t batch, std::int64_t dim,
                       const ScheduleView& schedule, std::uint64_t seed, const std::uint64_t* counter,
                       cudaStream_t stream);

// The same at one given step for every row (t[b] = step, in [0, T)); eps as above. The anomaly
// score's noising: a window's denoising error at a fixed noise level.
void diffusion_noising_at(float* x_t, float* eps, std::int32_t* t, const float* x0, std::int64_t batch,
                          std::int64_t dim, const ScheduleView& schedule, std::int32_t step, std::uint64_t seed,
                          const std::uint64_t* counter, cudaStream_t stream);

// The same with row 0's draws for every row (eps[b] = the eps of row 0 above): a window's noised
// form depends on the window alone, not on its row (the frozen feature extractor's noising,
// pretrain/diffusion_feature_extractor.hpp).
void diffusion_noising_shared_at(float* x_t, float* eps, std::int32_t* t, const float* x0, std::int64_t batch,
                                 std::int64_t dim, const ScheduleView& schedule, std::int32_t step, std::uint64_t seed,
                                 const std::uint64_t* counter, cudaStream_t stream);

// out (B) = 1/D sum_j (a[b, j] - b[b, j])^2, one warp per row in a fixed order (deterministic).
void row_mean_squared_error(float* out, const float* a, const float* b, std::int64_t batch, std::int64_t dim,
                            cudaStream_t stream);

// Workspace bytes of epsilon_loss for (batch, dim).
std::size_t epsilon_loss_workspace_bytes(std::int64_t batch, std::int64_t dim);
// *loss = L and d_eps_hat (B, D) = dL/deps_hat (nullable) of the prediction eps_hat against eps.
void epsilon_loss(float* loss, float* d_eps_hat, const float* eps_hat, const float* eps, std::int64_t batch,
                  std::int64_t dim, void* workspace, cudaStream_t stream);

}  // namespace foxhunt::models
