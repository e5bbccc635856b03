// PPO training speed: rl::ppo::PpoTrainer (each iteration = one collection graph + one update
// graph, nothing read back) beside a PyTorch PPO and a JAX PPO in the PureJaxRL style (env and
// update under one jax.jit) on the same GPU, run by one script in the same process through
// `python3 <script>` ($FOXHUNT_BENCH_SCRIPTS/ppo.py, else <exe dir>/../share/foxhunt/bench/ppo.py,
// else the source tree's bench/torch_baselines/ppo.py).
//
// Scenarios (every implementation runs the same hyper-parameters: 64-64 tanh actor and critic,
// 4 epochs x 4 minibatches, Adam 2.5e-4 annealed to 0, GAE(0.99, 0.95), clip 0.2, entropy 0.01):
//   cleanrl_cartpole     CartPole-v1, 4 envs x 128 steps, 500k steps: wall seconds from before the
//                        environments are built to the last update done (ours include graph
//                        capture; the baselines' clocks start after compilation)
//   throughput_cartpole  CartPole-v1, 2048 envs x 16 steps, 20M steps: env-steps/s with updates
//   ou_market            configs/markets/bench_ou.toml, 4096 envs x 16 steps, 20M steps
// Each line carries the final return (mean return of the episodes that ended in the last 5% of
// the run) so that speed is never bought with learning.
// Floor: the graph nodes of one iteration times the replay cost of one empty-kernel node measured
// here; for these small networks an iteration is launch-bound and this is what it cannot beat.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "bench_util.hpp"
#include "gpu/context.hpp"
#include "gpu/graph.hpp"
#include "rl/envs/cartpole.hpp"
#include "rl/envs/market.hpp"
#include "rl/envs/market_config.hpp"
#include "rl/ppo/trainer.hpp"

using namespace foxhunt;

namespace {

struct Scenario {
  std::string name, env;  // env: "cartpole" or "ou_market"
  std::int64_t envs, steps, total;
};

struct Result {
  double seconds = 0, sps = 0, final_return = 0;
  std::size_t nodes = 0;  // per iteration
  double floor_seconds = 0;
};

std::filesystem::path find_file(const char* env_var, const std::string& sub, const std::string& name,
                                const std::filesystem::path& source_fallback) {
  if (const char* env = std::getenv(env_var)) return std::filesystem::path(env) / name;
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const auto p = exe.parent_path() / ".." / "share" / "foxhunt" / sub / name;
    if (std::filesystem::exists(p)) return p;
  }
  return source_fallback / name;
}

__global__ void empty_kernel() {}

// Seconds per node of a replayed graph that is a chain of empty kernels.
double node_seconds(cudaStream_t s) {
  constexpr int kNodes = 1000;
  gpu::CudaGraph g;
  g.capture(s, [](cudaStream_t cs) {
    for (int i = 0; i < kNodes; ++i) empty_kernel<<<1, 1, 0, cs>>>();
  });
  const double ms = bench::median_ms([&](int) { g.replay(s); }, s, 3, 15);
  return ms * 1e-3 / kNodes;
}

std::unique_ptr<rl::VecEnv> make_bench_env(const Scenario& sc) {
  if (sc.env == "cartpole") return std::make_unique<rl::CartPoleEnv>(sc.envs);
  const auto cfg = find_file("FOXHUNT_CONFIGS", "configs", "markets/bench_ou.toml",
                             std::filesystem::path(__FILE__).parent_path() / ".." / "configs");
  return std::make_unique<rl::MarketEnv>(rl::load_market_config(cfg), sc.envs);
}

// fused: the whole-network kernels (rl/ppo/fused_mlp.hpp); false: the cuBLASLt path.
Result bench_foxhunt(const Scenario& sc, gpu::DeviceContext& ctx, double per_node, bool fused) {
  const cudaStream_t s = ctx.stream();
  FH_CHECK(cudaStreamSynchronize(s));
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_ptr<rl::VecEnv> env = make_bench_env(sc);
  rl::ppo::PpoConfig c;
  c.num_envs = sc.envs;
  c.rollout_steps = sc.steps;
  c.head = rl::ppo::head_for(env->action_space());
  c.fused_kernels = fused;
  const std::int64_t iterations = sc.total / c.batch_rows();
  c.anneal_iterations = iterations;
  rl::ppo::PpoTrainer t(c, *env, ctx.blas());
  t.reset(1);
  const std::int64_t tail_from = iterations - std::max<std::int64_t>(1, iterations / 20);
  rl::ppo::TrainerStats st;
  for (std::int64_t i = 0; i < iterations; ++i) {
    if (i == tail_from) t.wait_stats();  // clears the episode statistics: the tail starts here
    t.iterate();
  }
  st = t.wait_stats();
  FH_CHECK(cudaStreamSynchronize(s));
  Result r;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.sps = static_cast<double>(t.env_steps()) / r.seconds;
  r.final_return = st.episodes.mean_return;
  r.nodes = t.collect_graph_nodes() + t.learner().graph_nodes();
  r.floor_seconds = static_cast<double>(r.nodes) * per_node * static_cast<double>(iterations);
  // The halves' stream times (after the run: the split of an iteration, not part of the result).
  const double collect_ms = bench::median_stream_ms([&](int) { t.collect(); }, s, 2, 15);
  const double update_ms = bench::median_stream_ms([&](int) { t.learner().update(t.rollout()); }, s, 2, 15);
  const char* path = t.learner().fused() ? "fused" : "gemm";
  std::printf("  %-20s %-5s collect %.3f ms, update %.3f ms per iteration (stream time)\n", sc.name.c_str(), path,
              collect_ms, update_ms);
  std::printf("  %-20s %-5s %lld iterations, %zu + %zu graph nodes each, %.3f s, final return %.3f (%g episodes)\n",
              sc.name.c_str(), path, static_cast<long long>(iterations), t.collect_graph_nodes(), t.learner().graph_nodes(),
              r.seconds, r.final_return, st.episodes.episodes);
  return r;
}

struct Baseline {
  std::string impl, scenario;
  double seconds = 0, sps = 0, final_return = 0;
};

std::vector<Baseline> run_baselines(const std::filesystem::path& script) {
  std::vector<Baseline> out;
  const std::string cmd = "python3 '" + script.string() + "' 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return out;
  char line[1024];
  while (std::fgets(line, sizeof line, p)) {
    char impl[64], scenario[64];
    Baseline b;
    if (std::sscanf(line, "RESULT %63s %63s seconds=%lf sps=%lf final_return=%lf", impl, scenario, &b.seconds, &b.sps,
                    &b.final_return) == 5) {
      b.impl = impl;
      b.scenario = scenario;
      out.push_back(b);
    } else {
      std::printf("  [baseline] %s", line);
    }
  }
  const int rc = pclose(p);
  if (rc != 0) std::printf("  [baseline] exited with status %d\n", rc);
  return out;
}

const Baseline* find(const std::vector<Baseline>& v, const std::string& impl, const std::string& scenario) {
  for (const auto& b : v)
    if (b.impl == impl && b.scenario == scenario) return &b;
  return nullptr;
}

}  // namespace

int main(int argc, char** argv) {
  // --ours-only [scenario]: foxhunt's runs alone (a profiler run), no baselines.
  const bool ours_only = argc > 1 && std::string(argv[1]) == "--ours-only";
  const std::string only = ours_only && argc > 2 ? argv[2] : "";
  if (argc > 1 && !ours_only) {
    std::fprintf(stderr, "foxhunt_bench_ppo: unknown argument '%s' (allowed: --ours-only [scenario])\n", argv[1]);
    return 2;
  }
  gpu::DeviceContext ctx(0, 1);
  const std::vector<Scenario> scenarios{
      {"cleanrl_cartpole", "cartpole", 4, 128, 500'000},
      {"throughput_cartpole", "cartpole", 2048, 16, 20'000'000},
      {"ou_market", "ou_market", 4096, 16, 20'000'000},
  };
  std::printf("PPO training: foxhunt vs PyTorch and JAX (PureJaxRL style) on the same GPU\n");
  const double per_node = node_seconds(ctx.stream());
  std::printf("  graph replay floor: %.2f us per empty-kernel node\n", per_node * 1e6);
  std::vector<Result> fox, gemm;
  for (const auto& sc : scenarios)
    if (only.empty() || only == sc.name) {
      fox.push_back(bench_foxhunt(sc, ctx, per_node, true));
      gemm.push_back(bench_foxhunt(sc, ctx, per_node, false));
    }
  if (ours_only) return 0;

  const auto script = find_file("FOXHUNT_BENCH_SCRIPTS", "bench", "ppo.py",
                                std::filesystem::path(__FILE__).parent_path() / "torch_baselines");
  std::printf("baselines: %s\n", script.string().c_str());
  const auto base = run_baselines(script);

  bench::print_rule(142);
  std::printf("%-20s %9s %9s %9s %12s %8s %9s %12s %8s %9s %12s %8s %7s %7s\n", "scenario", "ours s", "floor s",
              "gemm s", "ours SPS", "return", "torch s", "torch SPS", "return", "jax s", "jax SPS", "return", "x torch",
              "x jax");
  bench::print_rule(142);
  for (std::size_t i = 0; i < scenarios.size(); ++i) {
    const Result& f = fox[i];
    const Baseline* t = find(base, "torch", scenarios[i].name);
    const Baseline* j = find(base, "jax", scenarios[i].name);
    std::printf("%-20s %9.3f %9.3f %9.3f %12.3g %8.2f %9.3f %12.3g %8.2f %9.3f %12.3g %8.2f %7.2f %7.2f\n",
                scenarios[i].name.c_str(), f.seconds, f.floor_seconds, gemm[i].seconds, f.sps, f.final_return, t ? t->seconds : 0.0,
                t ? t->sps : 0.0, t ? t->final_return : 0.0, j ? j->seconds : 0.0, j ? j->sps : 0.0,
                j ? j->final_return : 0.0, t && t->seconds > 0 ? t->seconds / f.seconds : 0.0,
                j && j->seconds > 0 ? j->seconds / f.seconds : 0.0);
  }
  bench::print_rule(142);
  std::printf("(gemm s: the same run on the cuBLASLt path, learner.fused_kernels = false)\n");
  std::printf("TARGET cleanrl_cartpole wall: %.3f s (target <= 1.2 s): %s\n", fox[0].seconds,
              fox[0].seconds <= 1.2 ? "PASS" : "FAIL");
  std::printf("TARGET throughput_cartpole: %.3g env-steps/s (target >= 5e7): %s\n", fox[1].sps,
              fox[1].sps >= 5e7 ? "PASS" : "FAIL");
  return 0;
}
