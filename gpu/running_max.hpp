#pragma once
// A running maximum kept in device memory (the replay's max priority): raised by a batch of new
// values without leaving the device.
#include <cuda_runtime.h>

#include <cstdint>

namespace foxhunt::gpu {

// *running_max = max(*running_max, values[0..n)). *running_max must hold a value >= 0 (e.g. start
// it at 0). Negative values and NaNs in `values` are ignored. One atomic per block (block
// reduction first); the result is deterministic (max is order-independent). Any alignment works.
void raise_max_nonneg(float* running_max, const float* values, std::int64_t n, cudaStream_t stream);

}  // namespace foxhunt::gpu
