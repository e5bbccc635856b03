// DQN learner updates per second: the whole update (sample, forward online and target, double-DQN
// 3-step targets, Huber with IS weights, backward, grad-norm clip, Adam, priority write-back, Polyak)
// as one CUDA graph replay, beside the same update in PyTorch on the same GPU (eager, and captured
// in a CUDA graph), run in the same process through `python3 <script>`.
//
// Learners (issue 5):  standard: obs 64, trunk 256-256 ReLU, dueling, 9 actions, batch 256
//                      large:    obs 64, trunk 1024-1024 ReLU, dueling, 9 actions, batch 4096
//                                (strict fp32, and TF32 tensor cores by config)
// Replay: a 2^20-transition table on the device (obs and next obs f32). Sampling here is a
// stand-in until rl/replay lands on main: Philox-uniform indices, row gathers, IS weights from the
// sampled priorities, priorities scattered back; the PyTorch script does the same work.
// Script: $FOXHUNT_BENCH_SCRIPTS/dqn.py, else <exe dir>/../share/foxhunt/bench/dqn.py, else the
// source tree's bench/torch_baselines/dqn.py.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "bench_util.hpp"
#include "gpu/buffer.hpp"
#include "gpu/context.hpp"
#include "gpu/gather.hpp"
#include "gpu/launch.cuh"
#include "gpu/philox.cuh"
#include "gpu/rng.hpp"
#include "rl/dqn/learner.hpp"

using namespace foxhunt;

namespace {

constexpr std::int64_t kCapacity = std::int64_t{1} << 20;
constexpr std::int64_t kObs = 64;
constexpr std::int64_t kActions = 9;

// Replay stand-in: indices ~ Philox uniform (counter advanced on the device), scalar columns
// gathered, weight = (p_i / p_max)^-0.4-ish from the stored priorities (a read per sample, like PER).
__global__ void sample_kernel(std::int32_t* idx, std::int32_t* act, float* ret, float* disc, float* w,
                              const std::int32_t* t_act, const float* t_ret, const float* t_disc, const float* prio,
                              std::int64_t batch, std::int64_t capacity, std::uint64_t* counter) {
  const std::uint64_t c = *counter;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < batch; i += stride) {
    const uint4 r = gpu::random_bits4(7, 1, (c << 24) + static_cast<std::uint64_t>(i));
    const auto j = static_cast<std::int32_t>((static_cast<std::uint64_t>(r.x) * capacity) >> 32);
    idx[i] = j;
    act[i] = t_act[j];
    ret[i] = t_ret[j];
    disc[i] = t_disc[j];
    w[i] = powf(fmaxf(prio[j], 1e-6f), -0.4f) * 0.5f;
  }
}
__global__ void advance_kernel(std::uint64_t* counter) { *counter += 1; }
__global__ void write_priorities(float* prio, const std::int32_t* idx, const float* p, std::int64_t batch) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < batch; i += stride)
    prio[idx[i]] = p[i];  // repeated indices: one of them lands (as a bench stand-in)
}
__global__ void fill_int(std::int32_t* out, std::int64_t n, std::int32_t mod) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    out[i] = static_cast<std::int32_t>((i * 2654435761ll) % mod);
}

struct Table {
  gpu::DeviceBuffer<float> obs, next_obs, ret, disc, prio;
  gpu::DeviceBuffer<std::int32_t> act;
  explicit Table(cudaStream_t s)
      : obs(kCapacity * kObs), next_obs(kCapacity * kObs), ret(kCapacity), disc(kCapacity), prio(kCapacity),
        act(kCapacity) {
    gpu::fill_uniform(obs.data(), kCapacity * kObs, -1.f, 1.f, 1, 0, 0, s);
    gpu::fill_uniform(next_obs.data(), kCapacity * kObs, -1.f, 1.f, 1, 1, 0, s);
    gpu::fill_uniform(ret.data(), kCapacity, -1.f, 1.f, 1, 2, 0, s);
    gpu::fill_uniform(disc.data(), kCapacity, 0.9f, 0.97f, 1, 3, 0, s);
    gpu::fill_uniform(prio.data(), kCapacity, 0.1f, 1.f, 1, 4, 0, s);
    fill_int<<<gpu::grid_stride_blocks(kCapacity), gpu::kBlock, 0, s>>>(act.data(), kCapacity,
                                                                        static_cast<std::int32_t>(kActions));
    FH_CHECK_LAUNCH();
  }
};

struct Result {
  std::string name;
  double ups = 0;
};

double bench_foxhunt(const char* what, std::int64_t hidden, std::int64_t batch, bool tf32, Table& t,
                     gpu::DeviceContext& ctx) {
  rl::DqnLearnerConfig c;
  c.net.obs_dim = kObs;
  c.net.hidden = {hidden, hidden};
  c.net.actions = kActions;
  c.net.dueling = true;
  c.net.math = tf32 ? gpu::LinearMath::tf32 : gpu::LinearMath::fp32;
  c.batch = batch;
  c.double_q = true;
  c.loss = rl::TdLoss::huber;
  c.adam.eps = 1.5e-4f;
  c.schedule.lr_start = c.schedule.lr_end = 1e-4f;
  c.max_grad_norm = 10.f;
  c.tau = 0.005f;
  c.seed = 3;
  const cudaStream_t s = ctx.stream();
  rl::DqnLearner learner(c, ctx.blas());
  const auto B = static_cast<std::size_t>(batch);
  gpu::DeviceBuffer<std::int32_t> idx(B), act(B);
  gpu::DeviceBuffer<float> obs(B * kObs), next(B * kObs), ret(B), disc(B), w(B);
  gpu::DeviceBuffer<std::uint64_t> counter(1);
  counter.zero(s);
  const rl::DqnBatch view{obs.data(), act.data(), ret.data(), disc.data(), next.data(), w.data(), idx.data(), batch};
  learner.capture(
      view,
      [&](cudaStream_t cs) {
        sample_kernel<<<gpu::grid_stride_blocks(batch), gpu::kBlock, 0, cs>>>(
            idx.data(), act.data(), ret.data(), disc.data(), w.data(), t.act.data(), t.ret.data(), t.disc.data(),
            t.prio.data(), batch, kCapacity, counter.data());
        FH_CHECK_LAUNCH();
        gpu::gather_rows(obs.data(), t.obs.data(), idx.data(), batch, kObs, cs);
        gpu::gather_rows(next.data(), t.next_obs.data(), idx.data(), batch, kObs, cs);
      },
      [&](cudaStream_t cs) {
        write_priorities<<<gpu::grid_stride_blocks(batch), gpu::kBlock, 0, cs>>>(t.prio.data(), idx.data(),
                                                                                 learner.priorities(), batch);
        FH_CHECK_LAUNCH();
        advance_kernel<<<1, 1, 0, cs>>>(counter.data());
        FH_CHECK_LAUNCH();
      });
  const int reps = batch >= 4096 ? 200 : 2000;
  const double ms = bench::median_ms(
      [&](int) {
        for (int i = 0; i < reps; ++i) learner.replay();
      },
      s, 2, 7);
  learner.publish_metrics();
  const rl::DqnState m = learner.metrics().wait();
  std::printf("  %-28s loss %.4g  skips %u  grad_norm %.3g\n", what, static_cast<double>(m.loss), m.skips_total,
              static_cast<double>(m.grad_norm));
  return reps / (ms * 1e-3);
}

std::filesystem::path find_script() {
  if (const char* env = std::getenv("FOXHUNT_BENCH_SCRIPTS")) return std::filesystem::path(env) / "dqn.py";
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const auto p = exe.parent_path() / ".." / "share" / "foxhunt" / "bench" / "dqn.py";
    if (std::filesystem::exists(p)) return p;
  }
  return std::filesystem::path(__FILE__).parent_path() / "torch_baselines" / "dqn.py";
}

// Runs the PyTorch baseline; returns "RESULT <name> <updates/s>" lines parsed (empty on failure).
std::vector<Result> run_torch(const std::filesystem::path& script) {
  std::vector<Result> out;
  const std::string cmd = "python3 '" + script.string() + "' 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return out;
  char line[1024];
  while (std::fgets(line, sizeof line, p)) {
    char name[256];
    double v = 0;
    if (std::sscanf(line, "RESULT %255s %lf", name, &v) == 2)
      out.push_back({name, v});
    else
      std::printf("  [torch] %s", line);
  }
  const int rc = pclose(p);
  if (rc != 0) std::printf("  [torch] exited with status %d\n", rc);
  return out;
}

double find(const std::vector<Result>& r, const std::string& name) {
  for (const auto& x : r)
    if (x.name == name) return x.ups;
  return 0;
}

}  // namespace

int main() {
  gpu::DeviceContext ctx(0, 1);
  const cudaStream_t s = ctx.stream();
  std::printf("DQN learner updates/s (one CUDA graph per update) vs PyTorch on the same GPU\n");
  Table table(s);
  FH_CHECK(cudaStreamSynchronize(s));
  std::vector<Result> fox;
  fox.push_back({"standard_fp32", bench_foxhunt("standard (256-256, B 256)", 256, 256, false, table, ctx)});
  fox.push_back({"large_fp32", bench_foxhunt("large (1024-1024, B 4096)", 1024, 4096, false, table, ctx)});
  fox.push_back({"large_tf32", bench_foxhunt("large TF32", 1024, 4096, true, table, ctx)});

  const auto script = find_script();
  std::printf("PyTorch baseline: %s\n", script.string().c_str());
  const auto torch = run_torch(script);

  bench::print_rule();
  std::printf("%-16s %16s %16s %16s %12s %12s\n", "learner", "foxhunt upd/s", "torch eager", "torch graph",
              "x eager", "x graph");
  bench::print_rule();
  for (const auto& f : fox) {
    const double e = find(torch, f.name + "_eager"), g = find(torch, f.name + "_graph");
    std::printf("%-16s %16.0f %16.0f %16.0f %12.2f %12.2f\n", f.name.c_str(), f.ups, e, g, e > 0 ? f.ups / e : 0.0,
                g > 0 ? f.ups / g : 0.0);
  }
  bench::print_rule();
  const double std_ups = fox[0].ups, std_graph = find(torch, "standard_fp32_graph");
  std::printf("TARGET standard updates/s: %.0f (target >= 20000): %s\n", std_ups, std_ups >= 20000 ? "PASS" : "FAIL");
  std::printf("TARGET standard vs PyTorch CUDA graph: %.2fx (target >= 5x): %s\n",
              std_graph > 0 ? std_ups / std_graph : 0.0,
              std_graph > 0 && std_ups >= 5 * std_graph ? "PASS" : (std_graph > 0 ? "FAIL" : "FAIL (no baseline)"));
  std::printf("TARGET large fp32 updates/s: %.0f (target >= 1200): %s\n", fox[1].ups,
              fox[1].ups >= 1200 ? "PASS" : "FAIL");
  std::printf("TARGET large tf32 updates/s: %.0f (target >= 5000): %s\n", fox[2].ups,
              fox[2].ups >= 5000 ? "PASS" : "FAIL");
  return 0;
}
