#include "rl/dqn/policy.hpp"

#include <cmath>
#include <fstream>
#include <random>
#include <span>
#include <stdexcept>
#include <string>

#include "gpu/atomic_file.hpp"
#include "gpu/check.hpp"
#include "gpu/checkpoint_io.hpp"

namespace foxhunt::rl {

void dqn_act(std::int32_t* actions, models::QNetwork& net, models::QNetwork::Workspace& ws, DqnState* state,
             const float* obs, std::int64_t rows, bool eval, std::uint64_t seed, gpu::BlasLane lane) {
  const bool noisy = net.spec().noisy;
  // Noisy nets explore through fresh noise per environment step (an update resamples its own).
  if (noisy && !eval) net.resample_noise(seed, &state->act_noise_counter, lane.stream);
  net.forward(ws, obs, rows, eval, lane);
  const bool greedy = eval || noisy;
  select_actions(actions, net.q(ws), greedy ? nullptr : &state->epsilon, seed, kActStream, &state->act_counter, rows,
                 net.spec().branches, net.spec().actions, lane.stream);
}

DqnPolicy::DqnPolicy(const DqnPolicyConfig& config, gpu::BlasLane lane) : config_(config), lane_(lane) {
  models::validate(config_.net);
  FH_EXPECT(config_.rows >= 1, "DqnPolicy: rows must be >= 1, got " + std::to_string(config_.rows));
  const auto& sc = config_.schedule;
  FH_EXPECT(std::isfinite(sc.epsilon_start) && std::isfinite(sc.epsilon_end) && sc.epsilon_start >= 0.f &&
                sc.epsilon_start <= 1.f && sc.epsilon_end >= 0.f && sc.epsilon_end <= 1.f && sc.epsilon_steps >= 0,
            "DqnPolicy: epsilon_start and epsilon_end must be in [0, 1], epsilon_steps >= 0");
  FH_EXPECT(lane_.stream != nullptr, "DqnPolicy: needs a created stream (graph capture), not the default stream");
  const cudaStream_t s = lane_.stream;
  net_ = std::make_unique<models::QNetwork>(config_.net, "", kOnlineNoiseStreams);
  net_->declare(arena_);
  arena_.finalize(s);
  std::mt19937_64 rng(config_.seed);
  net_->init(arena_, rng, s);
  net_->bind(arena_);
  ws_ = net_->make_workspace(config_.rows);

  DqnState init{};  // as DqnLearner's: its state file and this one are the same record
  init.relu_units = net_->relu_units();
  init.epsilon = sc.epsilon_start;
  init.beta = sc.beta_start;
  init.lr = sc.lr_start;
  state_ = gpu::DeviceBuffer<DqnState>(1);
  state_.upload(std::span<const DqnState>(&init, 1), s);
  FH_CHECK(cudaStreamSynchronize(s));  // set-up: host values above must be uploaded before they die
}

void DqnPolicy::act(std::int32_t* actions, const float* obs, std::int64_t rows, bool eval) {
  FH_EXPECT(rows >= 1 && rows <= config_.rows, "DqnPolicy::act: rows must be in [1, rows = " +
                                                   std::to_string(config_.rows) + "], got " + std::to_string(rows));
  dqn_act(actions, *net_, ws_, state_.data(), obs, rows, eval, config_.seed, lane_);
}

void DqnPolicy::after_env_step(std::int64_t num_envs) {
  dqn_after_env_step(state_.data(), config_.schedule, num_envs, lane_.stream);
}

void DqnPolicy::load_weights(const float* params, std::int64_t floats) {
  FH_EXPECT(params != nullptr && floats == arena_.padded_count(),
            "DqnPolicy::load_weights: needs " + std::to_string(arena_.padded_count()) +
                " floats (the network's), got " + std::to_string(floats));
  FH_CHECK(cudaMemcpyAsync(arena_.params(), params, static_cast<std::size_t>(floats) * sizeof(float),
                           cudaMemcpyDeviceToDevice, lane_.stream));
}

void DqnPolicy::load_weights(const std::filesystem::path& file) { arena_.load(file, lane_.stream); }

void DqnPolicy::save(const std::filesystem::path& stem) {
  const cudaStream_t s = lane_.stream;
  arena_.save(stem.string() + ".online.safetensors", s);
  DqnState host{};
  gpu::checkpoint_read(&host, state_.data(), sizeof host, s);
  gpu::write_file_atomically(stem.string() + ".state.bin", {std::as_bytes(std::span<const DqnState>(&host, 1))},
                             "DqnPolicy state");
}

void DqnPolicy::load(const std::filesystem::path& stem) {
  const cudaStream_t s = lane_.stream;
  std::ifstream f(stem.string() + ".state.bin", std::ios::binary);
  DqnState host{};
  f.read(reinterpret_cast<char*>(&host), sizeof host);
  if (!f || f.gcount() != static_cast<std::streamsize>(sizeof host))
    throw std::runtime_error("DqnPolicy::load: cannot read " + stem.string() + ".state.bin (" +
                             std::to_string(sizeof host) + " bytes expected)");
  arena_.load(stem.string() + ".online.safetensors", s);
  state_.upload(std::span<const DqnState>(&host, 1), s);
  FH_CHECK(cudaStreamSynchronize(s));
}

}  // namespace foxhunt::rl
