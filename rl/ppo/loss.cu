#include "rl/ppo/loss.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "gpu/check.hpp"
#include "gpu/launch.cuh"
#include "gpu/reduce.cuh"
#include "rl/ppo/heads.cuh"

namespace foxhunt::rl::ppo {
namespace {

using heads::for_each_row;
using heads::group_sum;
using heads::kPerLane;

// Fixed caps on the first-pass grids (not derived from the SM count), so that the sums, and the
// workspace, depend only on B and the shape.
inline constexpr int kMaxBlocks = 512;
inline constexpr int kStats = 4;  // per-block partials: pg, entropy, approx_kl, clipped rows
inline constexpr int kValueThreads = 1024;

bool aligned16(const void* p) { return (reinterpret_cast<std::uintptr_t>(p) & 15u) == 0; }

int adv_blocks(std::int64_t rows) {
  return static_cast<int>(std::clamp<std::int64_t>((rows + gpu::kBlock - 1) / gpu::kBlock, 1, kMaxBlocks));
}
int loss_blocks(std::int64_t rows, int lanes) {
  const std::int64_t per_block = heads::rows_per_block(lanes);
  return static_cast<int>(std::clamp<std::int64_t>((rows + per_block - 1) / per_block, 1, kMaxBlocks));
}

// Workspace layout: [mean, denominator] (16 bytes), advantage partials (2 doubles a block), row
// partials (kStats + dim doubles a block).
struct Workspace {
  float* norm;
  double* adv_partials;
  double* row_partials;
};
Workspace carve(void* ws, std::int64_t rows) {
  auto* base = static_cast<unsigned char*>(ws);
  Workspace w;
  w.norm = reinterpret_cast<float*>(base);
  w.adv_partials = reinterpret_cast<double*>(base + 16);
  w.row_partials = w.adv_partials + 2 * static_cast<std::size_t>(adv_blocks(rows));
  return w;
}

// Shifted sums of the advantages (shift adv[0]: no cancellation when |mean| >> std), in double.
__global__ void adv_partials_kernel(double* __restrict__ partials, const float* __restrict__ adv, std::int64_t rows) {
  __shared__ double scratch[32];
  const double shift = adv[0];
  double s1 = 0, s2 = 0;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < rows; i += stride) {
    const double d = static_cast<double>(adv[i]) - shift;
    s1 += d;
    s2 += d * d;
  }
  s1 = gpu::block_sum(s1, scratch);
  s2 = gpu::block_sum(s2, scratch);
  if (threadIdx.x == 0) {
    partials[2 * blockIdx.x] = s1;
    partials[2 * blockIdx.x + 1] = s2;
  }
}

// norm = {mean, std + 1e-8} (std unbiased).
__global__ void adv_finish_kernel(float* __restrict__ norm, const double* __restrict__ partials, int count,
                                  const float* __restrict__ adv, std::int64_t rows) {
  __shared__ double scratch[32];
  double s1 = 0, s2 = 0;
  for (int k = threadIdx.x; k < count; k += blockDim.x) {
    s1 += partials[2 * k];
    s2 += partials[2 * k + 1];
  }
  s1 = gpu::block_sum(s1, scratch);
  s2 = gpu::block_sum(s2, scratch);
  if (threadIdx.x == 0) {
    const double n = static_cast<double>(rows);
    const double var = fmax((s2 - s1 * s1 / n) / (n - 1.0), 0.0);
    norm[0] = static_cast<float>(static_cast<double>(adv[0]) + s1 / n);
    norm[1] = static_cast<float>(sqrt(var)) + 1e-8f;
  }
}

// One pass over the rows: log-prob, entropy, ratio, gradient into d_head; per-block partials of the
// statistics and of d loss / d log_std (before the 1/B and the entropy term).
__global__ void policy_rows_kernel(float* __restrict__ d_head, double* __restrict__ partials,
                                   const float* __restrict__ head, const float* __restrict__ log_std,
                                   const std::int32_t* __restrict__ discrete, const float* __restrict__ raw,
                                   const float* __restrict__ old_logp, const float* __restrict__ adv,
                                   const float* __restrict__ norm, std::int64_t rows, HeadShape shape, int lanes,
                                   float clip_eps, float ent_coef) {
  __shared__ double scratch[32];
  __shared__ double dls_shared[gpu::kBlock * kPerLane];
  const int width = shape.width(), aw = shape.action_width(), choices = shape.choices;
  const float inv_b = 1.f / static_cast<float>(rows);
  const float mean = norm ? norm[0] : 0.f, denom = norm ? norm[1] : 1.f;
  double acc[kStats] = {0, 0, 0, 0};
  double dls[kPerLane] = {};
  for_each_row(rows, lanes, [&](std::int64_t row, int sub, bool valid) {
    heads::Branch st[kPerLane];
    float lp = 0.f, ent = 0.f;
    const float* h = head + row * width;
    if (valid) {
#pragma unroll
      for (int j = 0; j < kPerLane; ++j) {
        const int b = sub + j * lanes;
        if (b < aw) {
          if (!shape.gaussian()) {
            const float* l = h + b * choices;
            st[j] = heads::categorical_branch(l, choices);
            lp += heads::categorical_logp(l, choices, st[j], discrete[row * aw + b]);
            ent += st[j].entropy;
          } else {
            const float ls = log_std[b];
            lp += heads::gaussian_logp(raw[row * aw + b], h[b], ls, shape);
            ent += heads::gaussian_entropy(ls);
          }
        }
      }
    }
    lp = group_sum(lp, lanes);
    ent = group_sum(ent, lanes);
    if (!valid) return;
    const float a = norm ? (adv[row] - mean) / denom : adv[row];
    const float log_ratio = lp - old_logp[row];
    const float r = expf(log_ratio);
    float pg;
    const float slope = heads::surrogate_slope(a, r, clip_eps, &pg);
    const float coef = slope * r * inv_b;  // d loss / d logp_new of this row
    if (sub == 0) {
      acc[0] += pg;
      acc[1] += ent;
      acc[2] += (r - 1.f) - log_ratio;
      acc[3] += fabsf(r - 1.f) > clip_eps ? 1.0 : 0.0;
    }
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      const int b = sub + j * lanes;
      if (b >= aw) continue;
      if (!shape.gaussian()) {
        const float* l = h + b * choices;
        const std::int32_t act = discrete[row * aw + b];
        const float ent_scale = ent_coef * inv_b;
        float* d = d_head ? d_head + row * width + b * choices : nullptr;
        for (int k = 0; k < choices && d; ++k) {
          const float logp_k = (l[k] - st[j].max) - st[j].log_z;
          const float p = expf(logp_k);
          // -ent_coef * dH/dl_k = ent_coef * p (log p + H); a p of 0 (masked choice) adds nothing.
          const float ent_term = p > 0.f ? ent_scale * p * (logp_k + st[j].entropy) : 0.f;
          d[k] = coef * ((k == act ? 1.f : 0.f) - p) + ent_term;
        }
      } else {
        const float inv_std = 1.f / expf(log_std[b]);
        const float z = (raw[row * aw + b] - h[b]) * inv_std;
        if (d_head) d_head[row * width + b] = coef * z * inv_std;
        dls[j] += static_cast<double>(slope * r) * (static_cast<double>(z) * z - 1.0);
      }
    }
  });
  double* out = partials + static_cast<std::size_t>(blockIdx.x) * (kStats + shape.dim * shape.gaussian());
#pragma unroll
  for (int k = 0; k < kStats; ++k) {
    const double s = gpu::block_sum(acc[k], scratch);
    if (threadIdx.x == 0) out[k] = s;
  }
  if (shape.gaussian()) {
    // Lane sub of group g holds dimensions sub + j * lanes: add the groups in order.
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) dls_shared[threadIdx.x * kPerLane + j] = dls[j];
    __syncthreads();
    const int groups = blockDim.x / lanes;
    for (int d = threadIdx.x; d < shape.dim; d += blockDim.x) {
      const int sub = d % lanes, j = d / lanes;
      double s = 0;
      for (int g = 0; g < groups; ++g) s += dls_shared[(g * lanes + sub) * kPerLane + j];
      out[kStats + d] = s;
    }
  }
}

// Adds the block partials column by column in block order; updates the stats and writes d_log_std.
__global__ void policy_finish_kernel(LossStats* __restrict__ stats, float* __restrict__ d_log_std,
                                     const double* __restrict__ partials, int blocks, int dim, std::int64_t rows,
                                     float ent_coef) {
  __shared__ double sums[kStats];
  const int cols = kStats + dim;
  const double inv_b = 1.0 / static_cast<double>(rows);
  for (int c = threadIdx.x; c < cols; c += blockDim.x) {
    double s = 0;
    for (int k = 0; k < blocks; ++k) s += partials[static_cast<std::size_t>(k) * cols + c];
    if (c < kStats)
      sums[c] = s;
    else if (d_log_std)
      d_log_std[c - kStats] = static_cast<float>(s * inv_b - static_cast<double>(ent_coef));
  }
  __syncthreads();
  if (threadIdx.x == 0 && stats) {
    const float kl = static_cast<float>(sums[2] * inv_b);
    stats->policy_loss += static_cast<float>(sums[0] * inv_b);
    stats->entropy += static_cast<float>(sums[1] * inv_b);
    stats->approx_kl += kl;
    stats->clip_fraction += static_cast<float>(sums[3] * inv_b);
    stats->last_approx_kl = kl;
    stats->minibatches += 1;
  }
}

__global__ void value_loss_kernel(float* __restrict__ d_values, LossStats* __restrict__ stats,
                                  const float* __restrict__ values, const float* __restrict__ old_values,
                                  const float* __restrict__ returns, std::int64_t rows, float clip_eps, bool clip,
                                  float vf_coef) {
  __shared__ double scratch[32];
  const float grad_scale = vf_coef * 0.5f / static_cast<float>(rows);
  double acc = 0;
  for (std::int64_t i = threadIdx.x; i < rows; i += blockDim.x) {
    float l;
    const float g = heads::value_term(values[i], clip ? old_values[i] : 0.f, returns[i], clip_eps, clip, &l);
    acc += l;
    if (d_values) d_values[i] = g * grad_scale;
  }
  acc = gpu::block_sum(acc, scratch);
  if (threadIdx.x == 0 && stats) stats->value_loss += static_cast<float>(0.5 * acc / static_cast<double>(rows));
}

}  // namespace

void zero_loss_stats(LossStats* stats, cudaStream_t stream) {
  FH_EXPECT(stats, "zero_loss_stats: null stats");
  FH_CHECK(cudaMemsetAsync(stats, 0, sizeof(LossStats), stream));
}

std::size_t policy_loss_workspace_bytes(std::int64_t max_rows, const HeadShape& shape) {
  check_head_shape(shape, "policy_loss_workspace_bytes");
  FH_EXPECT(max_rows >= 0, "policy_loss_workspace_bytes: max_rows must be >= 0");
  const std::size_t cols = kStats + (shape.gaussian() ? shape.dim : 0);
  return 16 + sizeof(double) * (2 * static_cast<std::size_t>(adv_blocks(max_rows)) +
                                cols * static_cast<std::size_t>(loss_blocks(max_rows, heads::lanes_per_row(shape))));
}

void ppo_policy_loss(float* d_head, float* d_log_std, LossStats* stats, const float* head_out, const float* log_std,
                     const std::int32_t* discrete, const float* raw, const float* old_logp, const float* advantages,
                     std::int64_t rows, const HeadShape& shape, float clip_eps, float ent_coef, bool normalize,
                     void* workspace, cudaStream_t stream) {
  check_head_shape(shape, "ppo_policy_loss");
  FH_EXPECT(rows >= 1, "ppo_policy_loss: rows must be >= 1; got " + std::to_string(rows));
  FH_EXPECT(!normalize || rows >= 2, "ppo_policy_loss: advantage normalization needs rows >= 2");
  FH_EXPECT(clip_eps >= 0.f, "ppo_policy_loss: clip_eps must be >= 0");
  FH_EXPECT(head_out && old_logp && advantages && workspace, "ppo_policy_loss: null pointer");
  FH_EXPECT(aligned16(workspace), "ppo_policy_loss: workspace must be 16-byte aligned");
  if (shape.gaussian())
    FH_EXPECT(log_std && raw, "ppo_policy_loss: gaussian needs log_std and raw");
  else
    FH_EXPECT(discrete, "ppo_policy_loss: categorical needs discrete");
  const Workspace ws = carve(workspace, rows);
  if (normalize) {
    const int blocks = adv_blocks(rows);
    adv_partials_kernel<<<blocks, gpu::kBlock, 0, stream>>>(ws.adv_partials, advantages, rows);
    FH_CHECK_LAUNCH();
    adv_finish_kernel<<<1, gpu::kBlock, 0, stream>>>(ws.norm, ws.adv_partials, blocks, advantages, rows);
    FH_CHECK_LAUNCH();
  }
  const int lanes = heads::lanes_per_row(shape);
  const int blocks = loss_blocks(rows, lanes);
  policy_rows_kernel<<<blocks, gpu::kBlock, 0, stream>>>(d_head, ws.row_partials, head_out, log_std, discrete, raw,
                                                         old_logp, advantages, normalize ? ws.norm : nullptr, rows,
                                                         shape, lanes, clip_eps, ent_coef);
  FH_CHECK_LAUNCH();
  policy_finish_kernel<<<1, gpu::kBlock, 0, stream>>>(stats, shape.gaussian() ? d_log_std : nullptr, ws.row_partials,
                                                      blocks, shape.gaussian() ? shape.dim : 0, rows, ent_coef);
  FH_CHECK_LAUNCH();
}

void ppo_value_loss(float* d_values, LossStats* stats, const float* values, const float* old_values,
                    const float* returns, std::int64_t rows, float clip_eps, bool clip, float vf_coef,
                    cudaStream_t stream) {
  FH_EXPECT(rows >= 1, "ppo_value_loss: rows must be >= 1; got " + std::to_string(rows));
  FH_EXPECT(clip_eps >= 0.f, "ppo_value_loss: clip_eps must be >= 0");
  FH_EXPECT(values && returns && (old_values || !clip), "ppo_value_loss: null pointer");
  value_loss_kernel<<<1, kValueThreads, 0, stream>>>(d_values, stats, values, old_values, returns, rows, clip_eps, clip,
                                                     vf_coef);
  FH_CHECK_LAUNCH();
}

}  // namespace foxhunt::rl::ppo
