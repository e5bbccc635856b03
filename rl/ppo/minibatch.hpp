#pragma once
// Minibatches of a PPO update, drawn and gathered on the device.
//
// random_permutation: key_i = word x of Philox(seed, stream_id, counter = *step * n + i)
// (gpu::random_bits4), i = 0..n-1; perm = the indices sorted by key with cub::DeviceRadixSort
// (stable, so equal keys keep index order). The update takes minibatch m of an epoch as
// perm[m * B, (m + 1) * B). *step is device memory and is not advanced here: the caller's graph
// calls advance_counter once per epoch, so a captured update reshuffles at every replay.
//
// gather_minibatch: out[j] = in[indices[j]] for every array given (rows of obs_dim, action_width
// or one element), all in one launch, a warp per output row. The rollout's (T, N) arrays are
// indexed flat (t * N + i). obs is converted to f32 from the rollout's dtype (f32 or bf16).
//
// Graph-capturable (no host syncs, allocations or reads) and deterministic.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "gpu/tensor.hpp"

namespace foxhunt::rl::ppo {

// Workspace of random_permutation for n items (keys in/out, indices in, CUB's temporary storage).
std::size_t permutation_workspace_bytes(std::int64_t n);

// perm (n): a uniformly random permutation of 0 .. n-1 (n <= INT32_MAX). workspace:
// permutation_workspace_bytes(n) bytes, 256-byte aligned (cudaMalloc's alignment). n == 0 launches nothing.
void random_permutation(std::int32_t* perm, std::int64_t n, std::uint64_t seed, std::uint32_t stream_id,
                        const std::uint64_t* step, void* workspace, cudaStream_t stream);

// Rollout arrays to gather from; a null pointer (with its partner in GatherOut) is skipped.
struct GatherSpec {
  const void* obs;  // (rows_total, obs_dim) in obs_dtype (f32 or bf16)
  gpu::DType obs_dtype;
  std::int64_t obs_dim;
  const std::int32_t* discrete;  // (rows_total, action_width)
  const float* raw;              // (rows_total, action_width)
  std::int64_t action_width;
  const float* logp;        // (rows_total)
  const float* advantages;  // (rows_total)
  const float* returns;     // (rows_total)
  const float* values;      // (rows_total)
};
struct GatherOut {
  float* obs;  // (rows, obs_dim) f32
  std::int32_t* discrete;
  float* raw;
  float* logp;
  float* advantages;
  float* returns;
  float* values;
};

// out.X[j] = in.X[indices[j]] for j < rows and every X whose in and out pointers are both set
// (one set without the other is an error).
void gather_minibatch(const GatherOut& out, const GatherSpec& in, const std::int32_t* indices, std::int64_t rows,
                      cudaStream_t stream);

// *counter += by on the device (a graph node that advances a Philox step counter).
void advance_counter(std::uint64_t* counter, cudaStream_t stream, std::uint64_t by = 1);

}  // namespace foxhunt::rl::ppo
