#pragma once
// Checkpoint I/O's door to the host: besides the exit (gpu/exit.hpp), the one sanctioned
// device-to-host copy in production code. Every checkpoint writer (the parameter arena, the DQN
// learner's state, the replay buffer and its snapshot, the environment state, the replay stage's
// pending priorities) reads device memory through these functions and nothing else, so a raw
// device-to-host copy anywhere else in gpu/, models/, rl/, actors/ or apps/ is a defect, which
// tests/gpu/no_raw_readback_test.cpp checks by reading the sources.
//
// Stream-ordered: the copies are enqueued on `stream`, behind the work already queued there, and
// the call returns after synchronizing `stream`, so the host bytes are final on return. Whatever
// wrote the data on another stream must be ordered before that (an event `stream` waited on, or
// that stream synchronized). The call blocks the host: checkpoints only, never a hot path.
#include <cuda_runtime.h>

#include <cstddef>
#include <span>
#include <vector>

namespace foxhunt::gpu {

// One device range and where its bytes land on the host.
struct CheckpointCopy {
  void* host = nullptr;
  const void* device = nullptr;
  std::size_t bytes = 0;  // 0: nothing to copy (the pointers may then be null)
};

// Copies every range to the host, then synchronizes `stream` once.
void checkpoint_read(std::span<const CheckpointCopy> copies, cudaStream_t stream);

// bytes from device to host, then synchronizes `stream`.
void checkpoint_read(void* host, const void* device, std::size_t bytes, cudaStream_t stream);

// count elements of T from device into a new host vector, then synchronizes `stream`.
template <class T>
std::vector<T> checkpoint_read(const T* device, std::size_t count, cudaStream_t stream) {
  std::vector<T> host(count);
  checkpoint_read(host.data(), device, count * sizeof(T), stream);
  return host;
}

}  // namespace foxhunt::gpu
