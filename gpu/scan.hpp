#pragma once
// Prefix sums (scans) of f32, int32 and uint32 arrays: out[i] = in[0] + ... + in[i]
// (inclusive) or in[0] + ... + in[i-1] with out[0] = 0 (exclusive). One pass over memory.
// out may equal in (in-place); other overlaps are not allowed.
//
// Integers: cub::DeviceScan (decoupled look-back); exact, and wrap-around modulo 2^32 on
// overflow (uint32; int32 likewise in two's complement, in practice).
// f32: our own single-pass scan with a look-back whose combination order is fixed (CUB's
// float scan may differ from run to run in the last bits); the same call on the same input
// gives the same bits. Rounding: out[i] is a fixed tree of additions about 50 deep, so its
// error is below ~50 * 2^-24 * (|in[0]| + ... + |in[i]|), whatever the cancellation in out[i].
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace foxhunt::gpu {

// Workspace bytes for inclusive_scan / exclusive_scan of n elements of T (float, std::int32_t,
// std::uint32_t); 0 when none is needed. The workspace must be 8-byte aligned.
template <class T>
std::size_t scan_workspace_bytes(std::int64_t n);
extern template std::size_t scan_workspace_bytes<float>(std::int64_t);
extern template std::size_t scan_workspace_bytes<std::int32_t>(std::int64_t);
extern template std::size_t scan_workspace_bytes<std::uint32_t>(std::int64_t);

// out, in: (n). workspace_bytes: what the caller gave, at least scan_workspace_bytes<T>(n).
void inclusive_scan(float* out, const float* in, std::int64_t n, void* workspace, std::size_t workspace_bytes,
                    cudaStream_t stream);
void inclusive_scan(std::int32_t* out, const std::int32_t* in, std::int64_t n, void* workspace,
                    std::size_t workspace_bytes, cudaStream_t stream);
void inclusive_scan(std::uint32_t* out, const std::uint32_t* in, std::int64_t n, void* workspace,
                    std::size_t workspace_bytes, cudaStream_t stream);

void exclusive_scan(float* out, const float* in, std::int64_t n, void* workspace, std::size_t workspace_bytes,
                    cudaStream_t stream);
void exclusive_scan(std::int32_t* out, const std::int32_t* in, std::int64_t n, void* workspace,
                    std::size_t workspace_bytes, cudaStream_t stream);
void exclusive_scan(std::uint32_t* out, const std::uint32_t* in, std::int64_t n, void* workspace,
                    std::size_t workspace_bytes, cudaStream_t stream);

}  // namespace foxhunt::gpu
