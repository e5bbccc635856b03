#pragma once
// Launch-shape helpers shared by the kernels in gpu/. Device code only includes this.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "gpu/device.hpp"

namespace foxhunt::gpu {

inline constexpr int kBlock = 256;
// The shared memory a chunked kernel sizes its tiles for: sm_90's opt-in maximum per block. A
// fixed budget keeps workspace sizing a host-only computation; launchers check the device
// (max_shared_bytes_per_block).
inline constexpr std::size_t kSharedBudgetBytes = 227 * 1024;

// Blocks for a grid-stride loop over n items: enough to fill every SM several times, no more.
inline int grid_stride_blocks(std::int64_t n, int block = kBlock, int per_sm = 8) {
  std::int64_t needed = (n + block - 1) / block;
  std::int64_t cap = static_cast<std::int64_t>(sm_count()) * per_sm;
  return static_cast<int>(std::max<std::int64_t>(1, std::min(needed, cap)));
}

inline int ceil_div(std::int64_t a, std::int64_t b) { return static_cast<int>((a + b - 1) / b); }

}  // namespace foxhunt::gpu
