#pragma once
// The Mamba-2 SSD core (state-space duality, Dao & Gu 2024): the selective scan with a scalar decay
// per head, in its chunked training form, its exact backward, and its per-step form for acting.
//
// Shapes: H heads of P channels, G groups (H % G == 0; head h reads group h / (H / G)) of state
// size N, chunk length L (T % L need not be 0: the last chunk is short). All row-major float32,
// batch-major: x (B, T, H, P), dt (B, T, H) (positive), A (H) (negative), Bm, Cm (B, T, G, N),
// y (B, T, H, P), states (B, H, P, N).
// Recurrence per (b, h), state S (P, N) starting at zero:
//   S_t = exp(dt_t A_h) S_{t-1} + dt_t x_t Bm_t^T,     y_t = S_t Cm_t.
//
// Forward, per chunk c of positions t0 .. t1 with a_t = sum_{t0 <= r <= t} dt_r A (fp32, within
// the chunk, so every exponent used below is a_t - a_s <= 0 for s <= t, or a_t <= 0):
//   Y_diag[t] = sum_{s <= t} (Cm_t . Bm_s) exp(a_t - a_s) dt_s x_s
//   Y_off[t]  = exp(a_t) S_c Cm_t           (S_c: the state entering chunk c)
//   local_c   = sum_s exp(a_t1 - a_s) dt_s x_s Bm_s^T   (chunk c's final state from zero)
//   S_{c+1}   = exp(a_t1) S_c + local_c     (sequential over chunks; S_0 = 0, final_state = S_nc)
// Backward: the chunked reverse of the same algorithm. The gradient G_c of the state entering chunk
// c runs backwards over chunks (G_c = sum_t exp(a_t) dy_t Cm_t^T + exp(a_t1) G_{c+1}, G_nc = 0);
// then each chunk's gradients are local: through the masked C B^T product, Y_off, local_c (whose
// gradient is G_{c+1}) and the chunk recurrence's exp(a_t1), the gradient of a is reverse-summed
// within the chunk into ddt (+= A da) and dA (+= dt da). dBm and dCm sum their heads in fixed
// order, dA sums per-(b, chunk) partials in fixed order: no atomics, bitwise reproducible.
// Kernels are fp32 CUDA cores (no tensor cores): one block per (batch row, group, chunk) keeps the
// chunk's Bm, Cm, C B^T and each head's tiles in shared memory and runs the group's heads in order;
// the chunk recurrences are grid-stride loops over the state elements. The chunk actually run is
// min(chunk, T), halved until the backward's tiles fit the 227 KiB a Hopper block may use (the
// chunk length changes rounding only). Only the cumulative decays, the chunk states and the dA
// shares live in the caller's workspace (no allocation, no host synchronization: every call is
// capturable in a CUDA graph).
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace foxhunt::models {

// Shapes of one SSD call (see the header comment). chunk: L, 1 <= L <= kSsdMaxChunk.
struct SsdShape {
  std::int64_t batch = 0, T = 0, heads = 0, head_dim = 0, groups = 1, state = 0, chunk = 64;
};
inline constexpr std::int64_t kSsdMaxChunk = 256;
// head_dim x state at most: the backward keeps a head's (P, N) state and its gradient in shared memory.
inline constexpr std::int64_t kSsdMaxStateTile = 16384;

// Bytes of scratch ssd_forward and ssd_backward take for `shape` (the backward reads what the
// forward left there). Throws std::invalid_argument naming a bad field.
std::size_t ssd_workspace_bytes(const SsdShape& shape);

// Chunked forward: y (B, T, H, P); final_state (B, H, P, N) (nullable): S_T. workspace:
// ssd_workspace_bytes(shape) bytes, 256-byte aligned.
void ssd_forward(float* y, float* final_state, const float* x, const float* dt, const float* A, const float* Bm,
                 const float* Cm, const SsdShape& shape, std::byte* workspace, cudaStream_t stream);

// Backward after ssd_forward with the same inputs and workspace, from dy (B, T, H, P): overwrites
// dx, ddt, dBm, dCm (the shapes of their inputs) and dA (H) (summed over batch and time). Any
// output may be null when not needed. It may run more than once after one forward.
void ssd_backward(float* dx, float* ddt, float* dA, float* dBm, float* dCm, const float* dy, const float* x,
                  const float* dt, const float* A, const float* Bm, const float* Cm, const SsdShape& shape,
                  std::byte* workspace, cudaStream_t stream);

// One recurrent step for acting: rows with reset[b] != 0 (reset nullable: none) first zero their
// state; then the state is updated in place and y (B, H, P) written. Row b's state (H, P, N)
// starts at state + b * state_stride (0: H * P * N, a (B, H, P, N) array; a larger stride reads
// the SSD state inside a wider per-row state, as Mamba2Layer keeps it). x (B, H, P), dt (B, H),
// Bm, Cm (B, G, N). shape.T and shape.chunk are ignored.
void ssd_step(float* y, float* state, const float* x, const float* dt, const float* A, const float* Bm, const float* Cm,
              const std::uint8_t* reset, const SsdShape& shape, std::int64_t state_stride, cudaStream_t stream);

}  // namespace foxhunt::models
