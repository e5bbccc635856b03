#pragma once
// DataParallel: what makes a learner one replica of a data-parallel learner (docs/distributed.md).
// A learner given an active DataParallel all-reduces (mean) its flat gradient buffer after the
// backward and before the gradient norm and Adam, agrees by a max-reduction on every device flag
// that gates an update (DQN's non-finite skip, PPO's KL stop), and takes rank 0's parameters
// when it joins. Inactive (no communicator, or world 1 without the test hook) the learner's graphs
// hold no collective at all: a single-GPU run is unchanged.
#include <cstdint>

#include "gpu/nccl.hpp"

namespace foxhunt::gpu {

struct DataParallel {
  NcclCommunicator* comm = nullptr;  // not owned; outlives the learner's graphs
  std::int64_t bucket_bytes = 0;     // gradient all-reduce bucket (0: one all-reduce)
  bool always = false;               // test hook: the collective path also with world 1

  bool active() const noexcept { return comm != nullptr && (comm->world() > 1 || always); }
  int rank() const noexcept { return comm ? comm->rank() : 0; }
  int world() const noexcept { return comm ? comm->world() : 1; }
  std::int64_t bucket_floats() const noexcept { return bucket_bytes / static_cast<std::int64_t>(sizeof(float)); }
};

// The seed of rank `rank`'s random streams (environments, exploration, noise, permutations): rank
// 0 keeps `seed` (a one-GPU run is the rank 0 of its own world), every other rank a distinct
// splitmix64 mix of (seed, rank), so no two ranks draw the same Philox streams.
constexpr std::uint64_t rank_seed(std::uint64_t seed, int rank) noexcept {
  if (rank == 0) return seed;
  std::uint64_t z = seed + 0x9e3779b97f4a7c15ull * static_cast<std::uint64_t>(rank);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace foxhunt::gpu
