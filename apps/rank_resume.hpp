#pragma once
// Resuming a data-parallel run on a different number of ranks (docs/distributed.md, "Run
// directories and checkpoints"). Every rank is given rank 0's checkpoint (--resume: rank 0's run
// directory or one of its checkpoints); from the run rank 0's checkpoint belongs to (its world N,
// read from its config.resolved.toml) and this rank's config (world M, rank r):
//   r < min(N, M)   resumes its own checkpoint of the same step, <run0>.rank<r>/checkpoints/<step>
//                   (rank 0: <run0> itself): its replay shard and environments; the learner files
//                   are replicas of rank 0's, and rank 0's weights and Adam moments are broadcast
//                   to every rank when the learners start
//   r >= N          a new rank (DQN only): rank 0's learner files and counters, no replay shard
//                   (it starts empty; its first sample waits for one batch in it) and no collector
//                   state (its environments start from its own seed)
//   N > M           the shards of ranks M..N-1 are dropped (rank 0 logs them)
// Refused with std::invalid_argument naming the cause: rank 0's checkpoint not inside a run
// directory or without its config, a learner kind (DQN/PPO) or config hash (world and coordinator
// aside) other than this config's, a rank r < min(N, M) whose directory or checkpoint of the same
// step is missing, and a PPO run on more ranks than it had (a PPO checkpoint holds each rank's
// environments and rollout state, which a new rank cannot take from another).
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "actors/run_config.hpp"

namespace foxhunt::apps {

struct RankResumePlan {
  int old_world = 1;                              // N
  std::filesystem::path rank0_checkpoint;         // the learner state every rank takes
  std::optional<std::filesystem::path> own;       // r < min(N, M): this rank's own checkpoint
  std::vector<std::string> from_rank0;            // r >= N: the files taken from rank 0's checkpoint
  std::vector<int> dropped;                       // ranks whose shards this world drops (N > M)
};

// `rank0_checkpoint`: the checkpoint directory --resume resolved to (actors::resolve_checkpoint).
// `config`: this rank's, world and rank set.
RankResumePlan plan_rank_resume(const std::filesystem::path& rank0_checkpoint, const actors::RunConfig& config);

// The files of a checkpoint a new rank takes from rank 0's: the learner's, the counters and the
// kept configs; never the replay shard (replay.*) or the collector's state (collector.*, env.state,
// ppo.state).
bool is_rank0_file(const std::string& name);

// r >= N: builds `dir` (created; emptied first) as a checkpoint of links to the plan's from_rank0
// files of rank 0's checkpoint, and returns it; otherwise returns the plan's own checkpoint.
std::filesystem::path materialize_rank_resume(const RankResumePlan& plan, const std::filesystem::path& dir);

}  // namespace foxhunt::apps
