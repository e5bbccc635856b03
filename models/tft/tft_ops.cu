#include "models/tft/tft_ops.hpp"

#include <cmath>

#include "gpu/check.hpp"
#include "gpu/launch.cuh"
#include "models/blocks/column_sum.cuh"

namespace foxhunt::models::tft {
namespace {

using blocks_detail::column_sum;
using blocks_detail::column_sum_floats;

#define FH_TFT_GRID_STRIDE(idx, n)                                                                  \
  for (std::int64_t idx = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; idx < (n); \
       idx += static_cast<std::int64_t>(gridDim.x) * blockDim.x)

__device__ __forceinline__ float sigmoid(float x) { return 1.f / (1.f + expf(-x)); }

__global__ void glu_forward_kernel(float* __restrict__ out, const float* __restrict__ pre, std::int64_t rows,
                                   std::int64_t n) {
  FH_TFT_GRID_STRIDE(idx, rows * n) {
    const std::int64_t r = idx / n, j = idx - r * n;
    const float* p = pre + r * 2 * n;
    out[idx] = p[j] * sigmoid(p[n + j]);
  }
}

__global__ void glu_backward_kernel(float* __restrict__ d_pre, const float* __restrict__ d_out,
                                    const float* __restrict__ pre, std::int64_t rows, std::int64_t n) {
  FH_TFT_GRID_STRIDE(idx, rows * n) {
    const std::int64_t r = idx / n, j = idx - r * n;
    const float* p = pre + r * 2 * n;
    const float a = p[j], s = sigmoid(p[n + j]), d = d_out[idx];
    d_pre[r * 2 * n + j] = d * s;
    d_pre[r * 2 * n + n + j] = d * a * s * (1.f - s);
  }
}

__global__ void add_group_rows_kernel(float* __restrict__ x, const float* __restrict__ c, std::int64_t rows,
                                      std::int64_t rep, std::int64_t n) {
  FH_TFT_GRID_STRIDE(idx, rows * n) {
    const std::int64_t r = idx / n, j = idx - r * n;
    x[idx] += c[(r / rep) * n + j];
  }
}

// Column j = g n + k of a (rep, G n) view: row r of group g, feature k.
struct GroupTerm {
  const float* d;
  std::int64_t rep, n;
  __device__ float operator()(std::int64_t r, std::int64_t j) const {
    const std::int64_t g = j / n, k = j - g * n;
    return d[(g * rep + r) * n + k];
  }
};

__global__ void embed_forward_kernel(float* __restrict__ by_var, float* __restrict__ flat, const float* __restrict__ x,
                                     const float* __restrict__ weight, const float* __restrict__ bias,
                                     std::int64_t rows, std::int64_t V, std::int64_t n) {
  FH_TFT_GRID_STRIDE(idx, rows * V * n) {
    // idx walks flat (rows, V, n).
    const std::int64_t k = idx % n, rv = idx / n, v = rv % V, r = rv / V;
    const float e = x[r * V + v] * weight[v * n + k] + bias[v * n + k];
    flat[idx] = e;
    by_var[(v * rows + r) * n + k] = e;
  }
}

__device__ __forceinline__ float embed_grad(const float* d_by_var, const float* d_flat, std::int64_t r, std::int64_t v,
                                            std::int64_t k, std::int64_t rows, std::int64_t V, std::int64_t n) {
  return d_by_var[(v * rows + r) * n + k] + d_flat[(r * V + v) * n + k];
}

struct EmbedWeightTerm {
  const float *d_by_var, *d_flat, *x;
  std::int64_t rows, V, n;
  __device__ float operator()(std::int64_t r, std::int64_t j) const {
    const std::int64_t v = j / n, k = j - v * n;
    return embed_grad(d_by_var, d_flat, r, v, k, rows, V, n) * x[r * V + v];
  }
};
struct EmbedBiasTerm {
  const float *d_by_var, *d_flat;
  std::int64_t rows, V, n;
  __device__ float operator()(std::int64_t r, std::int64_t j) const {
    const std::int64_t v = j / n, k = j - v * n;
    return embed_grad(d_by_var, d_flat, r, v, k, rows, V, n);
  }
};

__global__ void embed_input_grad_kernel(float* __restrict__ d_x, const float* __restrict__ d_by_var,
                                        const float* __restrict__ d_flat, const float* __restrict__ weight,
                                        std::int64_t rows, std::int64_t V, std::int64_t n) {
  FH_TFT_GRID_STRIDE(idx, rows * V) {
    const std::int64_t r = idx / V, v = idx - r * V;
    float acc = 0.f;
    for (std::int64_t k = 0; k < n; ++k) acc += embed_grad(d_by_var, d_flat, r, v, k, rows, V, n) * weight[v * n + k];
    d_x[idx] = acc;
  }
}

__global__ void select_forward_kernel(float* __restrict__ out, const float* __restrict__ w, const float* __restrict__ e,
                                      std::int64_t rows, std::int64_t V, std::int64_t n) {
  FH_TFT_GRID_STRIDE(idx, rows * n) {
    const std::int64_t r = idx / n, k = idx - r * n;
    float acc = 0.f;
    for (std::int64_t v = 0; v < V; ++v) acc += w[r * V + v] * e[(v * rows + r) * n + k];
    out[idx] = acc;
  }
}

__global__ void select_weight_grad_kernel(float* __restrict__ d_w, const float* __restrict__ d_out,
                                          const float* __restrict__ e, std::int64_t rows, std::int64_t V,
                                          std::int64_t n) {
  FH_TFT_GRID_STRIDE(idx, rows * V) {
    const std::int64_t r = idx / V, v = idx - r * V;
    float acc = 0.f;
    for (std::int64_t k = 0; k < n; ++k) acc += d_out[r * n + k] * e[(v * rows + r) * n + k];
    d_w[idx] = acc;
  }
}

__global__ void select_value_grad_kernel(float* __restrict__ d_e, const float* __restrict__ d_out,
                                         const float* __restrict__ w, std::int64_t rows, std::int64_t V,
                                         std::int64_t n) {
  FH_TFT_GRID_STRIDE(idx, V * rows * n) {
    // idx walks d_e (V, rows, n).
    const std::int64_t k = idx % n, vr = idx / n, r = vr % rows, v = vr / rows;
    d_e[idx] = w[r * V + v] * d_out[r * n + k];
  }
}

// One thread per (b, h, i): the causal softmax row of head h at query position i.
__global__ void attention_probs_kernel(float* __restrict__ probs, const float* __restrict__ q,
                                       const float* __restrict__ k, std::int64_t B, std::int64_t T, std::int64_t H,
                                       std::int64_t d, float scale) {
  FH_TFT_GRID_STRIDE(idx, B * H * T) {
    const std::int64_t i = idx % T, bh = idx / T, h = bh % H, b = bh / H;
    const std::int64_t Hd = H * d;
    const float* qi = q + (b * T + i) * Hd + h * d;
    float* row = probs + idx * T;
    float m = -INFINITY;
    for (std::int64_t j = 0; j <= i; ++j) {
      const float* kj = k + (b * T + j) * Hd + h * d;
      float s = 0.f;
      for (std::int64_t e = 0; e < d; ++e) s += qi[e] * kj[e];
      s *= scale;
      row[j] = s;
      m = fmaxf(m, s);
    }
    float sum = 0.f;
    for (std::int64_t j = 0; j <= i; ++j) {
      const float p = expf(row[j] - m);
      row[j] = p;
      sum += p;
    }
    const float inv = 1.f / sum;
    for (std::int64_t j = 0; j <= i; ++j) row[j] *= inv;
    for (std::int64_t j = i + 1; j < T; ++j) row[j] = 0.f;
  }
}

// One thread per (b, i, e): the head-averaged mix of the shared values.
__global__ void attention_mix_kernel(float* __restrict__ mixed, const float* __restrict__ probs,
                                     const float* __restrict__ v, std::int64_t B, std::int64_t T, std::int64_t H,
                                     std::int64_t d) {
  FH_TFT_GRID_STRIDE(idx, B * T * d) {
    const std::int64_t e = idx % d, bi = idx / d, i = bi % T, b = bi / T;
    float acc = 0.f;
    for (std::int64_t h = 0; h < H; ++h) {
      const float* row = probs + ((b * H + h) * T + i) * T;
      for (std::int64_t j = 0; j <= i; ++j) acc += row[j] * v[(b * T + j) * d + e];
    }
    mixed[idx] = acc / static_cast<float>(H);
  }
}

// One thread per (b, h, i): d_scores row = p (dp - sum_j p dp), dp_j = (1 / H) d_mixed_i . v_j.
__global__ void attention_score_grad_kernel(float* __restrict__ d_scores, const float* __restrict__ d_mixed,
                                            const float* __restrict__ probs, const float* __restrict__ v,
                                            std::int64_t B, std::int64_t T, std::int64_t H, std::int64_t d) {
  FH_TFT_GRID_STRIDE(idx, B * H * T) {
    const std::int64_t i = idx % T, bh = idx / T, b = bh / H;
    const float* p = probs + idx * T;
    float* ds = d_scores + idx * T;
    const float* dm = d_mixed + (b * T + i) * d;
    const float inv_h = 1.f / static_cast<float>(H);
    float dot = 0.f;
    for (std::int64_t j = 0; j <= i; ++j) {
      const float* vj = v + (b * T + j) * d;
      float dp = 0.f;
      for (std::int64_t e = 0; e < d; ++e) dp += dm[e] * vj[e];
      dp *= inv_h;
      ds[j] = dp;
      dot += p[j] * dp;
    }
    for (std::int64_t j = 0; j <= i; ++j) ds[j] = p[j] * (ds[j] - dot);
    for (std::int64_t j = i + 1; j < T; ++j) ds[j] = 0.f;
  }
}

// One thread per (b, i, h, e): d_q = scale sum_{j <= i} d_s[i, j] k_j.
__global__ void attention_query_grad_kernel(float* __restrict__ d_q, const float* __restrict__ d_scores,
                                            const float* __restrict__ k, std::int64_t B, std::int64_t T,
                                            std::int64_t H, std::int64_t d, float scale) {
  FH_TFT_GRID_STRIDE(idx, B * T * H * d) {
    const std::int64_t Hd = H * d;
    const std::int64_t c = idx % Hd, bi = idx / Hd, i = bi % T, b = bi / T, h = c / d;
    const float* ds = d_scores + ((b * H + h) * T + i) * T;
    float acc = 0.f;
    for (std::int64_t j = 0; j <= i; ++j) acc += ds[j] * k[(b * T + j) * Hd + c];
    d_q[idx] = acc * scale;
  }
}

// One thread per (b, j, h, e): d_k = scale sum_{i >= j} d_s[i, j] q_i.
__global__ void attention_key_grad_kernel(float* __restrict__ d_k, const float* __restrict__ d_scores,
                                          const float* __restrict__ q, std::int64_t B, std::int64_t T, std::int64_t H,
                                          std::int64_t d, float scale) {
  FH_TFT_GRID_STRIDE(idx, B * T * H * d) {
    const std::int64_t Hd = H * d;
    const std::int64_t c = idx % Hd, bj = idx / Hd, j = bj % T, b = bj / T, h = c / d;
    const float* ds = d_scores + (b * H + h) * T * T;
    float acc = 0.f;
    for (std::int64_t i = j; i < T; ++i) acc += ds[i * T + j] * q[(b * T + i) * Hd + c];
    d_k[idx] = acc * scale;
  }
}

// One thread per (b, j, e): d_v = (1 / H) sum_h sum_{i >= j} p_h[i, j] d_mixed_i.
__global__ void attention_value_grad_kernel(float* __restrict__ d_v, const float* __restrict__ probs,
                                            const float* __restrict__ d_mixed, std::int64_t B, std::int64_t T,
                                            std::int64_t H, std::int64_t d) {
  FH_TFT_GRID_STRIDE(idx, B * T * d) {
    const std::int64_t e = idx % d, bj = idx / d, j = bj % T, b = bj / T;
    float acc = 0.f;
    for (std::int64_t h = 0; h < H; ++h) {
      const float* p = probs + (b * H + h) * T * T;
      for (std::int64_t i = j; i < T; ++i) acc += p[i * T + j] * d_mixed[(b * T + i) * d + e];
    }
    d_v[idx] = acc / static_cast<float>(H);
  }
}

__global__ void swap_leading_kernel(float* __restrict__ out, const float* __restrict__ in, std::int64_t D0,
                                    std::int64_t D1, std::int64_t n) {
  FH_TFT_GRID_STRIDE(idx, D0 * D1 * n) {
    // idx walks out (D1, D0, n).
    const std::int64_t c = idx % n, r = idx / n, i = r % D0, j = r / D0;
    out[idx] = in[(i * D1 + j) * n + c];
  }
}

__global__ void broadcast_state_kernel(float* __restrict__ out, const float* __restrict__ h,
                                       const float* __restrict__ c, std::int64_t B, std::int64_t n) {
  FH_TFT_GRID_STRIDE(idx, B * 2 * n) {
    const std::int64_t j = idx % (2 * n);
    out[idx] = j < n ? h[j] : c[j - n];
  }
}

// One thread per row: an in-place shift towards the front, in increasing order (each element is
// read before it is overwritten).
__global__ void shift_window_kernel(float* __restrict__ window, const float* __restrict__ in,
                                    const std::uint8_t* __restrict__ reset, std::int64_t B, std::int64_t T,
                                    std::int64_t C) {
  FH_TFT_GRID_STRIDE(b, B) {
    float* row = window + b * T * C;
    const bool zero = reset != nullptr && reset[b] != 0;
    for (std::int64_t j = 0; j + C < T * C; ++j) row[j] = zero ? 0.f : row[j + C];
    for (std::int64_t j = 0; j < C; ++j) row[(T - 1) * C + j] = in[b * C + j];
  }
}

int blocks_for(std::int64_t n) { return gpu::grid_stride_blocks(n); }

}  // namespace

void glu_forward(float* out, const float* pre, std::int64_t rows, std::int64_t n, cudaStream_t stream) {
  if (rows * n == 0) return;
  glu_forward_kernel<<<blocks_for(rows * n), gpu::kBlock, 0, stream>>>(out, pre, rows, n);
  FH_CHECK_LAUNCH();
}

void glu_backward(float* d_pre, const float* d_out, const float* pre, std::int64_t rows, std::int64_t n,
                  cudaStream_t stream) {
  if (rows * n == 0) return;
  glu_backward_kernel<<<blocks_for(rows * n), gpu::kBlock, 0, stream>>>(d_pre, d_out, pre, rows, n);
  FH_CHECK_LAUNCH();
}

void add_group_rows(float* x, const float* c, std::int64_t rows, std::int64_t rep, std::int64_t n,
                    cudaStream_t stream) {
  FH_EXPECT(rep >= 1 && rows % rep == 0, "tft add_group_rows: rows must be a multiple of rep");
  if (rows * n == 0) return;
  add_group_rows_kernel<<<blocks_for(rows * n), gpu::kBlock, 0, stream>>>(x, c, rows, rep, n);
  FH_CHECK_LAUNCH();
}

std::size_t group_sum_scratch_floats(std::int64_t rows, std::int64_t rep, std::int64_t n) {
  return column_sum_floats(rep, rows / rep * n);
}

void group_sum(float* out, const float* d, std::int64_t rows, std::int64_t rep, std::int64_t n, float* scratch,
               cudaStream_t stream) {
  FH_EXPECT(rep >= 1 && rows % rep == 0, "tft group_sum: rows must be a multiple of rep");
  column_sum(out, rep, rows / rep * n, GroupTerm{d, rep, n}, scratch, stream);
}

void embed_forward(float* by_var, float* flat, const float* x, const float* weight, const float* bias,
                   std::int64_t rows, std::int64_t V, std::int64_t n, cudaStream_t stream) {
  if (rows * V * n == 0) return;
  embed_forward_kernel<<<blocks_for(rows * V * n), gpu::kBlock, 0, stream>>>(by_var, flat, x, weight, bias, rows, V,
                                                                              n);
  FH_CHECK_LAUNCH();
}

std::size_t embed_scratch_floats(std::int64_t rows, std::int64_t V, std::int64_t n) {
  return column_sum_floats(rows, V * n);
}

void embed_backward(float* d_x, float* d_weight, float* d_bias, const float* d_by_var, const float* d_flat,
                    const float* x, const float* weight, std::int64_t rows, std::int64_t V, std::int64_t n,
                    float* scratch, cudaStream_t stream) {
  column_sum(d_weight, rows, V * n, EmbedWeightTerm{d_by_var, d_flat, x, rows, V, n}, scratch, stream);
  column_sum(d_bias, rows, V * n, EmbedBiasTerm{d_by_var, d_flat, rows, V, n}, scratch, stream);
  if (d_x != nullptr && rows * V > 0) {
    embed_input_grad_kernel<<<blocks_for(rows * V), gpu::kBlock, 0, stream>>>(d_x, d_by_var, d_flat, weight, rows, V,
                                                                               n);
    FH_CHECK_LAUNCH();
  }
}

void select_forward(float* out, const float* w, const float* e, std::int64_t rows, std::int64_t V, std::int64_t n,
                    cudaStream_t stream) {
  if (rows * n == 0) return;
  select_forward_kernel<<<blocks_for(rows * n), gpu::kBlock, 0, stream>>>(out, w, e, rows, V, n);
  FH_CHECK_LAUNCH();
}

void select_backward(float* d_w, float* d_e, const float* d_out, const float* w, const float* e, std::int64_t rows,
                     std::int64_t V, std::int64_t n, cudaStream_t stream) {
  if (rows * V == 0) return;
  select_weight_grad_kernel<<<blocks_for(rows * V), gpu::kBlock, 0, stream>>>(d_w, d_out, e, rows, V, n);
  FH_CHECK_LAUNCH();
  select_value_grad_kernel<<<blocks_for(rows * V * n), gpu::kBlock, 0, stream>>>(d_e, d_out, w, rows, V, n);
  FH_CHECK_LAUNCH();
}

void attention_forward(float* probs, float* mixed, const float* q, const float* k, const float* v, std::int64_t B,
                       std::int64_t T, std::int64_t H, std::int64_t d, float scale, cudaStream_t stream) {
  if (B * T == 0) return;
  attention_probs_kernel<<<blocks_for(B * H * T), gpu::kBlock, 0, stream>>>(probs, q, k, B, T, H, d, scale);
  FH_CHECK_LAUNCH();
  attention_mix_kernel<<<blocks_for(B * T * d), gpu::kBlock, 0, stream>>>(mixed, probs, v, B, T, H, d);
  FH_CHECK_LAUNCH();
}

void attention_backward(float* d_q, float* d_k, float* d_v, float* d_scores, const float* d_mixed, const float* probs,
                        const float* q, const float* k, const float* v, std::int64_t B, std::int64_t T,
                        std::int64_t H, std::int64_t d, float scale, cudaStream_t stream) {
  if (B * T == 0) return;
  attention_score_grad_kernel<<<blocks_for(B * H * T), gpu::kBlock, 0, stream>>>(d_scores, d_mixed, probs, v, B, T, H,
                                                                                  d);
  FH_CHECK_LAUNCH();
  attention_query_grad_kernel<<<blocks_for(B * T * H * d), gpu::kBlock, 0, stream>>>(d_q, d_scores, k, B, T, H, d,
                                                                                      scale);
  FH_CHECK_LAUNCH();
  attention_key_grad_kernel<<<blocks_for(B * T * H * d), gpu::kBlock, 0, stream>>>(d_k, d_scores, q, B, T, H, d,
                                                                                    scale);
  FH_CHECK_LAUNCH();
  attention_value_grad_kernel<<<blocks_for(B * T * d), gpu::kBlock, 0, stream>>>(d_v, probs, d_mixed, B, T, H, d);
  FH_CHECK_LAUNCH();
}

void swap_leading(float* out, const float* in, std::int64_t D0, std::int64_t D1, std::int64_t n, cudaStream_t stream) {
  if (D0 * D1 * n == 0) return;
  swap_leading_kernel<<<blocks_for(D0 * D1 * n), gpu::kBlock, 0, stream>>>(out, in, D0, D1, n);
  FH_CHECK_LAUNCH();
}

void broadcast_state(float* out, const float* h, const float* c, std::int64_t B, std::int64_t n, cudaStream_t stream) {
  if (B * n == 0) return;
  broadcast_state_kernel<<<blocks_for(B * 2 * n), gpu::kBlock, 0, stream>>>(out, h, c, B, n);
  FH_CHECK_LAUNCH();
}

void shift_window(float* window, const float* in, const std::uint8_t* reset, std::int64_t B, std::int64_t T,
                  std::int64_t C, cudaStream_t stream) {
  if (B == 0) return;
  shift_window_kernel<<<blocks_for(B), gpu::kBlock, 0, stream>>>(window, in, reset, B, T, C);
  FH_CHECK_LAUNCH();
}

}  // namespace foxhunt::models::tft
