// Environment throughput: env-steps per second against N (2^12 .. 2^22) for CartPole-v1, the
// benchmark market (rl::MarketEnv on configs/markets/bench_ou.toml: one OU asset, three positions,
// 5 bps fees, 256-step episodes, a 32-return window) and an 8-asset correlated GBM market, with
// achieved GB/s next to the device-to-device copy bandwidth measured in the same run; then the
// benchmark market in PyTorch (bench/torch_baselines/envs.py, run by this program) and the ratio.
//
// Each call advances every environment T steps (T * N = 2^24 env-steps per call, T >= 1) with
// random actions from a device buffer, and writes every step's observation, reward and flags.
// Bytes counted per call: actions read once, every output written once, the state read and
// written as each environment's *_bytes function says. docs/envs.md explains the kernels.
// bench_ou.toml is read from <exe dir>/../share/foxhunt/configs/markets (the installed folder),
// else from the source tree's configs/markets.
#include <cuda_runtime.h>

#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench_util.hpp"
#include "gpu/device.hpp"
#include "gpu/launch.cuh"
#include "gpu/philox.cuh"
#include "rl/envs/cartpole.hpp"
#include "rl/envs/market.hpp"
#include "rl/envs/market_config.hpp"

namespace fs = std::filesystem;
using namespace foxhunt;

namespace {

constexpr std::int64_t kStepsPerCall = std::int64_t{1} << 24;

__global__ void fill_discrete(std::int32_t* a, std::int64_t count, int choices, std::uint64_t seed) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t e = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < count; e += stride)
    a[e] = static_cast<std::int32_t>(gpu::random_bits4(seed, 0, static_cast<std::uint64_t>(e)).x % choices);
}
__global__ void fill_continuous(float* a, std::int64_t count, std::uint64_t seed) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t e = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < count; e += stride)
    a[e] = 2.0f * gpu::uniform4(seed, 1, static_cast<std::uint64_t>(e)).x - 1.0f;
}

struct Row {
  std::string env;
  std::int64_t n = 0, t = 0;
  double steps_per_s = 0, bytes_per_step = 0, gbs = 0, pct = 0;
};

// Times env.step over T steps; `bytes` is the minimum traffic of one call.
Row measure(const std::string& name, rl::VecEnv& env, std::int64_t t, std::int64_t bytes, double copy_gbs,
            cudaStream_t stream) {
  const std::int64_t n = env.num_envs();
  const rl::ActionSpace space = env.action_space();
  const std::int64_t width = space.width();
  gpu::DeviceBuffer<float> obs(static_cast<std::size_t>(t * n * env.obs_dim()));
  gpu::DeviceBuffer<float> reward(static_cast<std::size_t>(t * n));
  gpu::DeviceBuffer<std::uint8_t> terminated(static_cast<std::size_t>(t * n)),
      truncated(static_cast<std::size_t>(t * n));
  gpu::DeviceBuffer<std::int32_t> discrete;
  gpu::DeviceBuffer<float> continuous;
  rl::ActionInput actions;
  const int blocks = gpu::grid_stride_blocks(t * n * width);
  if (space.kind == rl::ActionSpace::Kind::discrete) {
    discrete = gpu::DeviceBuffer<std::int32_t>(static_cast<std::size_t>(t * n * width));
    fill_discrete<<<blocks, gpu::kBlock, 0, stream>>>(discrete.data(), t * n * width, space.choices, 42);
    FH_CHECK_LAUNCH();
    actions.discrete = discrete.data();
  } else {
    continuous = gpu::DeviceBuffer<float>(static_cast<std::size_t>(t * n * width));
    fill_continuous<<<blocks, gpu::kBlock, 0, stream>>>(continuous.data(), t * n * width, 42);
    FH_CHECK_LAUNCH();
    actions.continuous = continuous.data();
  }
  env.reset(obs.data(), gpu::DType::f32, 7, stream);
  const rl::StepOutputs out{obs.data(), reward.data(), terminated.data(), truncated.data(), nullptr, gpu::DType::f32};
  const double ms = bench::median_ms([&](int) { env.step(out, actions, t, stream); }, stream, 3, 15);
  Row r;
  r.env = name;
  r.n = n;
  r.t = t;
  r.steps_per_s = static_cast<double>(n) * t / (ms * 1e-3);
  r.bytes_per_step = static_cast<double>(bytes) / (static_cast<double>(n) * t);
  r.gbs = static_cast<double>(bytes) / (ms * 1e-3) / 1e9;
  r.pct = 100.0 * r.gbs / copy_gbs;
  return r;
}

std::int64_t cartpole_bytes(std::int64_t n, std::int64_t t) {
  // per step: action 4, obs 16, reward 4, flags 2; state (float4, steps, counter) once per call
  return n * t * (4 + 16 + 4 + 2) + 2 * n * (16 + 4 + 8);
}

// configs/markets/gbm8_correlated.toml, built in code so the bench needs no file.
rl::MarketConfig gbm8_config() {
  rl::MarketConfig c;
  c.assets = 8;
  c.process = rl::PriceProcess::gbm;
  c.initial_price.assign(8, 100.0);
  for (int a = 0; a < 8; ++a) {
    c.mu.push_back(0.02 + 0.01 * a);
    c.sigma.push_back(0.15 + 0.02 * a);
  }
  c.correlation.assign(64, 0.3);
  for (int a = 0; a < 8; ++a) c.correlation[a * 8 + a] = 1.0;
  c.action = rl::ActionMode::discrete;
  c.levels = {-1.0, -0.5, 0.0, 0.5, 1.0};
  c.fee_bps = 1.0;
  c.half_spread_bps = 1.0;
  c.slippage = 0.1;
  c.liquidity = 1e7;
  c.position_limit = 0.25;
  c.leverage_cap = 2.0;
  c.borrow_rate = 0.01;
  c.reward = rl::RewardKind::log_return;
  rl::validate(c);
  return c;
}

// configs/markets/bench_ou.toml: beside the installed binary, else in the source tree.
fs::path find_bench_ou() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const fs::path p = exe.parent_path() / ".." / "share" / "foxhunt" / "configs" / "markets" / "bench_ou.toml";
    if (fs::exists(p)) return p;
  }
  const fs::path src = fs::path(__FILE__).parent_path() / ".." / "configs" / "markets" / "bench_ou.toml";
  if (fs::exists(src)) return src;
  return {};
}

fs::path find_baseline_script() {
  if (const char* dir = std::getenv("FOXHUNT_BENCH_SCRIPTS")) {
    const fs::path p = fs::path(dir) / "envs.py";
    if (fs::exists(p)) return p;
  }
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const fs::path p = exe.parent_path() / ".." / "share" / "foxhunt" / "bench" / "envs.py";
    if (fs::exists(p)) return p;
  }
  const fs::path src = fs::path(__FILE__).parent_path() / "torch_baselines" / "envs.py";  // build tree
  if (fs::exists(src)) return src;
  return {};
}

// Runs the PyTorch baseline; returns steps/s by N, or sets `why` to the reason it could not run.
std::map<std::int64_t, double> run_baseline(const std::vector<std::int64_t>& sizes, std::string* why) {
  std::map<std::int64_t, double> result;
  const fs::path script = find_baseline_script();
  if (script.empty()) {
    *why = "envs.py not found (set FOXHUNT_BENCH_SCRIPTS to the folder holding it)";
    return result;
  }
  std::string cmd = "python3 '" + script.string() + "'";
  for (auto n : sizes) {
    cmd += ' ';  // (two appends: GCC 12 warns falsely on `" " + std::to_string(n)`)
    cmd += std::to_string(n);
  }
  cmd += " 2>&1";
  std::fflush(stdout);
  FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) {
    *why = "could not start python3";
    return result;
  }
  std::string skip, last;
  char line[4096];
  while (std::fgets(line, sizeof line, pipe) != nullptr) {
    std::string s(line);
    while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
    if (s.rfind("RESULT ", 0) == 0) {
      std::int64_t n = 0;
      double sps = 0;
      std::istringstream in(s.substr(7));
      std::string tok;
      while (in >> tok) {
        if (tok.rfind("n=", 0) == 0) n = std::stoll(tok.substr(2));
        if (tok.rfind("steps_per_s=", 0) == 0) sps = std::stod(tok.substr(12));
      }
      if (n > 0) result[n] = sps;
    } else if (s.rfind("SKIP ", 0) == 0) {
      skip = s.substr(5);
    } else if (!s.empty()) {
      last = s;
    }
  }
  const int status = pclose(pipe);
  if (result.empty()) {
    if (!skip.empty())
      *why = skip;
    else if (WIFEXITED(status) && WEXITSTATUS(status) == 127)
      *why = "python3 not found";
    else
      *why = "envs.py produced no result" + (last.empty() ? std::string() : " (last line: " + last + ")");
  }
  return result;
}

std::string pow2(std::int64_t n) {
  int k = 0;
  while ((std::int64_t{1} << k) < n) ++k;
  return "2^" + std::to_string(k);
}

}  // namespace

int main() {
  std::string why;
  if (gpu::device_count(&why) == 0) {
    std::printf("no CUDA device: %s\n", why.c_str());
    return 1;
  }
  gpu::Stream stream;
  const double copy_gbs = bench::copy_bandwidth_gbs(std::size_t{1} << 30, stream);
  std::printf("device-to-device copy bandwidth (1 GiB): %.1f GB/s\n", copy_gbs);

  std::vector<std::int64_t> sizes;
  for (int k = 12; k <= 22; ++k) sizes.push_back(std::int64_t{1} << k);

  const fs::path bench_file = find_bench_ou();
  if (bench_file.empty()) {
    std::printf(
        "configs/markets/bench_ou.toml not found (beside the binary in ../share/foxhunt/configs/markets, "
        "or in the source tree)\n");
    return 1;
  }
  const rl::MarketConfig bench_ou = rl::load_market_config(bench_file);
  const rl::MarketConfig gbm8 = gbm8_config();

  std::vector<Row> rows;
  std::map<std::int64_t, double> ours;  // bench_ou steps/s by N
  for (auto n : sizes) {
    const std::int64_t t = std::max<std::int64_t>(1, kStepsPerCall / n);
    {
      rl::CartPoleEnv env(n);
      rows.push_back(measure("cartpole", env, t, cartpole_bytes(n, t), copy_gbs, stream));
    }
    {
      rl::MarketEnv env(bench_ou, n);
      rows.push_back(measure("bench_ou", env, t, env.step_bytes(t, gpu::DType::f32), copy_gbs, stream));
      ours[n] = rows.back().steps_per_s;
      rows.push_back(measure("bench_ou T=1", env, 1, env.step_bytes(1, gpu::DType::f32), copy_gbs, stream));
    }
    {
      rl::MarketEnv env(gbm8, n);
      const std::int64_t tm = std::max<std::int64_t>(1, t / 4);  // obs rows are 8x wider: keep buffers bounded
      rows.push_back(measure("gbm8_market", env, tm, env.step_bytes(tm, gpu::DType::f32), copy_gbs, stream));
    }
  }

  std::printf("\n%-18s %8s %6s %14s %10s %10s %8s\n", "env", "N", "T", "env-steps/s", "B/step", "GB/s", "% copy");
  bench::print_rule(80);
  for (const Row& r : rows)
    std::printf("%-18s %8s %6lld %14.4e %10.1f %10.1f %7.1f%%\n", r.env.c_str(), pow2(r.n).c_str(),
                static_cast<long long>(r.t), r.steps_per_s, r.bytes_per_step, r.gbs, r.pct);

  std::printf("\nPyTorch baseline (bench/torch_baselines/envs.py, eager, one op per line):\n");
  std::string skip_reason;
  const auto torch = run_baseline(sizes, &skip_reason);
  if (torch.empty()) {
    std::printf("baseline skipped: %s\n", skip_reason.c_str());
  } else {
    std::printf("%-14s %8s %16s %16s %10s\n", "env", "N", "foxhunt steps/s", "torch steps/s", "ratio");
    bench::print_rule(70);
    for (auto n : sizes) {
      const auto it = torch.find(n);
      if (it == torch.end()) continue;
      std::printf("%-14s %8s %16.4e %16.4e %9.1fx\n", "bench_ou", pow2(n).c_str(), ours[n], it->second,
                  ours[n] / it->second);
    }
  }

  std::printf("\n");
  const struct {
    std::int64_t n;
    double target;
  } targets[] = {{std::int64_t{1} << 20, 1e10}, {std::int64_t{1} << 16, 5e9}};
  for (const auto& tg : targets)
    std::printf("TARGET bench_ou env-steps/s at N=%s: %.3e (target >= %.0e): %s\n", pow2(tg.n).c_str(), ours[tg.n],
                tg.target, ours[tg.n] >= tg.target ? "PASS" : "FAIL");
  return 0;
}
