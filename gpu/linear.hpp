#pragma once
// Fully connected layer on cuBLASLt, f32 end to end with CUBLAS_COMPUTE_32F by default (no TF32:
// results match a float64 reference to ~1e-5; LinearMath::tf32 opts into tensor cores). PyTorch layout:
//   weight (out_f, in_f) row-major, bias (out_f), x (B, in_f), y (B, out_f) = act(x W^T + b).
// The bias and the activation are fused into the GEMM as a cuBLASLt epilogue; where cuBLASLt has
// no kernel for the fused epilogue the layer runs the plain GEMM and a small activation kernel that
// writes the same outputs and the same aux layout, so callers never see the difference. Small fp32
// GEMMs (outputs <= 2^18, reduction length <= 1024: the learner's layers; forward, d_weight and
// d_in alike) run as one kernel of ours, the forward's epilogue inside (cuBLASLt takes 2-3 kernels
// there: GEMM, split-K reduction, epilogue pass), same outputs and aux layout, deterministic.
//
// aux (what the backward needs, linear_aux_bytes(B, out_f, act) bytes, 16-byte aligned):
//   identity: nothing (aux may be nullptr).
//   relu:     cuBLASLt's ReLU bit-mask. Row b of the batch owns ld = round_up(out_f, 128) bits;
//             bit (b * ld + j) (32-bit words, least significant bit first) is 1 where the
//             pre-activation of output j was > 0.  B * ld / 8 bytes.
//   gelu, tanh: the pre-activation x W^T + b (f32), row stride ld = round_up(out_f, 8) floats.
//             B * ld * 4 bytes.
// aux may be nullptr for relu/gelu too when no backward follows (inference).
// GELU is the tanh approximation (PyTorch approximate="tanh"), which is cuBLASLt's.
//
// Heuristic results are cached per (device, shape, transposes, epilogue, pointer alignments,
// workspace size) in a mutex-guarded map; the matmul/layout descriptors themselves are created per
// call (host-only, ~microseconds) so that concurrent callers on different streams share nothing.
#include <cstddef>
#include <cstdint>

#include "gpu/activation.hpp"
#include "gpu/context.hpp"

namespace foxhunt::gpu {

// GEMM arithmetic (storage: weights, activations, gradients, optimizer state stay f32 in every mode, the master copy).
// fp32: CUBLAS_COMPUTE_32F (the default; matches float64 to ~1e-5). tf32: CUBLAS_COMPUTE_32F_FAST_TF32 on the f32
// operands (10-bit mantissas, f32 accumulation, ~1e-3 relative), opt-in. bf16: before each GEMM a kernel on the lane's
// stream rounds both f32 operands to nearest-even bf16 copies in the lane's workspace (its last quarter, at most 4 MiB,
// stays cuBLASLt's; larger operands run in chunks of batch rows; no allocation: capturable), then A/B CUDA_R_16BF, C/D
// f32, CUBLAS_COMPUTE_32F (2^-8 relative per operand). tf32, bf16: always cuBLASLt. A lane's workspace: one stream.
enum class LinearMath : std::uint8_t { fp32, tf32, bf16 };

// Bytes of the aux buffer linear_forward writes for `act` (0 for identity).
std::size_t linear_aux_bytes(std::int64_t batch, std::int64_t out_features, Activation act);

// out (B, out_f) = act(in (B, in_f) · weight^T + bias).  act: identity, relu, gelu or tanh (tanh
// always runs as GEMM + epilogue pass: cuBLASLt has no tanh epilogue; anything else is rejected:
// compose other activations with a separate kernel after an identity layer).
// bias (out_f) may be nullptr. aux: see above. out must not alias in, weight, bias or aux.
void linear_forward(float* out, void* aux, const float* in, const float* weight, const float* bias, std::int64_t batch,
                    std::int64_t in_features, std::int64_t out_features, Activation act, LinearMath math,
                    BlasLane lane);
inline void linear_forward(float* out, void* aux, const float* in, const float* weight, const float* bias,
                           std::int64_t batch, std::int64_t in_features, std::int64_t out_features, Activation act,
                           BlasLane lane) {
  linear_forward(out, aux, in, weight, bias, batch, in_features, out_features, act, LinearMath::fp32, lane);
}

// Backward of linear_forward with the same act, given d_out = dL/dy (B, out_f):
//   d_pre = d_out ⊙ act'(pre)            (from aux; written to d_pre_scratch, (B, out_f) floats,
//                                          required for relu/gelu, unused (may be null) for identity)
//   d_in (B, in_f)       = d_pre · weight          (nullable: skipped)
//   d_weight (out_f, in_f) = d_pre^T · in           (nullable; += when accumulate_param_grads)
//   d_bias (out_f)       = sum over the batch of d_pre  (nullable; += when accumulate_param_grads)
// accumulate_param_grads applies to both parameter gradients (d_weight and d_bias) so that
// accumulating over micro-batches or shared layers needs no extra zeroing; d_in is always overwritten.
// d_bias is a deterministic reduction (no atomics). The BlasLane's workspace is also used, between
// the GEMMs on the same stream, for the bias partial sums.
void linear_backward(float* d_in, float* d_weight, float* d_bias, float* d_pre_scratch, const float* d_out,
                     const void* aux, const float* in, const float* weight, std::int64_t batch,
                     std::int64_t in_features, std::int64_t out_features, Activation act, bool accumulate_param_grads,
                     LinearMath math, BlasLane lane);
inline void linear_backward(float* d_in, float* d_weight, float* d_bias, float* d_pre_scratch, const float* d_out,
                            const void* aux, const float* in, const float* weight, std::int64_t batch,
                            std::int64_t in_features, std::int64_t out_features, Activation act,
                            bool accumulate_param_grads, BlasLane lane) {
  linear_backward(d_in, d_weight, d_bias, d_pre_scratch, d_out, aux, in, weight, batch, in_features, out_features, act,
                  accumulate_param_grads, LinearMath::fp32, lane);
}

namespace detail {
// Tests only: run the unfused fallback (plain GEMM + activation kernel) even where cuBLASLt has the
// fused epilogue, so that both paths are checked against the reference. Process-wide.
void linear_force_unfused_epilogue(bool force);
// Tests only: send even small fp32 GEMMs (outputs <= 2^18, k <= 1024, which normally run as one
// kernel of gpu/linear's own) to cuBLASLt. Process-wide.
void linear_disable_small_gemm(bool disable);
}  // namespace detail

}  // namespace foxhunt::gpu
