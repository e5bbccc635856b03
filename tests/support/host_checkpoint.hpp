#pragma once
// A checkpoint directory written on the host with exactly the files and shapes a run config
// implies (what actors/checkpoint_check expects), zero-filled: the CPU tests of `--resume`
// validation start from it and break one thing at a time.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "actors/env_shape.hpp"
#include "actors/run_config.hpp"
#include "actors/stage_factory.hpp"
#include "gpu/arena.hpp"
#include "gpu/safetensors.hpp"
#include "models/q_network.hpp"
#include "rl/dqn/state.hpp"

namespace foxhunt::test {

// The network's tensors of `config`, as (name, shape) in declaration order.
inline std::vector<std::pair<std::string, std::vector<std::int64_t>>> network_tensors(const actors::RunConfig& c) {
  const actors::EnvShape env = actors::env_shape(c);
  gpu::ParameterArena arena;
  models::QNetwork(actors::dqn_learner_config(c, env.obs_dim, env.branches, env.actions).net).declare(arena);
  std::vector<std::pair<std::string, std::vector<std::int64_t>>> out;
  for (const auto& e : arena.entries())
    out.emplace_back(e.name, std::vector<std::int64_t>(e.shape.dims.begin(), e.shape.dims.begin() + e.shape.rank));
  return out;
}

inline void write_arena_file(const std::filesystem::path& path, const actors::RunConfig& c, bool adam) {
  const auto tensors = network_tensors(c);
  std::vector<std::vector<float>> data;
  std::vector<gpu::SafetensorsTensor> list;
  data.reserve(tensors.size() * 3);
  for (const char* prefix : {"", "adam_m.", "adam_v."}) {
    if (!adam && *prefix) break;
    for (const auto& [name, shape] : tensors) {
      std::int64_t n = 1;
      for (auto d : shape) n *= d;
      data.emplace_back(static_cast<std::size_t>(n), 0.f);
      list.push_back({prefix + name, gpu::DType::f32, shape, std::as_bytes(std::span<const float>(data.back()))});
    }
  }
  gpu::write_safetensors_file(path, list, {{"format", "foxhunt-arena"}, {"version", "1"}});
}

// <dir>/counters.json, learner.{online,target}.safetensors, learner.state.bin.
inline void write_host_checkpoint(const std::filesystem::path& dir, const actors::RunConfig& c,
                                  std::int64_t env_steps = 1000) {
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "counters.json") << "{\"env_steps\": " << env_steps
                                       << ", \"updates\": 10, \"policy_version\": 1}\n";
  write_arena_file(dir / "learner.online.safetensors", c, true);
  write_arena_file(dir / "learner.target.safetensors", c, false);
  const std::vector<char> state(sizeof(rl::DqnState), 0);
  std::ofstream(dir / "learner.state.bin", std::ios::binary)
      .write(state.data(), static_cast<std::streamsize>(state.size()));
}

}  // namespace foxhunt::test
