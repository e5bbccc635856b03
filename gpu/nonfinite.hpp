#pragma once
// Device-side NaN / Inf detection: a guard flag the trainer reads later (e.g. with the step's
// other statistics), without a host round trip per tensor.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace foxhunt::gpu {

// Sets *flag = 1 when any of x[0..n) is NaN or ±inf. Never clears it: the caller zeroes the flag
// once, then may accumulate several tensors into it. At most one write per block. Any alignment.
void flag_nonfinite(std::uint32_t* flag, const float* x, std::int64_t n, cudaStream_t stream);
void flag_nonfinite(std::uint32_t* flag, const __nv_bfloat16* x, std::int64_t n, cudaStream_t stream);

}  // namespace foxhunt::gpu
