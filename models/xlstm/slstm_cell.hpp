#pragma once
// The sLSTM cell of xLSTM (Beck et al. 2024): scalar memory with exponential input gating, a
// sigmoid forget gate (the paper's and the reference implementation's default), a stabilizer
// state, and head-wise block-diagonal recurrence. H heads of D units; per unit, with the gate
// pre-activations of step t
//   ĩ, f̃, z̃, õ = gx_t (W x_t + b, computed by the caller as one GEMM over all T) + R h_{t-1},
//   R block-diagonal: gate g of head h reads only that head's h_{t-1} through R[g][h] (D x D),
//   log f = log sigmoid(f̃)
//   m_t  = max(log f + m_{t-1}, ĩ)       (m_t = ĩ on a fresh state, n_{t-1} == 0, as the reference
//                                          implementation does: then i' = 1 and nothing underflows)
//   i' = exp(ĩ - m_t), f' = exp(log f + m_{t-1} - m_t), z = tanh(z̃), o = sigmoid(õ)
//   c_t = f' c_{t-1} + i' z,  n_t = f' n_{t-1} + i',  h_t = o c_t / n_t
// from h_0 = c_0 = n_0 = m_0 = 0 (or a given state). h_t does not depend on m in exact arithmetic
// (c and n both carry exp(-m)), so the backward treats m as a constant: the exact gradient.
//
// Layouts (row-major float32, batch-major): gx (B, T, 4, H, D) in gate order i, f, z, o;
// R (4, H, D, D), R[g][h][d][e] the weight of h_{t-1}[h][e] in gate g of unit (h, d);
// h (B, T, H, D); state of one batch row (4, H, D) = [h | c | n | m] (slstm_state_features).
//
// The forward is ONE kernel launch: a block per (batch tile, head) holds its head's R (4 D x D)
// in shared memory and loops over t, the tile's h_{t-1} in shared memory. The backward through
// time is one kernel the same way (reverse loop, dc and dn in registers), then dR = sum over rows
// of d_gx_t^T h_{t-1} per gate and head, a two-pass column sum over the B * T rows in a fixed
// order (models/blocks/column_sum.cuh: deterministic, no atomics). The pre-activation gradient d_gx is what the caller's W and b need.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace foxhunt::models {

struct SlstmShape {
  std::int64_t batch = 0, T = 0, heads = 0, head_dim = 0;
};

// Floats of one batch row's state: 4 * H * D.
std::int64_t slstm_state_features(std::int64_t heads, std::int64_t head_dim);

// Workspace of slstm_forward / slstm_backward (the tape of every step and the dR partial sums),
// 256-byte aligned.
std::size_t slstm_workspace_bytes(const SlstmShape& shape);

// h (B, T, H, D) from gx (B, T, 4, H, D) and R (4, H, D, D). state0 (B, 4HD) (nullable: zeros);
// reset0 (B) (nullable): rows with reset0[b] != 0 start from zeros instead of state0. state_out
// (B, 4HD) (nullable) receives the state after step T and may alias state0.
void slstm_forward(float* h, float* state_out, const float* gx, const float* R, const float* state0,
                   const std::uint8_t* reset0, const SlstmShape& shape, std::byte* workspace, cudaStream_t stream);

// After slstm_forward with the same inputs and workspace: from dh (B, T, H, D) writes (overwrites)
// d_gx (B, T, 4, H, D) and dR (4, H, D, D). The initial state is a constant (no gradient).
void slstm_backward(float* d_gx, float* dR, const float* dh, const float* R, const SlstmShape& shape,
                    const std::byte* workspace, cudaStream_t stream);

// One step: rows with reset[b] != 0 (reset nullable) first take the zero state; then state
// (B, 4HD) is updated in place and h (B, H, D) written from gx (B, 4, H, D). state_stride: floats
// between the state rows (0: 4HD), so a state may be a column range of a wider one.
void slstm_step(float* h, float* state, const float* gx, const float* R, const std::uint8_t* reset,
                std::int64_t batch, std::int64_t heads, std::int64_t head_dim, std::int64_t state_stride,
                cudaStream_t stream);

}  // namespace foxhunt::models
