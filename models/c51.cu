#include "models/c51.hpp"

#include <cmath>
#include <string>

#include "gpu/check.hpp"
#include "gpu/launch.cuh"

namespace foxhunt::models {
namespace {

__device__ __forceinline__ float atom(std::int64_t i, float v_min, float dz) {
  return v_min + static_cast<float>(i) * dz;
}

__global__ void expectation_kernel(float* __restrict__ q, const float* __restrict__ probs, std::int64_t rows,
                                   std::int64_t atoms, float v_min, float dz) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t r = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; r < rows; r += stride) {
    const float* p = probs + r * atoms;
    float s = 0.f;
    for (std::int64_t i = 0; i < atoms; ++i) s = fmaf(p[i], atom(i, v_min, dz), s);
    q[r] = s;
  }
}

__global__ void project_kernel(float* __restrict__ m, const float* __restrict__ next_probs,
                               const std::int32_t* __restrict__ next_actions, const float* __restrict__ returns,
                               const float* __restrict__ discounts, std::int64_t batch, std::int64_t actions,
                               std::int64_t atoms, float v_min, float v_max, float dz) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t b = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; b < batch; b += stride) {
    float* mb = m + b * atoms;
    for (std::int64_t i = 0; i < atoms; ++i) mb[i] = 0.f;
    const float* p = next_probs + (b * actions + next_actions[b]) * atoms;
    const float r = returns[b], g = discounts[b];
    if (!isfinite(r) || !isfinite(g)) {
      // The clamps below would map a NaN target onto the support: poison the row instead, so the
      // loss turns non-finite and the learner's guard skips the update.
      for (std::int64_t i = 0; i < atoms; ++i) mb[i] = r + g;
      continue;
    }
    const float top = static_cast<float>(atoms - 1);
    for (std::int64_t j = 0; j < atoms; ++j) {
      const float tz = fminf(fmaxf(r + g * atom(j, v_min, dz), v_min), v_max);
      const float x = fminf(fmaxf((tz - v_min) / dz, 0.f), top);  // rounding may step outside [0, Z-1]
      const float lf = floorf(x), uf = ceilf(x);
      const auto l = static_cast<std::int64_t>(lf), u = static_cast<std::int64_t>(uf);
      if (l == u) {
        mb[l] += p[j];
      } else {
        mb[l] += p[j] * (uf - x);
        mb[u] += p[j] * (x - lf);
      }
    }
  }
}

__global__ void cross_entropy_kernel(float* __restrict__ d_logits, float* __restrict__ sample_loss,
                                     const float* __restrict__ logits, const std::int32_t* __restrict__ acts,
                                     const float* __restrict__ m, const float* __restrict__ weights, std::int64_t batch,
                                     std::int64_t actions, std::int64_t atoms) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t b = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; b < batch; b += stride) {
    const std::int64_t row = (b * actions + acts[b]) * atoms;
    const float* x = logits + row;
    const float* mb = m + b * atoms;
    float mx = x[0];
    for (std::int64_t i = 1; i < atoms; ++i) mx = fmaxf(mx, x[i]);
    float se = 0.f;
    for (std::int64_t i = 0; i < atoms; ++i) se += expf(x[i] - mx);
    const float lse = mx + logf(se);
    float loss = 0.f;
    const float scale = (weights ? weights[b] : 1.f) / static_cast<float>(batch);
    for (std::int64_t i = 0; i < atoms; ++i) {
      loss -= mb[i] * (x[i] - lse);
      d_logits[row + i] = scale * (expf(x[i] - lse) - mb[i]);
    }
    sample_loss[b] = loss;
  }
}

void check_support(const char* fn, std::int64_t atoms, float v_min, float v_max) {
  FH_EXPECT(atoms >= 2, std::string(fn) + ": atoms must be >= 2, got " + std::to_string(atoms));
  FH_EXPECT(
      std::isfinite(v_min) && std::isfinite(v_max) && v_min < v_max,
      std::string(fn) + ": need finite v_min < v_max, got " + std::to_string(v_min) + ", " + std::to_string(v_max));
}

float delta_z(std::int64_t atoms, float v_min, float v_max) {
  return static_cast<float>((static_cast<double>(v_max) - v_min) / static_cast<double>(atoms - 1));
}

}  // namespace

void c51_expectation(float* q, const float* probs, std::int64_t rows, std::int64_t atoms, float v_min, float v_max,
                     cudaStream_t stream) {
  check_support("c51_expectation", atoms, v_min, v_max);
  FH_EXPECT(rows >= 0, "c51_expectation: rows must be >= 0");
  if (rows == 0) return;
  expectation_kernel<<<gpu::grid_stride_blocks(rows), gpu::kBlock, 0, stream>>>(q, probs, rows, atoms, v_min,
                                                                                delta_z(atoms, v_min, v_max));
  FH_CHECK_LAUNCH();
}

void c51_project(float* m, const float* next_probs, const std::int32_t* next_actions, const float* returns,
                 const float* discounts, std::int64_t batch, std::int64_t actions, std::int64_t atoms, float v_min,
                 float v_max, cudaStream_t stream) {
  check_support("c51_project", atoms, v_min, v_max);
  FH_EXPECT(batch >= 0 && actions >= 1, "c51_project: need batch >= 0 and actions >= 1");
  if (batch == 0) return;
  FH_EXPECT(m && next_probs && next_actions && returns && discounts, "c51_project: null pointer");
  project_kernel<<<gpu::grid_stride_blocks(batch, 128), 128, 0, stream>>>(m, next_probs, next_actions, returns,
                                                                          discounts, batch, actions, atoms, v_min,
                                                                          v_max, delta_z(atoms, v_min, v_max));
  FH_CHECK_LAUNCH();
}

void c51_cross_entropy(float* d_logits, float* sample_loss, const float* logits, const std::int32_t* actions,
                       const float* m, const float* weights, std::int64_t batch, std::int64_t actions_count,
                       std::int64_t atoms, cudaStream_t stream) {
  FH_EXPECT(batch >= 0 && actions_count >= 1 && atoms >= 2,
            "c51_cross_entropy: need batch >= 0, actions >= 1, atoms >= 2");
  if (batch == 0) return;
  FH_EXPECT(d_logits && sample_loss && logits && actions && m, "c51_cross_entropy: null pointer");
  FH_CHECK(
      cudaMemsetAsync(d_logits, 0, static_cast<std::size_t>(batch * actions_count * atoms) * sizeof(float), stream));
  cross_entropy_kernel<<<gpu::grid_stride_blocks(batch, 128), 128, 0, stream>>>(
      d_logits, sample_loss, logits, actions, m, weights, batch, actions_count, atoms);
  FH_CHECK_LAUNCH();
}

}  // namespace foxhunt::models
