// Several agents in one run, and PPO through the actors (issue 17), measured with the real runtime:
// the same library calls `foxhunt train` makes (actors::run_agents_training for [[agent]] configs
// and --seeds, actors::run_training for a config of one agent), in this process, one run after the
// other on one GPU. Configs come from actors::shipped_configs_dir() ($FOXHUNT_CONFIGS first).
//
// Scenarios (each run's wall: the whole library call, stage construction, graph capture, the actor
// system's start-up and shutdown and the final checkpoint included; the runtime's own start-up /
// shutdown / after-quiesce milliseconds are printed beside it so their share is visible):
//   agents  configs/dqn_and_ppo_ou.toml: the DQN and the PPO agent together, and each alone (the
//           same config with that one [[agent]] table, through the same call). TARGET
//           wall(both) <= 0.65 x (wall(DQN alone) + wall(PPO alone)), with the timeline's overlap
//           figure of each run. Both agents take the same step budget (as the config says), so the
//           ratio cannot go below max(alone) / sum(alone) (printed as the perfect-overlap bound).
//   seeds   configs/pipeline_dqn_ou_market.toml under `--seeds 1..8` (actors::with_seeds) against
//           `--seeds 1`: aggregate env-steps/s (every agent's env steps / wall). TARGET >= 5x.
//   ppo     configs/ppo_pipeline_cartpole.toml: pipeline.mode = "actors" with policy_lag 0 and 1
//           against mode = "sync" (rl::ppo::PpoTrainer's loop), same config and step budget, runs
//           interleaved, the median of the repetitions. TARGETs: lag 1 faster than sync, lag 0
//           within 10% of sync.
// Every run: run.total_env_steps overridden (env steps over all environments of an agent: PPO
// iterations = total / (num_envs x rollout_steps)); checkpoint.every_env_steps = 0 and
// checkpoint.replay = "never" (one segment, a final checkpoint without the replay buffer: the walls
// are training, not disk writes); run directories (checkpoints, metrics.jsonl, tensorboard,
// timeline.json) in a temporary folder, removed after each run; everything else as shipped
// (timeline on, polled completions, the low-latency scheduler that run_training sets).
// A short untimed warm-up run of each environment's agents comes first (module loading, cuBLAS).
//
// usage: foxhunt_bench_agents [--quick] [--scale F] [--verbose] [agents|seeds|ppo ...]
//   --quick    about a quarter of the steps, one repetition (about a minute on an H100)
//   --scale F  multiplies every step budget (e.g. 0.5 or 2)
//   --verbose  the runtime's info log (otherwise warnings and errors only)
#include <cuda_runtime.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "actors/agents_run.hpp"
#include "actors/ppo_run.hpp"
#include "actors/run_config.hpp"
#include "actors/shipped_configs.hpp"
#include "actors/train_run.hpp"
#include "gpu/check.hpp"
#include "gpu/device.hpp"

using namespace foxhunt;
using namespace foxhunt::actors;
namespace fs = std::filesystem;

namespace foxhunt::bench {
void set_runtime_log_level(bool verbose);  // bench/agents_host.cpp (spdlog is host-only)
}  // namespace foxhunt::bench

namespace {

struct Options {
  bool quick = false;
  bool verbose = false;
  double scale = 1.0;
  std::set<std::string> only;  // empty: every scenario
  bool wants(const std::string& s) const { return only.empty() || only.count(s) > 0; }
};

// One timed run.
struct Measured {
  double wall_s = 0;
  std::int64_t env_steps = 0;  // every agent's, summed
  double overlap = -1;         // the timeline's (>= 2 streams busy / span); -1: no timeline
  double startup_ms = 0, shutdown_ms = 0, after_ms = 0;
  double setup_s = -1;     // before the runtime's clock starts (stages built, graphs captured); -1: unknown
  double steady_sps = -1;  // between progress snapshots (see SnapshotTrack); -1: too few
  double sps() const { return wall_s > 0 ? static_cast<double>(env_steps) / wall_s : 0.0; }
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// What the progress snapshots (every logging.progress_interval_ms) tell beyond the wall: the time
// spent before the runtime's clock started (the call's clock minus the snapshot's, at the first
// snapshot), and the env-steps/s from the first snapshot to the last one that saw steps added
// (the training itself, without set-up, ramp-down and the final checkpoint).
struct SnapshotTrack {
  std::chrono::steady_clock::time_point t0;
  double setup_s = -1, first_s = -1, last_s = -1;
  std::int64_t first_steps = 0, last_steps = 0;
  void add(double seconds, std::int64_t steps) {
    if (setup_s < 0) {
      setup_s = seconds_since(t0) - seconds;
      first_s = last_s = seconds;
      first_steps = last_steps = steps;
    } else if (steps > last_steps) {
      last_s = seconds;
      last_steps = steps;
    }
  }
  void into(Measured& m) const {
    m.setup_s = setup_s;
    if (last_s > first_s) m.steady_sps = static_cast<double>(last_steps - first_steps) / (last_s - first_s);
  }
};

fs::path g_tmp;  // this process's run directories
int g_run = 0;

fs::path fresh_run_dir(const std::string& label) {
  const fs::path dir = g_tmp / (std::to_string(++g_run) + "-" + label);
  fs::remove_all(dir);
  return dir;
}

std::int64_t steps_of(std::int64_t full, const Options& o) {
  const double s = static_cast<double>(full) * (o.quick ? 0.25 : 1.0) * o.scale;
  return std::max<std::int64_t>(1, static_cast<std::int64_t>(s));
}

// The bench's run settings on top of a shipped config (see the header comment).
void set_budget(RunConfig& c, std::int64_t total_env_steps) {
  c.run.total_env_steps = total_env_steps;
  c.checkpoint.every_env_steps = 0;
  c.checkpoint.replay = "never";
}

AgentsConfig budgeted(AgentsConfig c, std::int64_t total_env_steps) {
  for (AgentConfig& a : c.agents) set_budget(a.config, total_env_steps);
  return c;
}

// run_agents_training, as `foxhunt train` calls it for [[agent]] configs and --seeds.
Measured run_agents_timed(const AgentsConfig& config, const std::string& label) {
  AgentsTrainRequest req;
  req.config = config;
  req.run_dir = fresh_run_dir(label);
  req.console = false;
  req.stop_signal = &install_stop_signals();  // Ctrl-C: the run stops cleanly, the bench ends
  SnapshotTrack track;
  req.observer = [&track](const std::vector<std::string>&, const std::vector<ProgressSnapshot>& snaps) {
    std::int64_t steps = 0;
    for (const ProgressSnapshot& p : snaps) steps += p.counters.env_steps;
    track.add(snaps.empty() ? 0.0 : snaps.front().seconds, steps);
  };
  FH_CHECK(cudaDeviceSynchronize());
  Measured m;
  {
    const auto t0 = std::chrono::steady_clock::now();
    track.t0 = t0;
    const AgentsTrainOutcome out = run_agents_training(req);
    m.wall_s = seconds_since(t0);
    const AgentsResult& r = out.result;
    if (r.outcome.kind != RunOutcome::Kind::completed)
      throw std::runtime_error(label + ": run " + kind_name(r.outcome.kind) + ": " + r.outcome.reason);
    for (const AgentResult& a : r.agents) {
      if (!a.finished) throw std::runtime_error(label + ": agent " + a.name + " did not finish");
      m.env_steps += a.counters.env_steps;
    }
    m.overlap = r.overlap;
    m.startup_ms = r.startup_ms;
    m.shutdown_ms = r.shutdown_ms;
    m.after_ms = r.after_ms;
    track.into(m);
  }  // the agents' stages (device memory) go here, before the next run
  fs::remove_all(req.run_dir);
  return m;
}

// run_training, as `foxhunt train` calls it for a config of one agent (PPO sync: run_ppo_training).
Measured run_one_timed(const RunConfig& config, const std::string& label) {
  TrainRequest req;
  req.config = config;
  req.run_dir = fresh_run_dir(label);
  req.console = false;
  req.stop_signal = &install_stop_signals();  // Ctrl-C: the run stops cleanly, the bench ends
  SnapshotTrack track;
  req.observer = [&track](const ProgressSnapshot& p) { track.add(p.seconds, p.counters.env_steps); };
  FH_CHECK(cudaDeviceSynchronize());
  Measured m;
  {
    const auto t0 = std::chrono::steady_clock::now();
    track.t0 = t0;
    const TrainOutcome out = run_training(req);
    m.wall_s = seconds_since(t0);
    const RunResult& r = out.result;
    if (r.outcome.kind != RunOutcome::Kind::completed)
      throw std::runtime_error(label + ": run " + kind_name(r.outcome.kind) + ": " + r.outcome.reason);
    m.env_steps = r.counters.env_steps;
    m.overlap = r.overlap;
    m.startup_ms = r.startup_ms;
    m.shutdown_ms = r.shutdown_ms;
    m.after_ms = r.after_ms;
    track.into(m);
  }
  fs::remove_all(req.run_dir);
  return m;
}

std::string overlap_text(double overlap) {
  if (overlap < 0) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", 100.0 * overlap);
  return buf;
}

std::string number_or_dash(double v, const char* format) {
  if (v < 0) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

void print_header() {
  std::printf("%-22s %8s %8s %11s %12s %12s %8s %8s %8s %8s\n", "run", "wall s", "setup s", "env steps",
              "env-steps/s", "steady /s", "start ms", "stop ms", "after ms", "overlap");
  std::printf("%s\n", std::string(116, '-').c_str());
}

void print_row(const std::string& name, const Measured& m) {
  std::printf("%-22s %8.3f %8s %11lld %12.4g %12s %8.1f %8.1f %8.1f %8s\n", name.c_str(), m.wall_s,
              number_or_dash(m.setup_s, "%.3f").c_str(), static_cast<long long>(m.env_steps), m.sps(),
              number_or_dash(m.steady_sps, "%.4g").c_str(), m.startup_ms, m.shutdown_ms, m.after_ms,
              overlap_text(m.overlap).c_str());
}

// What the columns are (printed once).
void print_legend() {
  std::printf("wall s: the whole library call; setup s: its part before the runtime's clock starts (stages built, "
              "graphs captured); env-steps/s: env steps / wall; steady /s: between the first progress snapshot and "
              "the last that saw steps added; start / stop / after ms: the runtime's actor-system start-up, its "
              "shutdown and drain, the timeline and final checkpoint after it; overlap: the timeline's time with >= 2 "
              "streams busy / its span, over the first ~20k pieces of work of each agent (\"-\": no timeline). TARGET "
              "lines use wall and env-steps/s.\n");
}

const char* verdict(bool pass) { return pass ? "PASS" : "FAIL"; }

// The config's agent named `name`, alone (still a run of [[agent]] tables, as the pair).
AgentsConfig only_agent(const AgentsConfig& both, const std::string& name) {
  AgentsConfig one;
  one.several = true;
  for (const AgentConfig& a : both.agents)
    if (a.name == name) one.agents.push_back(a);
  if (one.agents.size() != 1) throw std::runtime_error("dqn_and_ppo_ou.toml: no agent named \"" + name + "\"");
  return one;
}

// (1) DQN + PPO together against each alone. The budgets are balanced first (PPO's scaled so that
// each agent alone takes about the same wall), else the pair's wall is bounded below by the slower
// agent alone and the ratio measures the budgets, not the overlap.
void bench_agents(const fs::path& configs, const Options& o) {
  const AgentsConfig file = load_agents_config(configs / "dqn_and_ppo_ou.toml");
  const std::int64_t steps = steps_of(2'000'000, o);
  run_agents_timed(budgeted(file, 32'768), "warmup-both");  // untimed: modules, cuBLAS, allocator
  const Measured dqn = run_agents_timed(only_agent(budgeted(file, steps), "dqn"), "dqn-alone");
  const Measured probe = run_agents_timed(only_agent(budgeted(file, steps), "ppo"), "ppo-probe");
  const std::int64_t ppo_steps =
      std::max<std::int64_t>(steps, static_cast<std::int64_t>(static_cast<double>(steps) * dqn.wall_s / probe.wall_s));
  AgentsConfig both = file;
  for (AgentConfig& a : both.agents) set_budget(a.config, a.name == "ppo" ? ppo_steps : steps);
  std::printf("\n(1) DQN + PPO agents at once vs each alone: configs/dqn_and_ppo_ou.toml, dqn %lld env steps, ppo %lld "
              "(balanced: ppo alone took %.3f s for %lld)\n",
              static_cast<long long>(steps), static_cast<long long>(ppo_steps), probe.wall_s,
              static_cast<long long>(steps));
  print_header();
  print_row("dqn alone", dqn);
  const Measured ppo = run_agents_timed(only_agent(both, "ppo"), "ppo-alone");
  print_row("ppo alone", ppo);
  const Measured pair = run_agents_timed(both, "dqn+ppo");
  print_row("dqn + ppo together", pair);
  const double sum = dqn.wall_s + ppo.wall_s;
  const double ratio = pair.wall_s / sum;
  std::printf("perfect-overlap bound with these budgets: max(alone) / sum(alone) = %.3f\n",
              std::max(dqn.wall_s, ppo.wall_s) / sum);
  std::printf("TARGET dqn+ppo together: wall %.3f s = %.3f x (dqn alone %.3f s + ppo alone %.3f s), overlap %s "
              "(target <= 0.65): %s\n",
              pair.wall_s, ratio, dqn.wall_s, ppo.wall_s, overlap_text(pair.overlap).c_str(), verdict(ratio <= 0.65));
}

// (2) 8 seeds of the OU DQN config at once against one seed.
void bench_seeds(const fs::path& configs, const Options& o) {
  const AgentsConfig file = load_agents_config(configs / "pipeline_dqn_ou_market.toml");
  const std::int64_t steps = steps_of(2'000'000, o);
  std::printf("\n(2) --seeds 1..8 vs --seeds 1: configs/pipeline_dqn_ou_market.toml, %lld env steps per seed\n",
              static_cast<long long>(steps));
  run_agents_timed(with_seeds(budgeted(file, 32'768), {1}), "warmup-seed");
  print_header();
  const Measured one = run_agents_timed(with_seeds(budgeted(file, steps), {1}), "seeds-1");
  print_row("1 seed", one);
  const Measured eight = run_agents_timed(with_seeds(budgeted(file, steps), {1, 2, 3, 4, 5, 6, 7, 8}), "seeds-1..8");
  print_row("8 seeds (aggregate)", eight);
  const double ratio = eight.sps() / one.sps();
  std::printf("TARGET 8 seeds at once: %.4g aggregate env-steps/s = %.2f x one seed's %.4g (target >= 5x): %s\n",
              eight.sps(), ratio, one.sps(), verdict(ratio >= 5.0));
}

Measured median_of(std::vector<Measured> runs) {
  std::sort(runs.begin(), runs.end(), [](const Measured& a, const Measured& b) { return a.wall_s < b.wall_s; });
  return runs[runs.size() / 2];
}

// (3) PPO through the actors (lag 0, lag 1) against the synchronous loop.
void bench_ppo(const fs::path& configs, const Options& o) {
  const RunConfig file = load_run_config(configs / "ppo_pipeline_cartpole.toml");
  const std::int64_t steps = steps_of(500'000, o);  // the config's own budget
  const int reps = o.quick ? 1 : 3;
  struct Mode {
    std::string name, mode;
    int lag;
  };
  const std::vector<Mode> modes = {{"sync", "sync", 0}, {"actors lag 0", "actors", 0}, {"actors lag 1", "actors", 1}};
  auto config_of = [&](const Mode& m, std::int64_t total) {
    RunConfig c = file;
    set_budget(c, total);
    c.pipeline.mode = m.mode;
    c.pipeline.policy_lag = m.lag;
    return c;
  };
  std::printf("\n(3) PPO through the actors vs the synchronous loop: configs/ppo_pipeline_cartpole.toml, %lld env "
              "steps (%lld iterations of %lld envs x %lld steps), median of %d run%s each, interleaved\n",
              static_cast<long long>(steps),
              static_cast<long long>(ppo_iterations(config_of(modes[0], steps))),
              static_cast<long long>(file.env.num_envs), static_cast<long long>(file.learner.rollout_steps), reps,
              reps == 1 ? "" : "s");
  for (const Mode& m : modes) run_one_timed(config_of(m, 8 * file.env.num_envs * file.learner.rollout_steps), "warmup");
  std::vector<std::vector<Measured>> runs(modes.size());
  for (int r = 0; r < reps; ++r)
    for (std::size_t k = 0; k < modes.size(); ++k)
      runs[k].push_back(run_one_timed(config_of(modes[k], steps), "ppo-" + modes[k].mode + std::to_string(k)));
  print_header();
  std::vector<Measured> med;
  for (std::size_t k = 0; k < modes.size(); ++k) {
    med.push_back(median_of(runs[k]));
    print_row(modes[k].name, med.back());
    if (reps > 1) {
      std::printf("%-22s", "  (walls s)");
      for (const Measured& m : runs[k]) std::printf(" %.3f", m.wall_s);
      std::printf("\n");
    }
  }
  const double lag0 = med[1].wall_s / med[0].wall_s, lag1 = med[2].wall_s / med[0].wall_s;
  std::printf("TARGET ppo actors lag 1 vs sync: wall %.3f s = %.3f x sync's %.3f s (%.4g vs %.4g env-steps/s) "
              "(target < 1): %s\n",
              med[2].wall_s, lag1, med[0].wall_s, med[2].sps(), med[0].sps(), verdict(lag1 < 1.0));
  std::printf("TARGET ppo actors lag 0 vs sync: wall %.3f s = %.3f x sync's %.3f s (%.4g vs %.4g env-steps/s) "
              "(target <= 1.10): %s\n",
              med[1].wall_s, lag0, med[0].wall_s, med[1].sps(), med[0].sps(), verdict(lag0 <= 1.10));
}

Options parse(int argc, char** argv) {
  Options o;
  auto usage = [&](const std::string& why) {
    std::fprintf(stderr, "%s: %s\nusage: %s [--quick] [--scale F] [--verbose] [agents|seeds|ppo ...]\n", argv[0],
                 why.c_str(), argv[0]);
    std::exit(2);
  };
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") {
      o.quick = true;
    } else if (a == "--verbose") {
      o.verbose = true;
    } else if (a == "--scale") {
      if (i + 1 >= argc) usage("--scale needs a positive number");
      char* end = nullptr;
      o.scale = std::strtod(argv[++i], &end);
      if (end == argv[i] || *end != '\0' || !(o.scale > 0)) usage(std::string("--scale ") + argv[i] + ": not a positive number");
    } else if (a == "agents" || a == "seeds" || a == "ppo") {
      o.only.insert(a);
    } else {
      usage("unknown argument '" + a + "' (allowed: --quick, --scale F, --verbose, agents, seeds, ppo)");
    }
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  // Line by line even into a file: a run cut by a timeout keeps the rows it measured.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  const Options o = parse(argc, argv);
  std::string why;
  if (gpu::device_count(&why) == 0) {
    std::printf("no CUDA device present (%s): nothing to measure\n", why.c_str());
    return 0;
  }
  const fs::path configs = shipped_configs_dir();
  if (configs.empty() || !fs::exists(configs / "dqn_and_ppo_ou.toml")) {
    std::fprintf(stderr, "%s: the shipped configs are not found (set FOXHUNT_CONFIGS to the repository's configs/)\n",
                 argv[0]);
    return 2;
  }
  bench::set_runtime_log_level(o.verbose);
  FH_CHECK(cudaSetDevice(0));
  FH_CHECK(cudaFree(nullptr));  // the context, before any clock starts
  const auto devices = gpu::list_devices();
  std::printf("Agents in the actor runtime (issue 17): device %s; configs %s%s\n", devices.front().name.c_str(),
              configs.string().c_str(), o.quick ? "; --quick" : "");
  g_tmp = fs::temp_directory_path() / ("foxhunt_bench_agents." + std::to_string(::getpid()));
  fs::create_directories(g_tmp);
  print_legend();
  const auto t0 = std::chrono::steady_clock::now();
  int rc = 0;
  try {
    if (o.wants("agents")) bench_agents(configs, o);
    if (o.wants("seeds")) bench_seeds(configs, o);
    if (o.wants("ppo")) bench_ppo(configs, o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", argv[0], e.what());
    rc = 1;
  }
  std::error_code ec;
  fs::remove_all(g_tmp, ec);
  std::printf("\nbench wall %.1f s\n", seconds_since(t0));
  return rc;
}
