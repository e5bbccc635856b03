#pragma once
// The Temporal Fusion Transformer's small kernels (Lim et al. 2021), launchers with outputs first
// and the stream last. Row-major f32 throughout; every reduction runs in a fixed order (no atomics),
// so results are deterministic. The pieces in models/tft/ compose them with gpu/linear, gpu/layernorm,
// gpu/softmax and gpu/activations.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace foxhunt::models::tft {

// GLU gate: out (rows, n) = pre[:, :n] * sigmoid(pre[:, n:]), pre (rows, 2n) (value half first).
void glu_forward(float* out, const float* pre, std::int64_t rows, std::int64_t n, cudaStream_t stream);
// d_pre (rows, 2n) from d_out (rows, n) and the forward's pre.
void glu_backward(float* d_pre, const float* d_out, const float* pre, std::int64_t rows, std::int64_t n,
                  cudaStream_t stream);

// x (rows, n) += c[r / rep, :] for c (rows / rep, n): a context broadcast over groups of `rep` rows.
void add_group_rows(float* x, const float* c, std::int64_t rows, std::int64_t rep, std::int64_t n,
                    cudaStream_t stream);
// out (rows / rep, n) = sum over the rep rows of each group of d (rows, n). scratch:
// group_sum_scratch_floats(rows, rep, n) floats.
std::size_t group_sum_scratch_floats(std::int64_t rows, std::int64_t rep, std::int64_t n);
void group_sum(float* out, const float* d, std::int64_t rows, std::int64_t rep, std::int64_t n, float* scratch,
               cudaStream_t stream);

// Per-variable linear embeddings of scalar inputs, x (rows, V), weight and bias (V, n):
//   e = x[r, v] * weight[v, :] + bias[v, :], written as by_var (V, rows, n) and flat (rows, V n).
void embed_forward(float* by_var, float* flat, const float* x, const float* weight, const float* bias,
                   std::int64_t rows, std::int64_t V, std::int64_t n, cudaStream_t stream);
// From d_by_var (V, rows, n) and d_flat (rows, V n) (the two uses of e): d_weight, d_bias (V, n)
// (overwritten), d_x (rows, V) (nullable). scratch: embed_scratch_floats(rows, V, n) floats.
std::size_t embed_scratch_floats(std::int64_t rows, std::int64_t V, std::int64_t n);
void embed_backward(float* d_x, float* d_weight, float* d_bias, const float* d_by_var, const float* d_flat,
                    const float* x, const float* weight, std::int64_t rows, std::int64_t V, std::int64_t n,
                    float* scratch, cudaStream_t stream);

// Variable selection's weighted sum: out (rows, n) = sum_v w[r, v] * e[v, r, :], w (rows, V),
// e (V, rows, n).
void select_forward(float* out, const float* w, const float* e, std::int64_t rows, std::int64_t V, std::int64_t n,
                    cudaStream_t stream);
// d_w (rows, V) and d_e (V, rows, n) from d_out (rows, n).
void select_backward(float* d_w, float* d_e, const float* d_out, const float* w, const float* e, std::int64_t rows,
                     std::int64_t V, std::int64_t n, cudaStream_t stream);

// Interpretable multi-head attention over B sequences of T positions, H heads of width d:
// q, k (B T, H d) (head h in columns h d .. h d + d - 1), v (B T, d) shared by the heads.
//   probs (B, H, T, T): softmax_j<=i (q_i . k_j * scale) per head, 0 for j > i (causal);
//   mixed (B T, d) = (1 / H) sum_h probs_h v.
void attention_forward(float* probs, float* mixed, const float* q, const float* k, const float* v, std::int64_t B,
                       std::int64_t T, std::int64_t H, std::int64_t d, float scale, cudaStream_t stream);
// From d_mixed (B T, d): d_q, d_k (B T, H d), d_v (B T, d). d_scores (B, H, T, T) is scratch (it
// ends holding the score gradients).
void attention_backward(float* d_q, float* d_k, float* d_v, float* d_scores, const float* d_mixed, const float* probs,
                        const float* q, const float* k, const float* v, std::int64_t B, std::int64_t T,
                        std::int64_t H, std::int64_t d, float scale, cudaStream_t stream);

// out (D1, D0, n) from in (D0, D1, n): swaps the two leading dimensions (batch- and time-major).
void swap_leading(float* out, const float* in, std::int64_t D0, std::int64_t D1, std::int64_t n, cudaStream_t stream);
// out (B, 2n) = [h | c] per row from the vectors h, c (n).
void broadcast_state(float* out, const float* h, const float* c, std::int64_t B, std::int64_t n, cudaStream_t stream);

// The step form's window: each row b of window (B, T C) with reset[b] != 0 (reset nullable) is
// zeroed, then shifted by one step (C floats) towards the front, and in[b, :] (C) written last.
void shift_window(float* window, const float* in, const std::uint8_t* reset, std::int64_t B, std::int64_t T,
                  std::int64_t C, cudaStream_t stream);

}  // namespace foxhunt::models::tft
