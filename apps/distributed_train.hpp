#pragma once
// A data-parallel run (docs/distributed.md): one rank per process (`foxhunt train --config F
// --rank R --world W --coordinator HOST:PORT`, which `foxhunt launch` starts once per local GPU),
// or every rank in this process (`foxhunt train --config F --gpus N`).
#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>

#include "apps/commands.hpp"
#include "apps/run_checks.hpp"

namespace foxhunt::apps {

// Exit codes a rank adds to train's (0 done, 1 failed, 2 refused config or arguments).
inline constexpr int kRendezvousFailedExit = 4;  // refused by rank 0, rank 0 unreachable, a rank never came
inline constexpr int kPeerLostExit = 3;          // another rank died or lost its connection: this one ended

struct DistributedArgs {
  int rank = -1, world = 0, device = -1;
  std::string coordinator;
  // CPU-only: the rendezvous (config hash, build and world check, the NCCL id), then hold_ms
  // milliseconds of watching the other ranks, and no training (tests of the protocol; no device).
  bool rendezvous_only = false;
  std::int64_t hold_ms = 0;
  bool given() const { return rank >= 0 || world > 0 || !coordinator.empty(); }
};

void add_distributed_options(CLI::App& cmd, DistributedArgs& args);

// Runs the rank: checks, rendezvous, NCCL communicator, training (the stage options carry the
// replica), the exit code (kPeerLostExit with a message naming the lost rank and cause).
int train_rank(const DistributedArgs& args, CheckedRun run, const std::string& run_dir, bool overwrite, Console& io);

// Runs ranks 0..gpus-1 in this process, rank r on device r (actors::run_local_ranks): checks, each
// rank's run directory (rank 0's `run_dir`, rank r's `<run_dir>.rank<r>`, as foxhunt launch), one
// log (rank 0's train.log), the exit code (the failed rank named).
int train_local_ranks(int gpus, CheckedRun run, const std::string& run_dir, bool overwrite, Console& io);

}  // namespace foxhunt::apps
