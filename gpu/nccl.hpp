#pragma once
// NcclCommunicator: one rank of an NCCL communicator (one GPU of a data-parallel learner), and the
// collectives the learners use, each enqueued on a stream the caller gives (capturable in a CUDA
// graph: nothing here synchronizes or touches the host between the calls).
//
//   NcclId id = nccl_unique_id();                        // rank 0; the other ranks receive it
//   NcclCommunicator comm(id, world, rank);              // blocks until every rank has joined
//   comm.all_reduce_mean(arena.grads(), arena.padded_count(), stream, bucket_floats);
//   comm.max_u32(&state->skip, 1, stream);              // one decision for every replica
//
// Errors (a failed NCCL or CUDA call) throw foxhunt::gpu::Error through FH_CHECK (file, line, the
// library's own message). abort() ends the communicator from any thread, also while a collective
// hangs because a peer died (ncclCommAbort); the destructor then only frees what is left.
// NVLink multicast (NVLS) is off unless the environment already says otherwise: the GPU hosts lend
// it only at times (shared/GPU.md), and a run must not depend on it.
#include <cuda_runtime.h>
#include <nccl.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace foxhunt::gpu {

// The opaque id rank 0 makes and every rank passes to its communicator (NCCL_UNIQUE_ID_BYTES).
using NcclId = std::array<std::uint8_t, NCCL_UNIQUE_ID_BYTES>;

// A fresh id (rank 0 only; it opens NCCL's bootstrap listener on this host).
NcclId nccl_unique_id();
// The id as lowercase hex (2 * NCCL_UNIQUE_ID_BYTES characters) and back: how it travels in a
// CAF message. std::invalid_argument for text of another length or with a non-hex character.
std::string to_hex(const NcclId& id);
NcclId nccl_id_from_hex(const std::string& hex);
// "major.minor.patch" of the NCCL library loaded at run time.
std::string nccl_version();

class NcclCommunicator {
 public:
  // Joins rank `rank` of `world` on the current CUDA device; blocks until all ranks have called it
  // with the same id. std::invalid_argument unless 1 <= world and 0 <= rank < world.
  NcclCommunicator(const NcclId& id, int world, int rank);
  // Every rank of a run in this process: rank r on devices[r], all made by this thread in one NCCL
  // group (ncclCommInitRank per device between ncclGroupStart and ncclGroupEnd), so no rank waits
  // for a thread that never comes. The current device is restored.
  static std::vector<std::unique_ptr<NcclCommunicator>> for_local_devices(const std::vector<int>& devices);
  ~NcclCommunicator();
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int world() const noexcept { return world_; }
  int rank() const noexcept { return rank_; }
  ncclComm_t get() const noexcept { return comm_; }

  // data (count floats) <- the mean over ranks of every rank's data, in place. bucket_floats > 0
  // splits it into all-reduces of at most that many floats (one NCCL group, so they are launched
  // together); 0: one all-reduce. The result is the same on every rank (NCCL's reduction order does
  // not depend on the rank); with world 1 it is data, bit for bit (the mean of one value).
  void all_reduce_mean(float* data, std::int64_t count, cudaStream_t stream, std::int64_t bucket_floats = 0);
  // flags (count) <- the element-wise maximum over ranks, in place: "any rank said yes".
  void max_u32(std::uint32_t* flags, std::int64_t count, cudaStream_t stream);
  // data (count floats) <- rank root's data, in place, on every rank.
  void broadcast(float* data, std::int64_t count, int root, cudaStream_t stream);

  // Ends the communicator now: pending and hanging collectives return with an error, the streams
  // that ran them may be left in an error state. Safe from another thread, once or more.
  void abort() noexcept;
  bool aborted() const noexcept { return aborted_.load(); }
  // "" while healthy; else NCCL's asynchronous error (a peer gone, a network failure) as text.
  std::string async_error() const;

 private:
  NcclCommunicator(ncclComm_t comm, int world, int rank) : comm_(comm), world_(world), rank_(rank) {}
  ncclComm_t comm_ = nullptr;
  int world_ = 0, rank_ = 0;
  std::atomic<bool> aborted_{false};
};

}  // namespace foxhunt::gpu
