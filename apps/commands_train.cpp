// `foxhunt train --config FILE [--resume DIR] [--run-dir DIR] [--overwrite]`: the CLI around
// actors::run_training (actors/train_run.hpp). Order: every host check (config, checkpoint, run
// directory, memory estimate), then the device (present, run.device among them, free memory),
// and only then the run directory is created: a refused run writes nothing.
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <exception>
#include <filesystem>
#include <memory>
#include <string>

#include "actors/agents_run.hpp"
#include "actors/train_run.hpp"
#include "apps/commands.hpp"
#include "apps/distributed_train.hpp"
#include "apps/run_checks.hpp"
#include "apps/run_dir.hpp"
#include "gpu/device.hpp"

namespace foxhunt::apps {
namespace fs = std::filesystem;

void end_undrained(Console& io, int code) {
  spdlog::error("ending the process without freeing the device memory of work that did not complete");
  spdlog::default_logger()->flush();
  io.out.flush();
  io.err.flush();
  std::_Exit(code);
}

using namespace foxhunt::actors;

namespace {

struct TrainArgs {
  std::string config, resume, run_dir, seeds;
  bool overwrite = false;
  int gpus = 0;  // > 0: every rank of a data-parallel run in this process
  DistributedArgs distributed;
};

// run.device (and under placement "split" the collector's device) among the devices present, and
// each device's share of the estimate within its free memory. Returns the problem ("" when the run
// fits).
std::string device_problem(const RunConfig& config, const MemoryEstimate& memory, int count) {
  const std::vector<actors::DeviceMemoryShare> shares = actors::per_device(config, memory);
  for (const actors::DeviceMemoryShare& share : shares) {
    const int d = share.device;
    const std::string key = d == config.run.device ? "run.device" : "distributed.collector_device";
    if (d < 0 || d >= count) {
      std::string list;
      for (const auto& info : gpu::list_devices())
        list += "\n  " + std::to_string(info.ordinal) + ": " + info.name + " (" + human_bytes(info.total_memory) + ")";
      return key + " = " + std::to_string(d) + ": this machine has " + std::to_string(count) +
             (count == 1 ? " device" : " devices") + " (" + key + " in [0, " + std::to_string(count - 1) + "]):" + list;
    }
    const gpu::DeviceMemory m = gpu::device_memory(d);
    if (share.bytes <= m.free) continue;
    const std::string what =
        shares.size() == 1
            ? "the run needs an estimated " + human_bytes(memory.total()) + " of device memory (replay " +
                  human_bytes(memory.replay) + ", learner " + human_bytes(memory.learner) + ", collector " +
                  human_bytes(memory.collector) + ", fixed " + human_bytes(memory.fixed) + ")"
            : "the run's " + share.roles + " need an estimated " + human_bytes(share.bytes) + " of device memory";
    return what + ", device " + std::to_string(d) + " has " + human_bytes(m.free) + " free of " + human_bytes(m.total) +
           ": lower replay.capacity, learner.hidden or env.num_envs (foxhunt check prints the estimate)";
  }
  return "";
}

// The devices this process sees; 0 after saying why there is none.
int visible_devices(Console& io) {
  std::string why;
  const int count = gpu::device_count(&why);
  if (count == 0)
    io.err << "foxhunt train: needs a CUDA device: " << why << " (foxhunt check validates a config without one)\n";
  return count;
}

// A run of several agents ([[agent]] tables or --seeds): actors::run_agents_training.
int train_agents(const TrainArgs& a, CheckedAgents run, Console& io) {
  RunDirPlan dir;
  const RunConfig& shared = run.config.agents.front().config;
  try {
    const fs::path path = a.run_dir.empty() ? default_run_dir(shared.run.name) : fs::path(a.run_dir);
    dir = plan_run_dir(path, a.overwrite, run.resume);
  } catch (const std::invalid_argument& e) {
    io.err << "foxhunt train: " << e.what() << "\n";
    return 2;
  }
  const int count = visible_devices(io);
  if (count == 0) return 1;
  if (const std::string problem = device_problem(shared, run.total, count); !problem.empty()) {
    io.err << "foxhunt train: " << problem << " (" << run.config.agents.size() << " agents together)\n";
    return 2;
  }
  try {
    prepare_run_dir(dir);
  } catch (const std::invalid_argument& e) {
    io.err << "foxhunt train: " << e.what() << "\n";
    return 2;
  }
  log_to_run_dir(dir.dir, shared.logging.level);
  warn_replaced(dir);
  spdlog::info("run directory {} ({} agents)", fs::absolute(dir.dir).string(), run.config.agents.size());
  for (std::size_t i = 0; i < run.config.agents.size(); ++i)
    spdlog::info("agent {}: {} (seed {}, stream priority {}), estimated device memory {}", run.config.agents[i].name,
                 run.config.agents[i].config.learner.kind, run.config.agents[i].config.run.seed,
                 run.config.agents[i].stream_priority, human_bytes(run.memory[i].total()));
  AgentsTrainRequest req;
  req.config = run.config;
  req.run_dir = dir.dir;
  req.resume = run.checkpoints;
  req.stop_signal = &install_stop_signals();
  try {
    const AgentsTrainOutcome out = run_agents_training(req);
    const AgentsResult& r = out.result;
    if (!r.outcome.ok()) io.err << "foxhunt train: failed: " << r.outcome.reason << "\n";
    for (const auto& agent : r.agents)
      if (!agent.checkpoint_error.empty())
        io.err << "foxhunt train: agent " << agent.name << ": " << agent.checkpoint_error << "\n";
    if (r.undrained) end_undrained(io, r.exit_code());
    return r.exit_code();
  } catch (const std::exception& e) {
    io.err << "foxhunt train: " << e.what() << "\n";
    return 1;
  }
}

int train(const TrainArgs& a, Console& io) {
  CheckedRun run;
  RunDirPlan dir;
  try {
    CheckedAgents agents = check_agents(a.config, a.seeds, a.resume);
    if (agents.config.several) {
      if (a.distributed.given() || a.gpus > 0)
        throw std::invalid_argument("--rank/--world/--gpus: several agents in one run train on one GPU (world 1)");
      return train_agents(a, std::move(agents), io);
    }
    run = check_run(a.config, a.resume);
    if (a.gpus > 0) {
      if (a.distributed.given() || a.distributed.device >= 0)
        throw std::invalid_argument(
            "--gpus runs every rank in this process (rank r on device r): not with --rank, "
            "--world, --coordinator or --device");
      if (a.gpus > 1024) throw std::invalid_argument("--gpus must be in [1, 1024], got " + std::to_string(a.gpus));
      return train_local_ranks(a.gpus, run, a.run_dir, a.overwrite, io);
    }
    if (a.distributed.given() || run.config.distributed.world > 1)
      return train_rank(a.distributed, run, a.run_dir, a.overwrite, io);
    const fs::path path = a.run_dir.empty() ? default_run_dir(run.config.run.name) : fs::path(a.run_dir);
    dir = plan_run_dir(path, a.overwrite, run.resume);
  } catch (const std::invalid_argument& e) {
    io.err << "foxhunt train: " << e.what() << "\n";
    return 2;
  }
  const int count = visible_devices(io);
  if (count == 0) return 1;
  if (const std::string problem = device_problem(run.config, run.memory, count); !problem.empty()) {
    io.err << "foxhunt train: " << problem << "\n";
    return 2;
  }
  try {
    prepare_run_dir(dir);
  } catch (const std::invalid_argument& e) {
    io.err << "foxhunt train: " << e.what() << "\n";
    return 2;
  }
  log_to_run_dir(dir.dir, run.config.logging.level);
  warn_replaced(dir);
  spdlog::info("run directory {}", fs::absolute(dir.dir).string());
  spdlog::info("estimated device memory {} (replay {}, learner {}, collector {}, fixed {})",
               human_bytes(run.memory.total()), human_bytes(run.memory.replay), human_bytes(run.memory.learner),
               human_bytes(run.memory.collector), human_bytes(run.memory.fixed));
  TrainRequest req;
  req.config = run.config;
  req.run_dir = dir.dir;
  req.resume = run.resume;
  req.stop_signal = &install_stop_signals();
  try {
    const TrainOutcome out = run_training(req);
    const RunResult& r = out.result;
    if (!r.outcome.ok()) io.err << "foxhunt train: failed: " << r.outcome.reason << "\n";
    if (r.undrained) end_undrained(io, r.exit_code());
    return r.exit_code();
  } catch (const std::exception& e) {
    io.err << "foxhunt train: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace

void add_train_command(CLI::App& app, Console& io) {
  auto args = std::make_shared<TrainArgs>();
  auto* t = app.add_subcommand("train", "Train an agent with the actor pipeline (progress, metrics, checkpoints)");
  t->add_option("--config", args->config, "TOML run configuration (foxhunt check --help: where the shipped ones are)")
      ->required()
      ->check(CLI::ExistingFile);
  t->add_option("--resume", args->resume,
                "checkpoint directory, or a run directory to continue from its latest; the resumed run writes "
                "into a new --run-dir (its step count continues)");
  t->add_option("--run-dir", args->run_dir,
                "where logs, metrics and checkpoints go (default runs/<name>-<time>); must be new or empty");
  t->add_flag("--overwrite", args->overwrite, "replace the contents of a non-empty --run-dir (listed in the log)");
  t->add_option("--seeds", args->seeds,
                "run every agent of the config once per seed, all at once (e.g. 1,2,3: distinct non-negative "
                "integers); each is an agent <name>-seed<s> (seed<s> for a file of one agent)");
  t->add_option("--gpus", args->gpus,
                "run every rank of a data-parallel run in this process, rank r on device r (docs/distributed.md); "
                "rank r >= 1 writes <run-dir>.rank<r>")
      ->check(CLI::PositiveNumber);
  add_distributed_options(*t, args->distributed);
  t->callback([args, &io] { io.exit_code = train(*args, io); });
}

}  // namespace foxhunt::apps
