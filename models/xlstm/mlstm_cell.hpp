#pragma once
// The mLSTM cell of xLSTM (Beck et al. 2024): matrix memory with exponential input gating and a
// stabilizer state, H heads of dimension D (dk = dv = D). Per (batch b, head h), with the key
// scaled by 1/sqrt(D) (k_t below is k / sqrt(D)) and the gate pre-activations ĩ_t, f̃_t:
//   log f_t = log sigmoid(f̃_t)                       (computed as min(f̃, 0) - log1p(exp(-|f̃|)))
//   m_t  = max(log f_t + m_{t-1}, ĩ_t)
//   i'_t = exp(ĩ_t - m_t),  f'_t = exp(log f_t + m_{t-1} - m_t)
//   C_t  = f'_t C_{t-1} + i'_t v_t k_t^T  (D x D, row = value index)
//   n_t  = f'_t n_{t-1} + i'_t k_t
//   h_t  = C_t q_t / max(|n_t . q_t|, exp(-m_t))
// with C_0 = 0, n_0 = 0, m_0 = 0 (or a given state). h_t does not depend on the stabilizer m in
// exact arithmetic (both C and n carry the factor exp(-m)), so the backward treats m as a constant:
// that gives the exact gradient.
//
// Layouts (row-major float32, batch-major): q, k, v, h (B, T, H, D); i_pre, f_pre (B, T, H).
// State of one row: (H, S_h) with S_h = D*D + D + 1 per head: C (D x D, C[j][i] at j*D + i),
// then n (D), then m — mlstm_state_features(H, D) floats per batch row.
//
// Training form (mlstm_forward): chunkwise-parallel. One block per (b, h) walks the chunks of
// L = shape.chunk steps in order; within a chunk the stabilized parallel form
//   h_t = (a_t C_p q_t + sum_{s<=t} w_ts (k_s.q_t) v_s) / max(|a_t n_p.q_t + sum_s w_ts k_s.q_t|, e^{-m_t}),
//   w_ts = exp(b_t - b_s + ĩ_s - m_t), a_t = exp(b_t + m_p - m_t), b_t = sum of log f over the chunk up to t,
// from the chunk's start state (C_p, n_p, m_p), then the state is carried to the next chunk. The
// chunk start states are kept in the workspace for the backward, which walks the chunks in reverse
// carrying dC, dn (no atomics: every output element is written by one thread, reductions run in a
// fixed order). Step form (mlstm_step): the recurrence itself, one step, state in place.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace foxhunt::models {

struct MlstmShape {
  std::int64_t batch = 0, T = 0, heads = 0, head_dim = 0;
  // L; T % L need not be 0 (the last chunk is short). The chunk run is min(L, T), halved until the
  // backward's shared memory (2 D^2 + 6 L D + 2 L^2 floats and change) fits 227 KiB (sm_90).
  std::int64_t chunk = 64;
};

// Floats of one batch row's state: H * (D*D + D + 1).
std::int64_t mlstm_state_features(std::int64_t heads, std::int64_t head_dim);

// Workspace of mlstm_forward / mlstm_backward (the chunk start states), 256-byte aligned.
std::size_t mlstm_workspace_bytes(const MlstmShape& shape);

// h (B, T, H, D) from q, k, v (B, T, H, D) and i_pre, f_pre (B, T, H). state0 (B, S) (nullable:
// zeros) is each row's initial state; state_out (B, S) (nullable) receives the state after step T
// and may alias state0. Throws std::invalid_argument when even L = 1 does not fit (head_dim too large).
void mlstm_forward(float* h, float* state_out, const float* q, const float* k, const float* v, const float* i_pre,
                   const float* f_pre, const float* state0, const MlstmShape& shape, std::byte* workspace,
                   cudaStream_t stream);

// After mlstm_forward with the same inputs and workspace: from dh (B, T, H, D) writes (overwrites)
// dq, dk, dv (B, T, H, D) and di, df (B, T, H), the gradients with respect to q, k (unscaled),
// v, i_pre and f_pre. The initial state is a constant (no gradient).
void mlstm_backward(float* dq, float* dk, float* dv, float* di, float* df, const float* dh, const float* q,
                    const float* k, const float* v, const float* i_pre, const float* f_pre, const MlstmShape& shape,
                    const std::byte* workspace, cudaStream_t stream);

// One recurrent step: rows with reset[b] != 0 (reset nullable) first take the zero state; then
// state (B, S) is updated in place and h (B, H, D) written. q, k, v (B, H, D), i_pre, f_pre (B, H).
// state_stride: floats between the state rows (0: S), so a state may be a column range of a wider one.
void mlstm_step(float* h, float* state, const float* q, const float* k, const float* v, const float* i_pre,
                const float* f_pre, const std::uint8_t* reset, std::int64_t batch, std::int64_t heads,
                std::int64_t head_dim, std::int64_t state_stride, cudaStream_t stream);

}  // namespace foxhunt::models
