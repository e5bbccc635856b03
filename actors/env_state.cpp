#include "actors/env_state.hpp"

#include <cstddef>
#include <fstream>
#include <span>
#include <stdexcept>
#include <string>

#include "gpu/atomic_file.hpp"
#include "gpu/check.hpp"
#include "gpu/checkpoint_io.hpp"
#include "rl/envs/cartpole.hpp"
#include "rl/envs/market.hpp"
#include "rl/envs/market_generator.hpp"
#include "rl/envs/obs_filter.hpp"

namespace foxhunt::actors {

std::vector<DeviceSpan> env_state_spans(rl::VecEnv& env) {
  if (auto* filter = dynamic_cast<rl::ObservationFilter*>(&env)) return env_state_spans(filter->inner());
  if (auto* cartpole = dynamic_cast<rl::CartPoleEnv*>(&env)) {
    const rl::CartPoleEnv::MutableState st = cartpole->mutable_state();
    const auto n = static_cast<std::size_t>(cartpole->num_envs());
    return {
        {"state", st.state, n * sizeof(float4)},
        {"episode_steps", st.episode_steps, n * sizeof(std::int32_t)},
        {"counter", st.counter, n * sizeof(std::uint64_t)},
        {"accum", st.accum, n * sizeof(rl::EpisodeAccum)},
    };
  }
  auto* market = dynamic_cast<rl::MarketEnv*>(&env);
  if (!market) return {};
  const rl::MarketState& st = market->state();
  const auto n = static_cast<std::size_t>(market->num_envs());
  const auto A = static_cast<std::size_t>(market->config().assets);
  const auto W = static_cast<std::size_t>(market->config().window);
  const std::size_t d = sizeof(double), i = sizeof(std::int32_t);
  std::vector<DeviceSpan> spans = {
      {"log_price", st.log_price, A * n * d},
      {"holdings", st.holdings, A * n * d},
      {"cost_basis", st.cost_basis, A * n * d},
      {"cash", st.cash, n * d},
      {"peak_equity", st.peak_equity, n * d},
      {"dsr_a", st.dsr_a, n * d},
      {"dsr_b", st.dsr_b, n * d},
      {"sum_ret", st.sum_ret, n * d},
      {"sum_ret_sq", st.sum_ret_sq, n * d},
      {"max_drawdown", st.max_drawdown, n * d},
      {"turnover", st.turnover, n * d},
      {"episode_reward", st.episode_reward, n * d},
      {"trades", st.trades, n * i},
      {"regime", st.regime, n * i},
      {"episode_step", st.episode_step, n * i},
      {"bar", st.bar, n * sizeof(std::int64_t)},
      {"counter", st.counter, n * sizeof(std::uint64_t)},
      {"ring", st.ring, n * W * A * sizeof(float)},
      {"tail", st.tail, n * (A + 3) * sizeof(float)},
      {"accum", st.accum, n * sizeof(rl::EpisodeAccum)},
  };
  if (rl::MarketGenerator* gen = market->generator()) {
    spans.push_back({"gen_returns", gen->returns(), gen->returns_bytes()});
    spans.push_back({"gen_step", gen->step_counter(), sizeof(std::uint64_t)});
  }
  return spans;
}

void write_spans(const std::filesystem::path& file, const std::vector<DeviceSpan>& spans, cudaStream_t stream) {
  FH_CHECK(cudaStreamSynchronize(stream));
  // Checkpoint I/O: the arrays come to the host, then the whole file is replaced atomically
  // (temp file, fsync, rename), so a failed save keeps the previous one.
  std::vector<std::string> headers;
  std::vector<std::vector<std::byte>> host(spans.size());
  std::vector<gpu::CheckpointCopy> copies(spans.size());
  headers.reserve(spans.size() + 1);
  headers.push_back("foxhunt-env-state v1 " + std::to_string(spans.size()) + "\n");
  for (std::size_t k = 0; k < spans.size(); ++k) {
    host[k].resize(spans[k].bytes);
    copies[k] = {host[k].data(), spans[k].ptr, spans[k].bytes};
    headers.push_back(spans[k].name + " " + std::to_string(spans[k].bytes) + "\n");
  }
  gpu::checkpoint_read(copies, stream);
  std::vector<std::span<const std::byte>> pieces{std::as_bytes(std::span<const char>(headers[0]))};
  for (std::size_t k = 0; k < spans.size(); ++k) {
    pieces.push_back(std::as_bytes(std::span<const char>(headers[k + 1])));
    pieces.push_back(std::span<const std::byte>(host[k]));
  }
  gpu::write_file_atomically(file, pieces, "environment state");
}

std::vector<std::pair<std::string, std::size_t>> read_span_headers(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + file.string());
  std::string magic, version;
  std::size_t count = 0;
  in >> magic >> version >> count;
  in.get();
  if (!in || magic != "foxhunt-env-state" || version != "v1")
    throw std::runtime_error(file.string() + ": not a foxhunt-env-state v1 file");
  const std::uintmax_t size = std::filesystem::file_size(file);
  std::vector<std::pair<std::string, std::size_t>> arrays;
  for (std::size_t k = 0; k < count; ++k) {
    std::string name;
    std::size_t bytes = 0;
    in >> name >> bytes;
    in.get();
    if (!in) throw std::runtime_error(file.string() + ": array " + std::to_string(k) + " has no header line");
    const auto at = static_cast<std::uintmax_t>(in.tellg());
    if (at + bytes > size)
      throw std::runtime_error(file.string() + ": truncated in \"" + name + "\" (" + std::to_string(bytes) +
                               " bytes declared, " + std::to_string(size - at) + " left)");
    in.seekg(static_cast<std::streamoff>(bytes), std::ios::cur);
    arrays.emplace_back(std::move(name), bytes);
  }
  return arrays;
}

void read_spans(const std::filesystem::path& file, const std::vector<DeviceSpan>& spans, cudaStream_t stream) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + file.string());
  std::string magic, version;
  std::size_t count = 0;
  in >> magic >> version >> count;
  in.get();
  if (magic != "foxhunt-env-state" || version != "v1" || count != spans.size())
    throw std::runtime_error(file.string() + ": not an environment state of this shape (" +
                             std::to_string(spans.size()) + " arrays expected)");
  std::vector<std::vector<char>> host(spans.size());
  for (std::size_t k = 0; k < spans.size(); ++k) {
    std::string name;
    std::size_t bytes = 0;
    in >> name >> bytes;
    in.get();
    if (!in || name != spans[k].name || bytes != spans[k].bytes)
      throw std::runtime_error(file.string() + ": array " + std::to_string(k) + " is \"" + name + "\" of " +
                               std::to_string(bytes) + " bytes, expected \"" + spans[k].name + "\" of " +
                               std::to_string(spans[k].bytes) + " (different env config or num_envs?)");
    host[k].resize(bytes);
    in.read(host[k].data(), static_cast<std::streamsize>(bytes));
    if (!in) throw std::runtime_error(file.string() + ": truncated in \"" + name + "\"");
  }
  for (std::size_t k = 0; k < spans.size(); ++k)
    if (spans[k].bytes > 0)
      FH_CHECK(cudaMemcpyAsync(spans[k].ptr, host[k].data(), spans[k].bytes, cudaMemcpyHostToDevice, stream));
  FH_CHECK(cudaStreamSynchronize(stream));  // the host vectors die here
}

}  // namespace foxhunt::actors
