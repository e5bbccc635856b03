#pragma once
// Global gradient norm and clipping over one flat gradient buffer, all on the device: the norm and
// the clip scale are device scalars and the host never reads them (no synchronization).
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace foxhunt::gpu {

// Workspace bytes global_grad_norm needs for n elements.
std::size_t grad_norm_workspace_bytes(std::int64_t n);

// *norm = sqrt(sum_i grad_i^2) (n). Deterministic two-pass sum. n == 0 sets *norm = 0.
void global_grad_norm(float* norm, const float* grad, std::int64_t n, void* workspace, cudaStream_t stream);

// *scale = min(1, max_norm / (*norm + 1e-6)), PyTorch's clip_grad_norm_ coefficient. A NaN norm
// gives a NaN scale (as torch.clamp does), so non-finite gradients stay visible. max_norm > 0.
void clip_scale(float* scale, const float* norm, float max_norm, cudaStream_t stream);

// *norm = sqrt(*norm^2 + *other^2): the global norm over two gradient buffers (e.g. an agent's
// arena and its fine-tuned feature extractor's) from their own norms. One thread.
void combine_norms(float* norm, const float* other, cudaStream_t stream);

// grad_i *= min(1, max_norm / (*norm + 1e-6)) in place (n). Reads nothing back to the host; when
// the coefficient is 1 the kernel returns before touching grad.
void clip_grad_norm(float* grad, const float* norm, float max_norm, std::int64_t n, cudaStream_t stream);

}  // namespace foxhunt::gpu
