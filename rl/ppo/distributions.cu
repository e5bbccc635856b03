#include "rl/ppo/distributions.hpp"

#include <cmath>
#include <string>

#include "gpu/check.hpp"
#include "gpu/launch.cuh"
#include "gpu/philox.cuh"
#include "rl/ppo/heads.cuh"

namespace foxhunt::rl::ppo {
namespace {

using heads::for_each_row;
using heads::group_sum;
using heads::kPerLane;

__global__ void sample_kernel(std::int32_t* __restrict__ discrete, float* __restrict__ raw,
                              float* __restrict__ env_actions, float* __restrict__ logp, const float* __restrict__ head,
                              const float* __restrict__ log_std, std::int64_t rows, HeadShape shape, int lanes,
                              std::uint64_t seed, std::uint32_t stream_id, const std::uint64_t* __restrict__ step_ptr) {
  const std::uint64_t step = *step_ptr;
  const int width = shape.width(), aw = shape.action_width();
  for_each_row(rows, lanes, [&](std::int64_t row, int sub, bool valid) {
    float lp = 0.f;
    if (valid) {
      const std::uint64_t c = step * static_cast<std::uint64_t>(rows) + static_cast<std::uint64_t>(row);
      const float* h = head + row * width;
      for (int j = 0; j < kPerLane; ++j) {
        const int b = sub + j * lanes;
        if (b >= aw) break;
        lp += heads::sample_branch(discrete + row * aw, raw + row * aw, env_actions + row * aw, h, log_std, b,
                                   shape, seed, stream_id, c);
      }
    }
    lp = group_sum(lp, lanes);
    if (valid && sub == 0 && logp) logp[row] = lp;
  });
}

__global__ void greedy_kernel(std::int32_t* __restrict__ discrete, float* __restrict__ env_actions,
                              const float* __restrict__ head, std::int64_t rows, HeadShape shape) {
  const int aw = shape.action_width();
  const std::int64_t n = rows * aw;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t e = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < n; e += stride) {
    if (shape.gaussian()) {
      env_actions[e] = heads::bound_action(head[e], shape);
    } else {
      const float* l = head + e * shape.choices;  // (row, branch) e: branch-major logits
      std::int32_t best = 0;
      float bv = l[0];
      for (int k = 1; k < shape.choices; ++k)
        if (l[k] > bv) {  // strict: ties keep the lowest index
          bv = l[k];
          best = k;
        }
      discrete[e] = best;
    }
  }
}

__global__ void log_prob_entropy_kernel(float* __restrict__ logp, float* __restrict__ entropy,
                                        const float* __restrict__ head, const float* __restrict__ log_std,
                                        const std::int32_t* __restrict__ discrete, const float* __restrict__ raw,
                                        std::int64_t rows, HeadShape shape, int lanes) {
  const int width = shape.width(), aw = shape.action_width();
  for_each_row(rows, lanes, [&](std::int64_t row, int sub, bool valid) {
    float lp = 0.f, ent = 0.f;
    if (valid) {
      const float* h = head + row * width;
      for (int j = 0; j < kPerLane; ++j) {
        const int b = sub + j * lanes;
        if (b >= aw) break;
        if (!shape.gaussian()) {
          const float* l = h + b * shape.choices;
          const heads::Branch st = heads::categorical_branch(l, shape.choices);
          if (logp) lp += heads::categorical_logp(l, shape.choices, st, discrete[row * aw + b]);
          ent += st.entropy;
        } else {
          const float ls = log_std[b];
          if (logp) lp += heads::gaussian_logp(raw[row * aw + b], h[b], ls, shape);
          ent += heads::gaussian_entropy(ls);
        }
      }
    }
    lp = group_sum(lp, lanes);
    ent = group_sum(ent, lanes);
    if (valid && sub == 0) {
      if (logp) logp[row] = lp;
      if (entropy) entropy[row] = ent;
    }
  });
}

int row_grid(std::int64_t rows, int lanes) {
  const std::int64_t per_block = heads::rows_per_block(lanes);
  return gpu::grid_stride_blocks((rows + per_block - 1) / per_block * gpu::kBlock);
}

}  // namespace

void check_head_shape(const HeadShape& s, const char* who) {
  const std::string fn(who);
  if (s.gaussian()) {
    FH_EXPECT(
        s.dim >= 1 && s.dim <= kMaxHeadLanes,
        fn + ": gaussian head needs 1 <= dim <= " + std::to_string(kMaxHeadLanes) + "; got " + std::to_string(s.dim));
    FH_EXPECT(
        std::isfinite(s.low) && std::isfinite(s.high) && s.low < s.high,
        fn + ": gaussian head needs finite low < high; got " + std::to_string(s.low) + ", " + std::to_string(s.high));
  } else {
    FH_EXPECT(s.branches >= 1 && s.branches <= kMaxHeadLanes && s.choices >= 1,
              fn + ": categorical head needs 1 <= branches <= " + std::to_string(kMaxHeadLanes) +
                  " and choices >= 1; got " + std::to_string(s.branches) + ", " + std::to_string(s.choices));
  }
}

void sample_actions(std::int32_t* discrete, float* raw, float* env_actions, float* logp, const float* head_out,
                    const float* log_std, std::int64_t rows, const HeadShape& shape, std::uint64_t seed,
                    std::uint32_t stream_id, const std::uint64_t* step, cudaStream_t stream) {
  check_head_shape(shape, "sample_actions");
  FH_EXPECT(rows >= 0, "sample_actions: rows must be >= 0");
  if (rows == 0) return;
  FH_EXPECT(head_out && step, "sample_actions: null head_out or step");
  if (shape.gaussian())
    FH_EXPECT(raw && env_actions && log_std, "sample_actions: gaussian needs raw, env_actions and log_std");
  else
    FH_EXPECT(discrete, "sample_actions: categorical needs discrete");
  const int lanes = heads::lanes_per_row(shape);
  sample_kernel<<<row_grid(rows, lanes), gpu::kBlock, 0, stream>>>(discrete, raw, env_actions, logp, head_out, log_std,
                                                                   rows, shape, lanes, seed, stream_id, step);
  FH_CHECK_LAUNCH();
}

void greedy_actions(std::int32_t* discrete, float* env_actions, const float* head_out, std::int64_t rows,
                    const HeadShape& shape, cudaStream_t stream) {
  check_head_shape(shape, "greedy_actions");
  FH_EXPECT(rows >= 0, "greedy_actions: rows must be >= 0");
  if (rows == 0) return;
  FH_EXPECT(head_out, "greedy_actions: null head_out");
  FH_EXPECT(shape.gaussian() ? env_actions != nullptr : discrete != nullptr,
            "greedy_actions: null output (discrete for categorical, env_actions for gaussian)");
  greedy_kernel<<<gpu::grid_stride_blocks(rows * shape.action_width()), gpu::kBlock, 0, stream>>>(
      discrete, env_actions, head_out, rows, shape);
  FH_CHECK_LAUNCH();
}

void log_prob_entropy(float* logp, float* entropy, const float* head_out, const float* log_std,
                      const std::int32_t* discrete, const float* raw, std::int64_t rows, const HeadShape& shape,
                      cudaStream_t stream) {
  check_head_shape(shape, "log_prob_entropy");
  FH_EXPECT(rows >= 0, "log_prob_entropy: rows must be >= 0");
  if (rows == 0 || (!logp && !entropy)) return;
  FH_EXPECT(head_out, "log_prob_entropy: null head_out");
  if (shape.gaussian())
    FH_EXPECT(log_std && (raw || !logp), "log_prob_entropy: gaussian needs log_std (and raw for logp)");
  else
    FH_EXPECT(discrete || !logp, "log_prob_entropy: categorical logp needs discrete");
  const int lanes = heads::lanes_per_row(shape);
  log_prob_entropy_kernel<<<row_grid(rows, lanes), gpu::kBlock, 0, stream>>>(logp, entropy, head_out, log_std, discrete,
                                                                             raw, rows, shape, lanes);
  FH_CHECK_LAUNCH();
}

}  // namespace foxhunt::rl::ppo
