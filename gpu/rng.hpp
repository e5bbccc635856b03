#pragma once
// Device fills with counter-based random numbers (gpu/philox.cuh). Element i of a fill uses the
// Philox block at counter = counter_offset + i / 4, lane i % 4, so the output depends only on
// (seed, stream_id, counter_offset, i): never on the grid shape, the device, or the call's size.
// A fill of n elements consumes ceil(n / 4) counters; advance counter_offset by that (or more)
// between calls that must not repeat numbers.
#include <cuda_runtime.h>

#include <cstdint>

namespace foxhunt::gpu {

// Counters a fill of n elements consumes: ceil(n / 4).
inline std::uint64_t rng_counters_used(std::int64_t n) { return static_cast<std::uint64_t>((n + 3) / 4); }

// out[i] = lo + (hi - lo) * u_i, u_i in (0, 1] (uniform4): values in [lo, hi].   // (n)
void fill_uniform(float* out, std::int64_t n, float lo, float hi, std::uint64_t seed, std::uint32_t stream_id,
                  std::uint64_t counter_offset, cudaStream_t stream);

// out[i] = mean + stddev * z_i, z_i standard normal (Box-Muller, normal4).        // (n)
void fill_normal(float* out, std::int64_t n, float mean, float stddev, std::uint64_t seed, std::uint32_t stream_id,
                 std::uint64_t counter_offset, cudaStream_t stream);

}  // namespace foxhunt::gpu
