#pragma once
// The device state of a vectorized environment as a list of raw spans, for checkpoints (an exact
// resume needs every array the step kernel reads: prices, holdings, counters, RNG counters,
// observation rings, episode accumulators). Only what rl/envs exposes can be listed:
//   rl::MarketEnv   every array of rl::MarketState (MarketEnv::state()), sized from its config,
//                   and a generated market's sampler state (gen_returns, gen_step);
//                   the env's seed and "started" flag come from reset() with the run's seed.
//   rl::CartPoleEnv state, episode_steps, counter (the Philox counter of the next reset draw) and
//                   accum (CartPoleEnv::mutable_state()); seed and "started" as for markets.
// The observations the collector keeps (current and last final) are its own buffers: the DQN
// collector writes them beside these (DqnCollectorStage::checkpoint_job).
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "rl/envs/vec_env.hpp"

namespace foxhunt::actors {

struct DeviceSpan {
  std::string name;
  void* ptr = nullptr;  // device memory
  std::size_t bytes = 0;
};

// Empty when the environment's state cannot be captured (an env kind not listed above).
std::vector<DeviceSpan> env_state_spans(rl::VecEnv& env);

// Writes the spans (synchronizes `stream` first, then copies device to host: checkpoints only) as
// one file: a header line "foxhunt-env-state v1 <count>", then per span "<name> <bytes>\n" and the
// raw bytes. Throws std::runtime_error naming the file.
void write_spans(const std::filesystem::path& file, const std::vector<DeviceSpan>& spans, cudaStream_t stream);
// The arrays such a file holds, as (name, bytes), without reading their data (host only: the
// checkpoint validator). std::runtime_error naming the file when the header is malformed or the
// file is shorter than its arrays.
std::vector<std::pair<std::string, std::size_t>> read_span_headers(const std::filesystem::path& file);
// Reads such a file into the spans (names and sizes must match: std::runtime_error naming the
// first mismatch) and uploads on `stream`; synchronizes before returning.
void read_spans(const std::filesystem::path& file, const std::vector<DeviceSpan>& spans, cudaStream_t stream);

}  // namespace foxhunt::actors
