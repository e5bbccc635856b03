#include "apps/distributed_train.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <memory>
#include <mutex>
#include <thread>

#include "actors/rendezvous.hpp"
#include "actors/runtime.hpp"
#include "actors/train_run.hpp"
#include "apps/run_dir.hpp"
#include "gpu/check.hpp"
#include "gpu/data_parallel.hpp"
#include "gpu/device.hpp"
#include "gpu/nccl.hpp"

namespace foxhunt::apps {
namespace fs = std::filesystem;
using namespace foxhunt::actors;

namespace {

// What the rendezvous' watch tells the rank (from a CAF thread): shared, so a late callback
// during teardown still finds it alive.
struct LostState {
  std::atomic<int> rank{-1};
  std::atomic<int> stop{0};  // the run's stop flag: the signals mirrored, 2 once a rank is lost
  std::mutex mutex;
  std::string why;
  std::atomic<gpu::NcclCommunicator*> comm{nullptr};
  void lost(int r, const std::string& w) {
    {
      std::lock_guard lock(mutex);
      why = w;
    }
    rank.store(r);
    // A collective waiting for the lost rank never returns on its own: abort the communicator
    // (its streams then fail, which the run's watch sees), and stop the run.
    if (gpu::NcclCommunicator* c = comm.load()) c->abort();
    stop.store(2);
  }
  std::string reason() {
    std::lock_guard lock(mutex);
    return why;
  }
};

// The distributed keys after the command line's overrides, checked as the config reader would.
std::string distributed_problem(const RunConfig& c) {
  const auto& d = c.distributed;
  if (d.world < 1 || d.world > 1024) return "--world must be in [1, 1024], got " + std::to_string(d.world);
  if (d.rank < 0 || d.rank >= d.world)
    return "--rank must be in [0, " + std::to_string(d.world) + ") (world " + std::to_string(d.world) + "), got " +
           std::to_string(d.rank);
  if (d.world > 1 && c.learner.kind == "dqn" && !c.run.deterministic)
    return "a DQN run over several ranks needs run.deterministic = true (every replica must run the same number of "
           "updates)";
  try {
    (void)coordinator_address(d.coordinator);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

}  // namespace

void add_distributed_options(CLI::App& cmd, DistributedArgs& a) {
  cmd.add_option("--rank", a.rank, "this process's rank in a data-parallel run (docs/distributed.md); with --world");
  cmd.add_option("--world", a.world, "ranks in the run (overrides distributed.world)");
  cmd.add_option("--coordinator", a.coordinator,
                 "HOST:PORT where rank 0 publishes its coordinator (overrides distributed.coordinator)");
  cmd.add_option("--device", a.device, "CUDA device of this rank (overrides run.device; foxhunt launch: the rank)");
  cmd.add_flag("--rendezvous-only", a.rendezvous_only,
               "CPU only: the rendezvous and --hold-ms of watching the other ranks, no training (protocol tests)")
      ->group("");  // hidden
  cmd.add_option("--hold-ms", a.hold_ms, "with --rendezvous-only: how long the ranks stay joined")->group("");
}

int train_rank(const DistributedArgs& a, CheckedRun run, const std::string& run_dir_arg, bool overwrite, Console& io) {
  RunConfig& cfg = run.config;
  auto& d = cfg.distributed;
  if (a.world > 0) d.world = a.world;
  if (a.rank >= 0) d.rank = a.rank;
  if (!a.coordinator.empty()) d.coordinator = a.coordinator;
  if (a.device >= 0) cfg.run.device = a.device;
  if (const std::string why = distributed_problem(cfg); !why.empty()) {
    io.err << "foxhunt train: " << why << "\n";
    return 2;
  }
  const std::string tag = "rank " + std::to_string(d.rank) + " of " + std::to_string(d.world);
  const auto [host, port] = coordinator_address(d.coordinator);
  RendezvousSpec spec;
  spec.world = d.world;
  spec.rank = d.rank;
  spec.host = host;
  spec.port = port;
  spec.config_hash = distributed_config_hash(cfg);  // before the rank's own seed below
  spec.build_id = build_id();
  spec.timeout = std::chrono::milliseconds(d.timeout_ms);
  // Every rank its own random streams (environments, exploration, noise); rank 0 keeps run.seed.
  cfg.run.seed = gpu::rank_seed(cfg.run.seed, d.rank);

  const bool train = !a.rendezvous_only;
  if (train) {
    std::string why;
    const int count = gpu::device_count(&why);
    if (count == 0 || cfg.run.device >= count) {
      io.err << "foxhunt train: " << tag << ": needs CUDA device " << cfg.run.device << ", found " << count
             << (why.empty() ? "" : " (" + why + ")") << "\n";
      return 1;
    }
  }

  auto lost = std::make_shared<LostState>();
  caf::actor_system_config caf_cfg;
  configure_rendezvous(caf_cfg, spec.timeout);
  caf::actor_system system{caf_cfg};
  std::unique_ptr<Rendezvous> rv;
  try {
    const std::string id = d.rank == 0 ? gpu::to_hex(gpu::nccl_unique_id()) : std::string();
    rv = std::make_unique<Rendezvous>(system, spec, id,
                                      [lost](int r, const std::string& why) { lost->lost(r, why); });
  } catch (const std::exception& e) {
    io.err << "foxhunt train: " << tag << ": rendezvous failed: " << e.what() << "\n";
    return kRendezvousFailedExit;
  }
  io.out << "foxhunt train: " << tag << " joined at " << host << ":" << (d.rank == 0 ? rv->port() : port)
         << " (config " << spec.config_hash << ")" << std::endl;

  const auto lost_exit = [&] {
    io.err << "foxhunt train: " << tag << ": ending because " << lost->reason() << "\n";
    return kPeerLostExit;
  };
  if (!train) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(a.hold_ms);
    while (std::chrono::steady_clock::now() < until && lost->rank.load() < 0)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (lost->rank.load() >= 0) return lost_exit();
    rv->finished();
    return 0;
  }

  RunDirPlan dir;
  try {
    fs::path path = run_dir_arg.empty() ? default_run_dir(cfg.run.name + (d.rank > 0 ? ".rank" + std::to_string(d.rank) : ""))
                                        : fs::path(run_dir_arg);
    if (d.rank > 0 && !run_dir_arg.empty()) path += ".rank" + std::to_string(d.rank);
    dir = plan_run_dir(path, overwrite, run.resume);
    prepare_run_dir(dir);
  } catch (const std::invalid_argument& e) {
    io.err << "foxhunt train: " << tag << ": " << e.what() << "\n";
    return 2;
  }
  log_to_run_dir(dir.dir, cfg.logging.level);
  spdlog::info("{}: run directory {}, device {}, seed {}", tag, fs::absolute(dir.dir).string(), cfg.run.device,
               cfg.run.seed);
  int code = 1;
  try {
    FH_CHECK(cudaSetDevice(cfg.run.device));
    gpu::NcclCommunicator comm(gpu::nccl_id_from_hex(rv->nccl_id_hex()), d.world, d.rank);
    lost->comm.store(&comm);
    if (lost->rank.load() >= 0) comm.abort();  // lost while the communicator was being built
    spdlog::info("{}: NCCL {} communicator ready", tag, gpu::nccl_version());

    TrainRequest req;
    req.config = cfg;
    req.run_dir = dir.dir;
    req.resume = run.resume;
    req.stage_options.data_parallel = gpu::DataParallel{&comm, d.bucket_bytes, false};
    req.stop_signal = &lost->stop;
    // SIGINT/SIGTERM reach the run through the same flag as a lost rank.
    const std::atomic<int>& signals = install_stop_signals();
    std::atomic<bool> done{false};
    std::thread mirror([&] {
      while (!done.load()) {
        if (const int s = signals.load(); s != 0 && lost->stop.load() == 0) lost->stop.store(s);
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    });
    try {
      const TrainOutcome out = run_training(req);
      done.store(true);
      mirror.join();
      lost->comm.store(nullptr);
      if (lost->rank.load() >= 0) return lost_exit();
      if (!out.result.outcome.ok()) io.err << "foxhunt train: " << tag << ": failed: " << out.result.outcome.reason << "\n";
      code = out.result.exit_code();
    } catch (...) {
      done.store(true);
      mirror.join();
      lost->comm.store(nullptr);
      throw;
    }
  } catch (const std::exception& e) {
    if (lost->rank.load() >= 0) return lost_exit();
    io.err << "foxhunt train: " << tag << ": " << e.what() << "\n";
    return 1;
  }
  if (code == 0) rv->finished();
  return code;
}

}  // namespace foxhunt::apps
