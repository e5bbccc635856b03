#include "models/fused_heads.hpp"

#include <string>

#include "gpu/check.hpp"
#include "gpu/launch.cuh"
#include "gpu/partial_sum.cuh"

namespace foxhunt::models {
namespace {

constexpr int kWarps = 8;                                    // rows (warps) per block, row kernels
constexpr int kMaxOut = static_cast<int>(kFusedHeadMaxOutputs);
constexpr int kPgRows = 16;                                  // row lanes per block, param-grad kernel

// One warp per row b: every head output o (a dot product of h[b] with W_o, lanes over H, then a
// warp sum) into shared memory, then the dueling combine with dueling_forward's arithmetic.
__global__ void __launch_bounds__(kWarps * 32)
    heads_forward_kernel(float* __restrict__ logits, const float* __restrict__ h, const float* __restrict__ vw,
                         const float* __restrict__ vb, const float* __restrict__ aw, const float* __restrict__ ab,
                         std::int64_t batch, std::int64_t hidden, std::int64_t branches, std::int64_t actions) {
  __shared__ float s_out[kWarps][kMaxOut];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const bool duel = vw != nullptr;
  const std::int64_t K = branches * actions, V = duel ? 1 : 0, O = V + K;
  for (std::int64_t b = static_cast<std::int64_t>(blockIdx.x) * kWarps + warp; b < batch;
       b += static_cast<std::int64_t>(gridDim.x) * kWarps) {  // warp-uniform
    const float* hr = h + b * hidden;
    for (std::int64_t o = 0; o < O; ++o) {
      const bool is_v = o < V;
      const float* w = is_v ? vw : aw + (o - V) * hidden;
      float acc = 0.f;
      for (std::int64_t j = lane; j < hidden; j += 32) acc = fmaf(hr[j], w[j], acc);
      acc = gpu::warp_sum(acc);  // xor butterfly: every lane holds the sum
      if (lane == 0) {
        const float* bias = is_v ? vb : ab;
        s_out[warp][o] = acc + (bias ? bias[is_v ? 0 : o - V] : 0.f);
      }
    }
    __syncwarp();
    for (std::int64_t k = lane; k < K; k += 32) {
      float out;
      if (duel) {  // out = value + (adv - mean over the branch's actions), as dueling_forward_kernel
        const std::int64_t base = V + (k / actions) * actions;
        float mean = 0.f;
        for (std::int64_t a = 0; a < actions; ++a) mean += s_out[warp][base + a];
        mean /= static_cast<float>(actions);
        out = s_out[warp][0] + (s_out[warp][V + k] - mean);
      } else {
        out = s_out[warp][k];
      }
      logits[b * K + k] = out;
    }
    __syncwarp();  // every lane has read s_out before the next row overwrites it
  }
}

// One warp per row: d_heads (dueling_backward's arithmetic for Z == 1) into shared memory and
// global, then d_h[b, j] = sum_o d_heads[o] W_o[j] (lanes over j, coalesced).
__global__ void __launch_bounds__(kWarps * 32)
    heads_backward_input_kernel(float* __restrict__ d_h, float* __restrict__ d_heads,
                                const float* __restrict__ d_logits, const float* __restrict__ vw,
                                const float* __restrict__ aw, const std::uint32_t* __restrict__ mask,
                                std::int64_t batch, std::int64_t hidden, std::int64_t branches,
                                std::int64_t actions) {
  const std::int64_t mask_ld = (hidden + 127) / 128 * 128;  // bits per row (gpu/linear's ReLU aux)
  __shared__ float s_d[kWarps][kMaxOut];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const bool duel = vw != nullptr;
  const std::int64_t K = branches * actions, V = duel ? 1 : 0, O = V + K;
  for (std::int64_t b = static_cast<std::int64_t>(blockIdx.x) * kWarps + warp; b < batch;
       b += static_cast<std::int64_t>(gridDim.x) * kWarps) {  // warp-uniform
    const float* g = d_logits + b * K;
    for (std::int64_t k = lane; k < K; k += 32) {
      if (duel) {  // d_adv = g - mean over the branch's actions
        const std::int64_t base = (k / actions) * actions;
        float sum = 0.f;
        for (std::int64_t a = 0; a < actions; ++a) sum += g[base + a];
        const float mean = sum / static_cast<float>(actions);
        s_d[warp][V + k] = g[k] - mean;
      } else {
        s_d[warp][k] = g[k];
      }
    }
    if (duel && lane == 0) {  // d_value = sum over branches of the per-branch sums (fixed order)
      float dv = 0.f;
      for (std::int64_t d = 0; d < branches; ++d) {
        float sum = 0.f;
        for (std::int64_t a = 0; a < actions; ++a) sum += g[d * actions + a];
        dv += sum;
      }
      s_d[warp][0] = dv;
    }
    __syncwarp();
    for (std::int64_t o = lane; o < O; o += 32) d_heads[b * O + o] = s_d[warp][o];
    for (std::int64_t j = lane; j < hidden; j += 32) {
      float acc = 0.f;
      for (std::int64_t o = 0; o < O; ++o) acc = fmaf(s_d[warp][o], o < V ? vw[j] : aw[(o - V) * hidden + j], acc);
      // mask_ld is a multiple of 128, so bit (b * mask_ld + j) is bit j % 32 of its word
      if (mask && ((mask[(b * mask_ld + j) >> 5] >> (j & 31)) & 1u) == 0u) acc = 0.f;
      d_h[b * hidden + j] = acc;
    }
    __syncwarp();  // every lane has read s_d before the next row overwrites it
  }
}

// Block (32, kPgRows): blocks 0..tiles-1 own 32 columns j of H; the last block computes the bias
// gradients (h replaced by 1). Thread (x, y) sums rows y, y + kPgRows, ... for every output in
// registers (compile-time indices: the loops over kMaxOut are unrolled), then the kPgRows partials
// of each output are added in order through shared memory. No atomics: deterministic.
__global__ void __launch_bounds__(32 * kPgRows)
    heads_param_grad_kernel(float* __restrict__ vdw, float* __restrict__ vdb, float* __restrict__ adw,
                            float* __restrict__ adb, float* __restrict__ tdb, const float* __restrict__ d_heads,
                            const float* __restrict__ h, const float* __restrict__ d_pre, std::int64_t batch,
                            std::int64_t hidden, int outputs, int value_outputs) {
  __shared__ float s_red[kPgRows][33];
  const int x = threadIdx.x, y = threadIdx.y;
  const bool bias_block = blockIdx.x == gridDim.x - 1;
  const std::int64_t j = static_cast<std::int64_t>(blockIdx.x) * 32 + x;
  const bool active = bias_block || j < hidden;
  const bool trunk_bias = tdb != nullptr && !bias_block;  // uniform over the block
  float acc[kMaxOut];
#pragma unroll
  for (int o = 0; o < kMaxOut; ++o) acc[o] = 0.f;
  float acc_pre = 0.f;  // trunk bias: column sum of d_pre
  if (active) {
    for (std::int64_t b = y; b < batch; b += kPgRows) {
      const float hv = bias_block ? 1.f : h[b * hidden + j];
      if (trunk_bias) acc_pre += d_pre[b * hidden + j];
      const float* dr = d_heads + b * outputs;
#pragma unroll
      for (int o = 0; o < kMaxOut; ++o)
        if (o < outputs) acc[o] = fmaf(dr[o], hv, acc[o]);
    }
  }
  if (trunk_bias) {
    s_red[y][x] = acc_pre;
    __syncthreads();
    if (y == 0 && active) {
      float s = 0.f;
#pragma unroll
      for (int r = 0; r < kPgRows; ++r) s += s_red[r][x];
      tdb[j] = s;
    }
    __syncthreads();
  }
#pragma unroll
  for (int o = 0; o < kMaxOut; ++o) {
    if (o >= outputs) break;  // uniform over the block: the barriers below stay matched
    s_red[y][x] = acc[o];
    __syncthreads();
    if (y == 0 && active && (!bias_block || x == 0)) {
      float s = 0.f;
#pragma unroll
      for (int r = 0; r < kPgRows; ++r) s += s_red[r][x];
      if (bias_block) {
        if (o < value_outputs) vdb[0] = s;
        else adb[o - value_outputs] = s;
      } else {
        if (o < value_outputs) vdw[j] = s;
        else adw[static_cast<std::int64_t>(o - value_outputs) * hidden + j] = s;
      }
    }
    __syncthreads();  // s_red is rewritten for the next output
  }
}

void check(const char* fn, std::int64_t batch, std::int64_t hidden, std::int64_t branches, std::int64_t actions,
           bool duel) {
  FH_EXPECT(batch >= 0 && hidden >= 1 && branches >= 1 && actions >= 1,
            std::string(fn) + ": need batch >= 0 and hidden, branches, actions >= 1; got " + std::to_string(batch) +
                ", " + std::to_string(hidden) + ", " + std::to_string(branches) + ", " + std::to_string(actions));
  const std::int64_t outputs = branches * actions + (duel ? 1 : 0);
  FH_EXPECT(outputs <= kFusedHeadMaxOutputs, std::string(fn) + ": head outputs (branches * actions" +
                                                 (duel ? " + 1" : "") + " = " + std::to_string(outputs) +
                                                 ") must be <= " + std::to_string(kFusedHeadMaxOutputs));
}

int row_blocks(std::int64_t batch) { return gpu::grid_stride_blocks(batch, kWarps, 8); }

}  // namespace

void fused_heads_forward(float* logits, const float* h, const float* value_w, const float* value_b,
                         const float* adv_w, const float* adv_b, std::int64_t batch, std::int64_t hidden,
                         std::int64_t branches, std::int64_t actions, cudaStream_t stream) {
  check("fused_heads_forward", batch, hidden, branches, actions, value_w != nullptr);
  if (batch == 0) return;
  FH_EXPECT(logits && h && adv_w, "fused_heads_forward: logits, h and adv_w must not be null");
  heads_forward_kernel<<<row_blocks(batch), kWarps * 32, 0, stream>>>(logits, h, value_w, value_b, adv_w, adv_b, batch,
                                                                      hidden, branches, actions);
  FH_CHECK_LAUNCH();
}

void fused_heads_backward_input(float* d_h, float* d_heads, const float* d_logits, const float* value_w,
                                const float* adv_w, const void* relu_mask, std::int64_t batch, std::int64_t hidden,
                                std::int64_t branches, std::int64_t actions, cudaStream_t stream) {
  check("fused_heads_backward_input", batch, hidden, branches, actions, value_w != nullptr);
  if (batch == 0) return;
  FH_EXPECT(d_h && d_heads && d_logits && adv_w, "fused_heads_backward_input: null pointer");
  FH_EXPECT(relu_mask == nullptr || gpu::aligned16(relu_mask), "fused_heads_backward_input: relu_mask must be 16-byte aligned");
  heads_backward_input_kernel<<<row_blocks(batch), kWarps * 32, 0, stream>>>(
      d_h, d_heads, d_logits, value_w, adv_w, static_cast<const std::uint32_t*>(relu_mask), batch, hidden, branches,
      actions);
  FH_CHECK_LAUNCH();
}

void fused_heads_param_grads(float* value_dw, float* value_db, float* adv_dw, float* adv_db, float* trunk_db,
                             const float* d_heads, const float* h, const float* d_pre, std::int64_t batch,
                             std::int64_t hidden, std::int64_t branches, std::int64_t actions, cudaStream_t stream) {
  const bool duel = value_dw != nullptr;
  check("fused_heads_param_grads", batch, hidden, branches, actions, duel);
  FH_EXPECT(!duel || value_db != nullptr, "fused_heads_param_grads: value_db must be set with value_dw");
  FH_EXPECT(adv_dw && adv_db, "fused_heads_param_grads: adv_dw and adv_db must not be null");
  FH_EXPECT(batch == 0 || (d_heads && h), "fused_heads_param_grads: d_heads and h must not be null");
  FH_EXPECT(batch == 0 || trunk_db == nullptr || d_pre != nullptr, "fused_heads_param_grads: trunk_db needs d_pre");
  const int value_outputs = duel ? 1 : 0;
  const int outputs = static_cast<int>(branches * actions) + value_outputs;
  const int tiles = gpu::ceil_div(hidden, 32);
  // batch == 0 still launches: the gradients are sums over nothing, written as 0.
  heads_param_grad_kernel<<<tiles + 1, dim3(32, kPgRows), 0, stream>>>(
      value_dw, value_db, adv_dw, adv_db, trunk_db, d_heads, h, d_pre, batch, hidden, outputs, value_outputs);
  FH_CHECK_LAUNCH();
}

}  // namespace foxhunt::models
