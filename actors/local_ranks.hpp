#pragma once
// Every rank of a data-parallel run in this process: one thread and one GPU per rank, the NCCL
// communicators made here in one group (no rendezvous: gpu::NcclCommunicator::for_local_devices), rank 0's
// progress reports extended with the world/ aggregate of every rank's latest metrics, and one
// rank's failure (an exception, a failed run, a learner that stalled) ending the others: every
// communicator is aborted (a collective waiting for the failed rank returns) and every run stops,
// writing its final checkpoint as at a stop. `foxhunt train --gpus N` (docs/distributed.md).
#include <atomic>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "actors/run_config.hpp"
#include "actors/runtime.hpp"

namespace foxhunt::actors {

struct LocalRank {
  RunConfig config;               // distributed.rank, distributed.world, run.device and the rank's seed set
  std::filesystem::path run_dir;  // created
  std::optional<std::filesystem::path> resume;  // a checkpoint directory
};

struct LocalRanksRequest {
  std::vector<LocalRank> ranks;                   // rank r at index r, on device ranks[r].config.run.device
  const std::atomic<int>* stop_signal = nullptr;  // nonzero: stop every rank gracefully (SIGINT/SIGTERM)
  bool console = true;                            // rank 0's live progress line on stderr
  // Called after each progress report of each rank, from that rank's threads (tests).
  std::function<void(int rank, const ProgressSnapshot&)> observer;
  // A rank whose streams did not drain after a stall (RunResult::undrained): called on its thread
  // before anything frees its device memory; the process is expected to end there (std::_Exit).
  std::function<void(int rank, int exit_code)> on_undrained;
};

struct LocalRankResult {
  RunResult result;
  std::string error;  // an exception that ended the rank (setup, communicator), else ""
  bool ran = false;   // its run returned a result
};

struct LocalRanksResult {
  std::vector<LocalRankResult> ranks;
  int first_failed = -1;  // the rank whose failure ended the others (-1: none failed)
  std::string cause;      // its reason
  // 0 when no rank failed and every run ended with exit code 0 (its final checkpoint written).
  int exit_code() const;
};

// Runs every rank to its end; throws std::invalid_argument for an empty or inconsistent request
// (ranks out of order, world != ranks.size(), two ranks on one device).
LocalRanksResult run_local_ranks(const LocalRanksRequest& request);

}  // namespace foxhunt::actors
