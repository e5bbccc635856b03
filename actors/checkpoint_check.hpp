#pragma once
// Whether a checkpoint directory can be resumed under a run config, decided on the host before
// anything is created or the device is touched (`foxhunt check --resume` and `foxhunt train
// --resume` both call it; the stages' own loaders check again as they upload). What is checked is
// what the stages read (actors/stage_factory.cpp's make_stages):
//   counters.json                  parses; counters >= 0; env_steps below run.total_env_steps
//   learner.{online,target}.safetensors   headers: every tensor of the Q-network the config
//                                  implies (name, F32, shape), Adam moments in online; nothing else
//   learner.state.bin              exactly sizeof(rl::DqnState) bytes
//   collector.json (optional)      num_envs / obs_dim of the config; then collector.policy.* as
//                                  learner.*, collector.env.bin and collector.obs.bin (array names
//                                  and sizes of the config's environment), collector.policies.bin
//   replay.safetensors (optional)  header: the replay's defining keys and the ring's shapes
//   replay.pending.safetensors     (k <= pipeline.batches, replay.batch_size) indices and td
// Each problem names the file, the tensor or key, and the expected against the found value.
#include <filesystem>
#include <string>
#include <vector>

#include "actors/run_config.hpp"

namespace foxhunt::actors {

// Every problem found (empty: resumable). Throws nothing for a bad checkpoint; std::invalid_argument
// only when the config itself cannot be sized (env_shape).
std::vector<std::string> check_checkpoint(const RunConfig& config, const std::filesystem::path& dir);

// check_checkpoint, and std::invalid_argument listing every problem (one per line) when any.
void require_resumable(const RunConfig& config, const std::filesystem::path& dir);

}  // namespace foxhunt::actors
