// Prioritized replay: insert, sample (+ IS weights + gather) and priority update latency for
// batch 256 and 4096 at capacity 2^20 and 2^24 (64 f32 observations, discrete action, n = 3),
// beside (a) a C++ CPU sum tree doing the same operations (measured here) and (b) the same
// operations in PyTorch on the GPU (cumsum + searchsorted + gather + scatter), measured by
// bench/torch_baselines/replay.py, which this program runs after its own measurements.
//
// Ours: sample and update are timed as CUDA graph replays (how the learner runs them: captured
// once, replayed every step); insert is a direct call (its slots are reserved on the host each
// time, so it is not captured). The three are timed in the learner's order (insert, sample,
// update, repeated), and a "step" line sums them (a learning step's replay cost) for ours,
// PyTorch and the CPU tree: a design that moves work from one operation to another (e.g. a lazy
// tree rebuilt at sample time, measured on the H200 and dropped: step 42.7 us against 35.9 us)
// shows there. Each timing is one operation
// between two events, median of many, in two ways: "stream us" with the stream kept busy while the host enqueues the
// operation (the operation's own GPU time, what the asynchronous pipeline pays: the host runs ahead), and
// "host-launched us" with an idle stream (adds the host's launch latency). The targets and ratios
// use stream time; the PyTorch baseline is measured the same way (torch.cuda._sleep first).
//
// Script lookup: $FOXHUNT_BENCH_SCRIPTS/replay.py, then <exe>/../share/foxhunt/bench/replay.py
// (the install layout), then the source tree.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <new>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "bench_util.hpp"
#include "gpu/buffer.hpp"
#include "gpu/check.hpp"
#include "gpu/device.hpp"
#include "gpu/graph.hpp"
#include "gpu/launch.cuh"
#include "gpu/stream.hpp"
#include "rl/replay/replay_buffer.hpp"

using namespace foxhunt;

namespace {

constexpr std::int64_t kObsDim = 64;
constexpr float kAlpha = 0.6f, kBeta = 0.4f, kEps = 1e-6f, kGamma = 0.99f;
const std::vector<std::int64_t> kCapacities = {std::int64_t{1} << 20, std::int64_t{1} << 24};
const std::vector<std::int64_t> kBatches = {256, 4096};

using Key = std::tuple<std::string, std::int64_t, std::int64_t>;  // op, batch, capacity
struct Row {
  double ours_us = NAN, ours_launched_us = NAN, torch_us = NAN, cpu_us = NAN;
};
std::map<Key, Row> g_rows;
std::map<std::string, std::size_t> g_launches;  // kernel nodes per captured call (graphs of one op)
std::map<std::pair<std::int64_t, std::int64_t>, double> g_cycle_us;  // (batch, capacity): measured cycle
// (batch, capacity): the floor of this timing, an empty kernel and a kernel doing only the one
// dependent atomic per index that any priority update (or insert) of B random slots must do.
struct Floor {
  double empty_us = NAN, scatter_us = NAN;
};
std::map<std::pair<std::int64_t, std::int64_t>, Floor> g_floor;

// ---- device data ---------------------------------------------------------------------------

__device__ __forceinline__ std::uint32_t hash32(std::uint64_t i, std::uint32_t seed) {
  std::uint32_t x = static_cast<std::uint32_t>(i) * 0x9E3779B9u ^ seed ^ static_cast<std::uint32_t>(i >> 32);
  x ^= x >> 16;
  x *= 0x7FEB352Du;
  x ^= x >> 15;
  x *= 0x846CA68Bu;
  x ^= x >> 16;
  return x;
}
// Non-zero values in [lo, hi).
__global__ void fill_uniform(float* out, std::int64_t n, std::uint32_t seed, float lo, float hi) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    float v = lo + (hi - lo) * ((hash32(i, seed) >> 8) * (1.f / 16777216.f));
    out[i] = v == 0.f ? 1e-3f : v;
  }
}
__global__ void fill_actions(std::int32_t* out, std::int64_t n, std::uint32_t seed) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    out[i] = static_cast<std::int32_t>(hash32(i, seed) % 8);
}
// About 1% of steps end an episode, half of them by the time limit.
__global__ void fill_flags(std::uint8_t* terminated, std::uint8_t* truncated, std::int64_t n, std::uint32_t seed) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::uint32_t h = hash32(i, seed) % 200;
    terminated[i] = h == 0;
    truncated[i] = h == 1;
  }
}
__global__ void empty_kernel() {}

// One 64-bit atomicMax per index into a capacity-sized array: what a priority update must do at
// least (a leaf write per sampled slot, with its index loaded first), with nothing above the leaves.
__global__ void scatter_max_kernel(unsigned long long* slots, const std::int32_t* indices, std::int64_t n,
                                   unsigned long long stamp) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) atomicMax(slots + indices[i], stamp);
}

__global__ void fill_iota(std::int32_t* out, std::int64_t n, std::int64_t first) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    out[i] = static_cast<std::int32_t>(first + i);
}

template <class F>
void launch_fill(F kernel_launch, std::int64_t n) {
  if (n > 0) kernel_launch(gpu::grid_stride_blocks(n));
  FH_CHECK_LAUNCH();
}

// A collector's (steps, envs) block on the device with random contents.
struct SourceBlock {
  gpu::DeviceBuffer<float> obs, next_obs, rewards;
  gpu::DeviceBuffer<std::int32_t> actions;
  gpu::DeviceBuffer<std::uint8_t> terminated, truncated;
  rl::TransitionBatch batch;

  SourceBlock(std::int64_t steps, std::int64_t envs, const rl::TransitionLayout& layout, std::uint32_t seed,
              cudaStream_t s)
      : obs(static_cast<std::size_t>(steps * envs * kObsDim)),
        next_obs(obs.size()),
        rewards(static_cast<std::size_t>(steps * envs)),
        actions(rewards.size()),
        terminated(rewards.size()),
        truncated(rewards.size()) {
    const auto rows = static_cast<std::int64_t>(rewards.size());
    const auto n = static_cast<std::int64_t>(obs.size());
    launch_fill([&](int b) { fill_uniform<<<b, gpu::kBlock, 0, s>>>(obs.data(), n, seed, -2.f, 2.f); }, n);
    launch_fill([&](int b) { fill_uniform<<<b, gpu::kBlock, 0, s>>>(next_obs.data(), n, seed + 1, -2.f, 2.f); }, n);
    launch_fill([&](int b) { fill_uniform<<<b, gpu::kBlock, 0, s>>>(rewards.data(), rows, seed + 2, -1.f, 1.f); },
                rows);
    launch_fill([&](int b) { fill_actions<<<b, gpu::kBlock, 0, s>>>(actions.data(), rows, seed + 3); }, rows);
    launch_fill(
        [&](int b) { fill_flags<<<b, gpu::kBlock, 0, s>>>(terminated.data(), truncated.data(), rows, seed + 4); },
        rows);
    batch.layout = layout;
    batch.steps = steps;
    batch.envs = envs;
    batch.obs = obs.data();
    batch.next_obs = next_obs.data();
    batch.actions = actions.data();
    batch.rewards = rewards.data();
    batch.terminated = terminated.data();
    batch.truncated = truncated.data();
  }
};

// ---- ours ----------------------------------------------------------------------------------

// Median times of insert, sample and update run in that order (a learning step's replay work),
// each between two events, and of the whole cycle. busy: a busy-wait kernel keeps the stream
// occupied while the host enqueues the three (stream time, as bench::median_stream_ms); idle: the
// stream is drained before each operation (includes the host's launch latency).
struct Cycle {
  double op_us[3] = {NAN, NAN, NAN};
  double total_us = NAN;
};
Cycle median_cycle(const std::function<void()>& insert, const std::function<void()>& sample,
                   const std::function<void()>& update, cudaStream_t s, bool busy, int warmup = 10, int reps = 200) {
  const std::function<void()>* ops[3] = {&insert, &sample, &update};
  for (int i = 0; i < warmup; ++i)
    for (const auto* op : ops) (*op)();
  std::vector<gpu::Event> ev;
  for (int e = 0; e < 4; ++e) ev.emplace_back(true);
  std::vector<double> t[4];
  for (int r = 0; r < reps; ++r) {
    if (busy) {
      bench::detail::busy_wait_kernel<<<1, 1, 0, s>>>(200000);  // 200 us: covers enqueueing all three
      FH_CHECK_LAUNCH();
    }
    ev[0].record(s);
    for (int o = 0; o < 3; ++o) {
      if (!busy && o > 0) ev[static_cast<std::size_t>(o)].synchronize();
      (*ops[o])();
      ev[static_cast<std::size_t>(o) + 1].record(s);
    }
    ev[3].synchronize();
    for (int o = 0; o < 3; ++o)
      t[o].push_back(gpu::Event::elapsed_ms(ev[static_cast<std::size_t>(o)], ev[static_cast<std::size_t>(o) + 1]) *
                     1e3);
    t[3].push_back(gpu::Event::elapsed_ms(ev[0], ev[3]) * 1e3);
  }
  const auto median = [reps](std::vector<double>& v) {
    std::nth_element(v.begin(), v.begin() + reps / 2, v.end());
    return v[static_cast<std::size_t>(reps / 2)];
  };
  Cycle c;
  for (int o = 0; o < 3; ++o) c.op_us[o] = median(t[o]);
  c.total_us = median(t[3]);
  return c;
}

void bench_ours(std::int64_t capacity, cudaStream_t s) {
  rl::ReplayConfig cfg;
  cfg.capacity = capacity;
  cfg.layout.obs_dim = kObsDim;
  cfg.batch_size = 4096;
  cfg.n_step = 3;
  cfg.gamma = kGamma;
  cfg.alpha = kAlpha;
  cfg.beta = kBeta;
  cfg.beta_anneal_steps = 1000000;
  cfg.eps = kEps;
  cfg.seed = 12345;
  rl::ReplayBuffer rb(cfg, s);

  // Fill the ring (blocks of 2^20 rows) and give every slot a random priority.
  {
    const std::int64_t envs = 1024, steps = 1024;
    SourceBlock src(steps, envs, cfg.layout, 7, s);
    const int p = rb.add_producer(envs);
    for (std::int64_t filled = 0; filled < capacity; filled += steps * envs) rb.insert(p, src.batch, s);
    const std::int64_t chunk = std::int64_t{1} << 20;
    gpu::DeviceBuffer<std::int32_t> idx(static_cast<std::size_t>(chunk));
    gpu::DeviceBuffer<float> td(static_cast<std::size_t>(chunk));
    for (std::int64_t first = 0; first < capacity; first += chunk) {
      launch_fill([&](int b) { fill_iota<<<b, gpu::kBlock, 0, s>>>(idx.data(), chunk, first); }, chunk);
      launch_fill(
          [&](int b) {
            fill_uniform<<<b, gpu::kBlock, 0, s>>>(td.data(), chunk, static_cast<std::uint32_t>(first), 0.f, 3.f);
          },
          chunk);
      rb.update_priorities(idx.data(), td.data(), chunk, s);
    }
    FH_CHECK(cudaStreamSynchronize(s));
  }

  for (std::int64_t B : kBatches) {
    // insert: one (1, B) block per call from a producer with B envs (a direct call: its slots are
    // host counts chosen at each call).
    SourceBlock src(1, B, cfg.layout, 99, s);
    const int p = rb.add_producer(B);
    const auto insert = [&] { rb.insert(p, src.batch, s); };

    // sample + weights + gather, captured once.
    rl::SampledBatch out = rb.allocate_batch(B);
    gpu::CudaGraph sample;
    sample.capture(s, [&](cudaStream_t cs) { rb.sample(out.view(), cs); });
    g_launches["sample"] = sample.node_count();

    // priority update from |td| + eps on the sampled indices, captured once.
    gpu::DeviceBuffer<float> td(static_cast<std::size_t>(B));
    launch_fill([&](int b) { fill_uniform<<<b, gpu::kBlock, 0, s>>>(td.data(), B, 4242, -3.f, 3.f); }, B);
    gpu::CudaGraph update;
    update.capture(s, [&](cudaStream_t cs) { rb.update_priorities(out.view().indices, td.data(), B, cs); });
    g_launches["update"] = update.node_count();

    // The learner's order, so every timed sample rebuilds what the insert and the update before
    // it dirtied (a sample timed alone would find a clean tree after its first repetition).
    // The update is one kernel: a direct call, as the insert (a graph of one node adds only the
    // graph launch's own overhead, ~2 us of stream time on an H200).
    const auto update_direct = [&] { rb.update_priorities(out.view().indices, td.data(), B, s); };
    const Cycle busy = median_cycle(
        insert, [&] { sample.replay(s); }, update_direct, s, true);
    const Cycle idle = median_cycle(
        insert, [&] { sample.replay(s); }, update_direct, s, false);
    const char* ops[3] = {"insert", "sample", "update"};
    for (int o = 0; o < 3; ++o) {
      g_rows[{ops[o], B, capacity}].ours_us = busy.op_us[o];
      g_rows[{ops[o], B, capacity}].ours_launched_us = idle.op_us[o];
    }
    g_cycle_us[{B, capacity}] = busy.total_us;

    // The floor, timed the same way (stream kept busy) in the same cycle slots.
    gpu::DeviceBuffer<unsigned long long> slots(static_cast<std::size_t>(capacity));
    slots.zero(s);
    unsigned long long stamp = 0;
    const auto empty = [&] {
      empty_kernel<<<1, 32, 0, s>>>();
      FH_CHECK_LAUNCH();
    };
    const auto scatter = [&] {
      scatter_max_kernel<<<gpu::ceil_div(B, 256), 256, 0, s>>>(slots.data(), out.view().indices, B, ++stamp);
      FH_CHECK_LAUNCH();
    };
    const Cycle floor = median_cycle(empty, scatter, empty, s, true);
    g_floor[{B, capacity}] = {floor.op_us[0], floor.op_us[1]};
    FH_CHECK(cudaStreamSynchronize(s));
  }
}

// ---- (a) CPU sum tree ------------------------------------------------------------------------

// Array binary sum tree (node i has children 2i, 2i+1; leaves at [n, 2n)) with a min tree beside
// it, stratified sampling, IS weights from the min, and a ring of observations (next obs are
// gathered by a stored bootstrap index, two row copies per sample as on the device).
class CpuReplay {
 public:
  explicit CpuReplay(std::int64_t capacity)
      : n_(capacity),
        sum_(2 * capacity, 0.f),
        min_(2 * capacity, INFINITY),
        obs_(capacity * kObsDim),
        actions_(capacity),
        returns_(capacity),
        discounts_(capacity),
        boot_(capacity) {
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> pr(0.f, 3.f);
    for (std::int64_t i = 0; i < n_ * kObsDim; ++i)
      obs_[i] = static_cast<float>((i * 2654435761u) & 0xFFFF) * 1e-4f + 1e-3f;
    for (std::int64_t i = 0; i < n_; ++i) {
      actions_[i] = static_cast<std::int32_t>(i % 8);
      returns_[i] = 0.5f;
      discounts_[i] = kGamma * kGamma * kGamma;
      boot_[i] = static_cast<std::int32_t>((i + 3) % n_);
      const float p = std::pow(pr(rng) + kEps, kAlpha);
      sum_[n_ + i] = p;
      min_[n_ + i] = p;
      max_p_ = std::max(max_p_, p);
    }
    for (std::int64_t i = n_ - 1; i >= 1; --i) {
      sum_[i] = sum_[2 * i] + sum_[2 * i + 1];
      min_[i] = std::min(min_[2 * i], min_[2 * i + 1]);
    }
  }

  void set(std::int64_t slot, float p) {
    std::int64_t i = n_ + slot;
    sum_[i] = p;
    min_[i] = p;
    for (i /= 2; i >= 1; i /= 2) {
      sum_[i] = sum_[2 * i] + sum_[2 * i + 1];
      min_[i] = std::min(min_[2 * i], min_[2 * i + 1]);
    }
  }

  void insert(const std::vector<float>& obs, std::int64_t rows) {
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::int64_t slot = head_++ % n_;
      std::memcpy(&obs_[slot * kObsDim], &obs[r * kObsDim], kObsDim * sizeof(float));
      actions_[slot] = static_cast<std::int32_t>(r % 8);
      returns_[slot] = 0.25f;
      discounts_[slot] = kGamma;
      boot_[slot] = static_cast<std::int32_t>(slot);
      set(slot, max_p_);
    }
  }

  void sample(std::int64_t batch, std::mt19937_64& rng, std::vector<std::int32_t>& idx, std::vector<float>& w,
              std::vector<float>& obs, std::vector<float>& next, std::vector<std::int32_t>& act,
              std::vector<float>& ret, std::vector<float>& disc) const {
    std::uniform_real_distribution<double> unif(0.0, 1.0);
    const double total = sum_[1];
    const double pmin = min_[1];
    for (std::int64_t b = 0; b < batch; ++b) {
      double u = (b + unif(rng)) / batch * total;
      std::int64_t i = 1;
      while (i < n_) {
        if (u < sum_[2 * i] || sum_[2 * i + 1] <= 0.f) {
          i = 2 * i;
        } else {
          u -= sum_[2 * i];
          i = 2 * i + 1;
        }
      }
      const std::int64_t slot = i - n_;
      idx[b] = static_cast<std::int32_t>(slot);
      w[b] = static_cast<float>(std::pow(pmin / sum_[i], static_cast<double>(kBeta)));
      std::memcpy(&obs[b * kObsDim], &obs_[slot * kObsDim], kObsDim * sizeof(float));
      std::memcpy(&next[b * kObsDim], &obs_[boot_[slot] * kObsDim], kObsDim * sizeof(float));
      act[b] = actions_[slot];
      ret[b] = returns_[slot];
      disc[b] = discounts_[slot];
    }
  }

  void update(const std::vector<std::int32_t>& idx, const std::vector<float>& td) {
    for (std::size_t b = 0; b < idx.size(); ++b) {
      const float p = std::pow(std::fabs(td[b]) + kEps, kAlpha);
      max_p_ = std::max(max_p_, p);
      set(idx[b], p);
    }
  }

 private:
  std::int64_t n_;  // a power of two here, so the array tree is complete
  std::vector<float> sum_, min_, obs_;
  std::vector<std::int32_t> actions_;
  std::vector<float> returns_, discounts_;
  std::vector<std::int32_t> boot_;
  std::int64_t head_ = 0;
  float max_p_ = 1.f;
};

double median_cpu_us(const std::function<void()>& fn, int reps) {
  fn();  // warm-up
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const auto a = std::chrono::steady_clock::now();
    fn();
    const auto b = std::chrono::steady_clock::now();
    t.push_back(std::chrono::duration<double, std::micro>(b - a).count());
  }
  std::nth_element(t.begin(), t.begin() + reps / 2, t.end());
  return t[reps / 2];
}

void bench_cpu(std::int64_t capacity) {
  try {
    CpuReplay cpu(capacity);
    std::mt19937_64 rng(11);
    for (std::int64_t B : kBatches) {
      std::vector<float> src(B * kObsDim, 0.5f), obs(B * kObsDim), next(B * kObsDim), w(B), ret(B), disc(B), td(B);
      std::vector<std::int32_t> idx(B), act(B);
      std::uniform_real_distribution<float> tdd(-3.f, 3.f);
      for (auto& x : td) x = tdd(rng);
      const int reps = B >= 4096 ? 15 : 51;
      g_rows[{"insert", B, capacity}].cpu_us = median_cpu_us([&] { cpu.insert(src, B); }, reps);
      g_rows[{"sample", B, capacity}].cpu_us =
          median_cpu_us([&] { cpu.sample(B, rng, idx, w, obs, next, act, ret, disc); }, reps);
      g_rows[{"update", B, capacity}].cpu_us = median_cpu_us([&] { cpu.update(idx, td); }, reps);
    }
  } catch (const std::bad_alloc&) {
    std::printf("CPU sum tree at capacity %lld skipped: out of host memory\n", static_cast<long long>(capacity));
  }
}

// ---- (b) PyTorch -----------------------------------------------------------------------------

std::string find_script() {
  namespace fs = std::filesystem;
  std::vector<fs::path> candidates;
  if (const char* dir = std::getenv("FOXHUNT_BENCH_SCRIPTS")) candidates.emplace_back(fs::path(dir) / "replay.py");
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) candidates.push_back(exe.parent_path() / ".." / "share" / "foxhunt" / "bench" / "replay.py");
  candidates.push_back(fs::path(__FILE__).parent_path() / "torch_baselines" / "replay.py");
  for (const auto& c : candidates)
    if (fs::exists(c, ec)) return c.string();
  return "";
}

void run_torch_baseline() {
  const std::string script = find_script();
  if (script.empty()) {
    std::printf("baseline skipped: replay.py not found (set FOXHUNT_BENCH_SCRIPTS)\n");
    return;
  }
  std::ostringstream cmd;
  cmd << "python3 '" << script << "' --capacities ";
  for (std::size_t i = 0; i < kCapacities.size(); ++i) cmd << (i ? "," : "") << kCapacities[i];
  cmd << " --batches ";
  for (std::size_t i = 0; i < kBatches.size(); ++i) cmd << (i ? "," : "") << kBatches[i];
  cmd << " 2>&1";
  std::fflush(stdout);
  FILE* pipe = popen(cmd.str().c_str(), "r");
  if (!pipe) {
    std::printf("baseline skipped: cannot start python3 (%s)\n", std::strerror(errno));
    return;
  }
  char line[1024];
  int results = 0;
  std::string skipped, other;
  while (std::fgets(line, sizeof line, pipe)) {
    char op[64] = {};
    long long batch = 0, capacity = 0;
    double us = 0;
    if (std::sscanf(line, "RESULT op=%63s batch=%lld capacity=%lld us=%lf", op, &batch, &capacity, &us) == 4) {
      g_rows[{op, batch, capacity}].torch_us = us;
      ++results;
    } else if (std::strncmp(line, "baseline skipped:", 17) == 0) {
      skipped = line;
    } else {
      other += line;
    }
  }
  const int status = pclose(pipe);
  if (!skipped.empty()) {
    std::printf("%s", skipped.c_str());
  } else if (results == 0) {
    const bool no_python = WIFEXITED(status) && WEXITSTATUS(status) == 127;
    std::printf("baseline skipped: %s\n", no_python ? "python3 not found" : "the script printed no results");
    if (!other.empty()) std::printf("%s", other.c_str());
  }
}

// ---- report ----------------------------------------------------------------------------------

std::string fmt(double v, const char* f = "%.1f") {
  if (std::isnan(v)) return "-";
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

void report() {
  std::printf("\nPrioritized replay (obs 64 f32, n = 3, alpha %.1f): median latency of one operation\n", kAlpha);
  std::printf(
      "ours: sample as a CUDA graph replay, insert and update as direct calls (one kernel each), timed in\n"
      "the learner's order insert, sample, update\n");
  std::printf("ours: graph nodes per call: sample %zu, update %zu\n", g_launches["sample"], g_launches["update"]);
  std::printf(
      "stream us: the operation's GPU time (stream kept busy while the host enqueues it; the targets);\n"
      "host-launched us: the same with an idle stream, including the host's launch latency\n");
  bench::print_rule(134);
  std::printf("%-8s %6s %10s %11s %15s %12s %12s %10s %10s %14s\n", "op", "batch", "capacity", "stream us",
              "host-launched", "PyTorch us", "CPU tree us", "x PyTorch", "x CPU", "ours Mtrans/s");
  bench::print_rule(134);
  for (const char* op : {"insert", "sample", "update"})
    for (std::int64_t C : kCapacities)
      for (std::int64_t B : kBatches) {
        const Row& r = g_rows[{op, B, C}];
        const double mts = std::string(op) == "insert" ? B / r.ours_us : NAN;  // transitions per us = M/s
        std::printf("%-8s %6lld %10lld %11s %15s %12s %12s %10s %10s %14s\n", op, static_cast<long long>(B),
                    static_cast<long long>(C), fmt(r.ours_us, "%.2f").c_str(), fmt(r.ours_launched_us, "%.2f").c_str(),
                    fmt(r.torch_us).c_str(), fmt(r.cpu_us).c_str(), fmt(r.torch_us / r.ours_us).c_str(),
                    fmt(r.cpu_us / r.ours_us).c_str(), fmt(mts).c_str());
      }
  bench::print_rule(134);
  // A learning step's replay cost: the three summed (the work did not just move between them).
  for (std::int64_t C : kCapacities)
    for (std::int64_t B : kBatches) {
      double ours = 0, torch = 0, cpu = 0;
      for (const char* op : {"insert", "sample", "update"}) {
        const Row& r = g_rows[{op, B, C}];
        ours += r.ours_us;
        torch += r.torch_us;
        cpu += r.cpu_us;
      }
      std::printf(
          "step (insert + sample + update) batch %lld capacity %lld: ours %s us (measured cycle %s us), "
          "PyTorch %s us (%sx), CPU tree %s us (%sx)\n",
          static_cast<long long>(B), static_cast<long long>(C), fmt(ours, "%.2f").c_str(),
          fmt(g_cycle_us[{B, C}], "%.2f").c_str(), fmt(torch).c_str(), fmt(torch / ours).c_str(), fmt(cpu).c_str(),
          fmt(cpu / ours).c_str());
    }
  bench::print_rule(134);
  // The ceiling of a latency: what the same timing gives for (nearly) no work.
  for (std::int64_t C : kCapacities)
    for (std::int64_t B : kBatches) {
      const Floor& f = g_floor[{B, C}];
      std::printf(
          "floor batch %lld capacity %lld: empty kernel %s us; one 64-bit atomicMax per sampled index "
          "(nothing above the leaves) %s us\n",
          static_cast<long long>(B), static_cast<long long>(C), fmt(f.empty_us, "%.2f").c_str(),
          fmt(f.scatter_us, "%.2f").c_str());
    }
  bench::print_rule(134);

  const std::int64_t C = std::int64_t{1} << 24, B = 4096;
  const std::map<std::string, double> limit = {{"sample", 25.0}, {"update", 10.0}, {"insert", 10.0}};
  const std::map<std::string, std::string> name = {
      {"sample", "sample+weights+gather"}, {"update", "priority update"}, {"insert", "insert"}};
  for (const char* op : {"sample", "update", "insert"}) {
    const Row& r = g_rows[{op, B, C}];
    const double lim = limit.at(op);
    std::printf("TARGET %s latency, stream time (2^24, 4096): %s us (target <= %.0f us): %s\n", name.at(op).c_str(),
                fmt(r.ours_us, "%.2f").c_str(), lim, r.ours_us <= lim ? "PASS" : "FAIL");
    const double xt = r.torch_us / r.ours_us, xc = r.cpu_us / r.ours_us;
    std::printf("TARGET %s vs PyTorch (2^24, 4096): %sx (target >= 5x): %s\n", name.at(op).c_str(), fmt(xt).c_str(),
                std::isnan(xt) ? "SKIPPED" : (xt >= 5.0 ? "PASS" : "FAIL"));
    std::printf("TARGET %s vs CPU sum tree (2^24, 4096): %sx (target >= 100x): %s\n", name.at(op).c_str(),
                fmt(xc).c_str(), std::isnan(xc) ? "SKIPPED" : (xc >= 100.0 ? "PASS" : "FAIL"));
  }
}

}  // namespace

int main() {
  // FOXHUNT_BENCH_OURS_ONLY=1: our kernels alone (a profiler run), no baselines and no table.
  const char* only_env = std::getenv("FOXHUNT_BENCH_OURS_ONLY");
  const std::string only = only_env ? only_env : "";
  if (!only.empty() && only != "1") {
    std::fprintf(stderr, "foxhunt_bench_replay: FOXHUNT_BENCH_OURS_ONLY='%s': the allowed value is 1\n", only.c_str());
    return 2;
  }
  std::string why;
  if (gpu::device_count(&why) == 0) {
    std::printf("foxhunt_bench_replay: no CUDA device (%s)\n", why.c_str());
    return 1;
  }
  FH_CHECK(cudaSetDevice(0));
  const auto dev = gpu::list_devices().front();
  std::printf("device: %s, %d SMs\n", dev.name.c_str(), dev.sm_count);
  {
    gpu::Stream s;
    for (std::int64_t C : kCapacities) {
      std::printf("ours: capacity %lld ...\n", static_cast<long long>(C));
      std::fflush(stdout);
      bench_ours(C, s);  // frees its device memory before the next capacity and before PyTorch runs
    }
  }
  if (only == "1") return 0;
  for (std::int64_t C : kCapacities) {
    std::printf("CPU sum tree: capacity %lld ...\n", static_cast<long long>(C));
    std::fflush(stdout);
    bench_cpu(C);
  }
  std::printf("PyTorch baseline ...\n");
  run_torch_baseline();
  report();
  return 0;
}
