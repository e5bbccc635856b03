#pragma once
// Fused Q heads (Z == 1, deterministic layers) over the trunk output h (B, H): the value head
// (1 output, dueling only) and the advantage / plain head (K = D*A outputs) are tiny GEMMs
// (O = 1 + K outputs), which cuBLASLt runs as two launches each way with poor shapes (m = 1, m = K).
// Here one warp per row computes every head output and the dueling combine (forward), or the
// dueling backward and d_h (backward); one more kernel reduces the head parameter gradients over
// the batch. Same meaning as Dense + dueling_forward / dueling_backward (models/dueling.hpp), fp32
// FMAs in a fixed order (deterministic), different summation order from cuBLASLt's.
// Weights as Dense: value_w (1, H), value_b (1), adv_w (K, H), adv_b (K), row-major.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace foxhunt::models {

// Most head outputs (1 + K for dueling, K otherwise) the fused kernels take.
inline constexpr std::int64_t kFusedHeadMaxOutputs = 32;

// logits (B, K): dueling (value_w != nullptr): v + a_k - mean over the k's branch of a;
// plain (value_w == value_b == nullptr): the adv head's output. K = branches * actions.
void fused_heads_forward(float* logits, const float* h, const float* value_w, const float* value_b, const float* adv_w,
                         const float* adv_b, std::int64_t batch, std::int64_t hidden, std::int64_t branches,
                         std::int64_t actions, cudaStream_t stream);

// From d_logits (B, K): d_heads (B, O) = per row [d_value (dueling only), d_adv (K)] (the head
// pre-activation gradients, for fused_heads_param_grads) and d_h (B, H) = sum_o d_heads[o] W_o.
// relu_mask (nullable): the ReLU bit-mask gpu/linear's forward wrote for the layer that produced h
// (row b owns round_up(H, 128) bits); when set, d_h is that layer's pre-activation gradient
// instead: d_h[b, j] = 0 where the mask bit is 0 (so that layer's backward needs no ReLU pass).
void fused_heads_backward_input(float* d_h, float* d_heads, const float* d_logits, const float* value_w,
                                const float* adv_w, const void* relu_mask, std::int64_t batch, std::int64_t hidden,
                                std::int64_t branches, std::int64_t actions, cudaStream_t stream);

// Overwrites the head gradients: value_dw (1, H), value_db (1) (dueling only, else nullptr),
// adv_dw (K, H), adv_db (K) with sums over the batch of d_heads (B, O) times h (B, H) / times 1.
// trunk_db (H) (nullable): also overwritten with the column sums over the batch of d_pre (B, H)
// (the bias gradient of the layer that produced h, from fused_heads_backward_input's d_h).
// workspace: fused_heads_param_grads_workspace_bytes(...) bytes, 16-byte aligned, zeroed once before
// the first call (completion counters that each call leaves at zero; partial sums of row splits).
std::size_t fused_heads_param_grads_workspace_bytes(std::int64_t batch, std::int64_t hidden, std::int64_t branches,
                                                    std::int64_t actions, bool dueling);
void fused_heads_param_grads(float* value_dw, float* value_db, float* adv_dw, float* adv_db, float* trunk_db,
                             const float* d_heads, const float* h, const float* d_pre, std::int64_t batch,
                             std::int64_t hidden, std::int64_t branches, std::int64_t actions, void* workspace,
                             cudaStream_t stream);

}  // namespace foxhunt::models
