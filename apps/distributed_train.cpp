#include "apps/distributed_train.hpp"

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <spdlog/spdlog.h>

#include <atomic>
#include <cstring>
#include <fstream>
#include <chrono>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "actors/local_ranks.hpp"
#include "actors/metrics_log.hpp"
#include "actors/rendezvous.hpp"
#include "actors/runtime.hpp"
#include "actors/train_run.hpp"
#include "actors/world_metrics.hpp"
#include "apps/rank_resume.hpp"
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
  std::atomic<int> stop_origin{-1}, stop_signal{0};  // a stop asked by a rank (the control plane)
  std::mutex mutex;
  std::string why, stall;
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
  // This rank's learner made no progress (the runtime's watchdog, on its watch thread): a
  // collective waiting for a hung or dead peer returns once the communicator is aborted, so the
  // stream can drain for the final checkpoint. The runtime stops the run itself.
  void learner_stalled(const std::string& w) {
    {
      std::lock_guard lock(mutex);
      stall = w;
    }
    if (gpu::NcclCommunicator* c = comm.load()) c->abort();
  }
  std::string stall_reason() {
    std::lock_guard lock(mutex);
    return stall;
  }
  // Any rank's stop, passed on by rank 0: a graceful stop, as a local SIGINT/SIGTERM (the flag of
  // install_stop_signals: 1 SIGINT, 2 SIGTERM).
  void stopped(int origin, int signal) {
    stop_signal.store(signal);
    stop_origin.store(origin);
    int expected = 0;
    stop.compare_exchange_strong(expected, signal != 0 ? signal : 2);
  }
};

// Rank 0's `world/` scalars: every rank's latest metrics, rank 0's own as of now.
Scalars world_scalars(const Rendezvous& rv, const RankMetrics& own) {
  std::vector<RankMetrics> ranks = rv.rank_metrics();
  std::erase_if(ranks, [](const RankMetrics& m) { return m.rank == 0; });
  ranks.push_back(own);
  return actors::world_scalars(ranks);
}

// Mirrors this process's SIGINT/SIGTERM into a stop of the whole run (through rank 0), until
// destroyed.
class SignalMirror {
 public:
  SignalMirror(Rendezvous& rv, LostState& lost) : thread_([this, &rv, &lost] {
    const std::atomic<int>& signals = install_stop_signals();
    bool sent = false;
    while (!done_.load()) {
      if (const int s = signals.load(); s != 0 && !sent) {
        sent = true;
        if (lost.rank.load() < 0) {
          rv.request_stop(s);  // on_stop sets the flag here too
        } else {
          int expected = 0;
          lost.stop.compare_exchange_strong(expected, s);
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }) {}
  ~SignalMirror() {
    done_.store(true);
    thread_.join();
  }

 private:
  std::atomic<bool> done_{false};
  std::thread thread_;
};

fs::path rank_run_dir(const std::string& arg, const RunConfig& cfg, int rank) {
  fs::path path = arg.empty() ? default_run_dir(cfg.run.name + (rank > 0 ? ".rank" + std::to_string(rank) : ""))
                              : fs::path(arg);
  if (rank > 0 && !arg.empty()) path += ".rank" + std::to_string(rank);
  return path;
}

// --rendezvous-only: the control plane without a device. A fake run loop reports a progress
// snapshot every 50 ms (64 env steps and one update per report, episode return rank + 1) as the
// metrics message; rank 0 writes the world/ scalars into <run-dir>/metrics.jsonl. It ends after
// hold_ms, at a stop (any rank's) or when a rank is lost; at the end (not when lost) it writes
// <dir>/final.json, the fake's final state.
int fake_run(const DistributedArgs& a, const RunConfig& cfg, const std::string& run_dir_arg, Rendezvous& rv,
             LostState& lost) {
  const int rank = cfg.distributed.rank;
  const bool dir = !run_dir_arg.empty();
  const fs::path path = dir ? rank_run_dir(run_dir_arg, cfg, rank) : fs::path();
  if (dir) fs::create_directories(path);
  std::unique_ptr<JsonlWriter> jsonl;
  if (dir && rank == 0) jsonl = std::make_unique<JsonlWriter>(path / "metrics.jsonl");
  RankMetricsTracker track(rank);
  SignalMirror mirror(rv, lost);
  const auto start = std::chrono::steady_clock::now();
  const auto until = start + std::chrono::milliseconds(a.hold_ms);
  ProgressSnapshot snap;
  while (std::chrono::steady_clock::now() < until && lost.stop.load() == 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    snap.counters.env_steps += 64;
    ++snap.updates_done;
    snap.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    snap.scalars = {{"episode/return", rank + 1.0}};
    const RankMetrics& m = track(snap);
    rv.send_metrics(m);
    if (jsonl) {
      jsonl->scalars(snap.counters.env_steps, world_scalars(rv, m), wall_time_now());
      jsonl->flush();
    }
  }
  if (lost.rank.load() >= 0) return -1;
  if (dir) {
    std::ofstream(path / "final.json") << "{\"rank\": " << rank << ", \"env_steps\": " << snap.counters.env_steps
                                       << ", \"stopped_by\": " << lost.stop_origin.load() << "}\n";
  }
  return 0;
}

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
  const RunConfig shared_cfg = cfg;  // what every rank's config hash and resume plan compare
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
  // Which checkpoint this rank resumes (its own, or rank 0's learner for a new rank), checked
  // before the rendezvous: a refused resume ends here, not as a lost rank of the others.
  std::optional<RankResumePlan> resume;
  if (train && run.resume) {
    try {
      resume = plan_rank_resume(*run.resume, shared_cfg);
    } catch (const std::invalid_argument& e) {
      io.err << "foxhunt train: " << tag << ": " << e.what() << "\n";
      return 2;
    }
  }

  // From here SIGINT/SIGTERM are a stop (set aside until the run watches them), not an end.
  (void)install_stop_signals();
  auto lost = std::make_shared<LostState>();
  caf::actor_system_config caf_cfg;
  configure_rendezvous(caf_cfg, spec.timeout);
  caf::actor_system system{caf_cfg};
  std::unique_ptr<Rendezvous> rv;
  try {
    const std::string id = d.rank == 0 ? gpu::to_hex(gpu::nccl_unique_id()) : std::string();
    rv = std::make_unique<Rendezvous>(
        system, spec, id, [lost](int r, const std::string& why) { lost->lost(r, why); },
        [lost, tag](int origin, int signal) {
          spdlog::info("{}: stopping: rank {} received {}", tag, origin, stop_signal_name(signal));
          lost->stopped(origin, signal);
        });
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
  const auto stop_note = [&] {
    if (const int origin = lost->stop_origin.load(); origin >= 0)
      io.out << "foxhunt train: " << tag << ": stopped (rank " << origin << " received "
             << stop_signal_name(lost->stop_signal.load()) << ")" << std::endl;
  };
  if (!train) {
    if (fake_run(a, cfg, run_dir_arg, *rv, *lost) < 0) return lost_exit();
    stop_note();
    rv->finished();
    return 0;
  }

  RunDirPlan dir;
  try {
    dir = plan_run_dir(rank_run_dir(run_dir_arg, cfg, d.rank), overwrite,
                       resume && resume->own ? resume->own : run.resume);
    prepare_run_dir(dir);
  } catch (const std::invalid_argument& e) {
    io.err << "foxhunt train: " << tag << ": " << e.what() << "\n";
    return 2;
  }
  log_to_run_dir(dir.dir, cfg.logging.level);
  warn_replaced(dir);
  spdlog::info("{}: run directory {}, device {}, seed {}", tag, fs::absolute(dir.dir).string(), cfg.run.device,
               cfg.run.seed);
  if (resume) {
    const RankResumePlan& p = *resume;
    if (d.rank == 0)
      for (const int q : p.dropped)
        spdlog::warn("{}: resuming a {}-rank run on {}: the replay shard of rank {} is dropped", tag, p.old_world,
                     d.world, q);
    run.resume = materialize_rank_resume(p, dir.dir / "resume_from_rank0");
    if (p.own)
      spdlog::info("{}: resuming its own checkpoint {} ({}-rank run; the learner takes rank 0's weights)", tag,
                   p.own->string(), p.old_world);
    else
      spdlog::info("{}: a new rank of a {}-rank run: rank 0's learner and counters from {}, an empty replay shard "
                   "(sampled once it holds a batch), environments from seed {}",
                   tag, p.old_world, p.rank0_checkpoint.string(), cfg.run.seed);
  }
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
    req.on_learner_stall = [lost](const std::string& why) { lost->learner_stalled(why); };
    // Each progress report is a metrics message to rank 0, which writes the world/ aggregate into
    // its own metrics.
    auto track = std::make_shared<RankMetricsTracker>(d.rank);
    Rendezvous* r = rv.get();
    if (d.rank == 0)
      req.extend = [r, track](ProgressSnapshot& s) {
        const RankMetrics& m = (*track)(s);
        r->send_metrics(m);
        const Scalars world = world_scalars(*r, m);
        s.scalars.insert(s.scalars.end(), world.begin(), world.end());
      };
    else
      req.observer = [r, track](const ProgressSnapshot& s) { r->send_metrics((*track)(s)); };
    // SIGINT/SIGTERM stop every rank (through rank 0), a lost rank too: the same flag.
    auto mirror = std::make_unique<SignalMirror>(*rv, *lost);
    try {
      const TrainOutcome out = run_training(req);
      mirror.reset();
      lost->comm.store(nullptr);
      // A peer lost first is the cause (its loss aborted the communicator); else this rank's own
      // stall ends it like a lost rank: the others see this process go.
      int end = -1;
      if (lost->rank.load() >= 0) {
        end = lost_exit();
      } else if (const std::string stall = lost->stall_reason(); !stall.empty()) {
        io.err << "foxhunt train: " << tag << ": ending because rank " << d.rank << ": " << stall << "\n";
        if (!out.result.checkpoint_error.empty()) io.err << "foxhunt train: " << tag << ": " << out.result.checkpoint_error << "\n";
        end = kPeerLostExit;
      }
      if (out.result.undrained) end_undrained(io, end >= 0 ? end : out.result.exit_code());
      if (end >= 0) return end;
      if (!out.result.outcome.ok()) io.err << "foxhunt train: " << tag << ": failed: " << out.result.outcome.reason << "\n";
      code = out.result.exit_code();
    } catch (...) {
      mirror.reset();
      lost->comm.store(nullptr);
      throw;
    }
  } catch (const std::exception& e) {
    if (lost->rank.load() >= 0) return lost_exit();
    io.err << "foxhunt train: " << tag << ": " << e.what() << "\n";
    return 1;
  }
  if (code == 0) {
    stop_note();
    rv->finished();
  }
  return code;
}

int train_local_ranks(int gpus, CheckedRun run, const std::string& run_dir_arg, bool overwrite, Console& io) {
  RunConfig shared = run.config;
  shared.distributed.world = gpus;
  shared.distributed.rank = 0;
  if (const std::string why = distributed_problem(shared); !why.empty()) {
    io.err << "foxhunt train: --gpus " << gpus << ": " << why << "\n";
    return 2;
  }
  std::string why;
  const int count = gpu::device_count(&why);
  if (count < gpus) {
    io.err << "foxhunt train: --gpus " << gpus << " needs " << gpus << " CUDA devices (rank r on device r), found "
           << count << (why.empty() ? "" : " (" + why + ")") << "\n";
    return 1;
  }
  // Placement "split": rank r's collector on collector_device + r, as under foxhunt launch.
  if (const std::string problem = split_collectors_problem(shared, gpus, count); !problem.empty()) {
    io.err << "foxhunt train: " << problem << "\n";
    return 2;
  }
  // Each rank as foxhunt launch would start it: its rank, device and seed, its run directory and
  // its share of a resumed run, all checked before anything is created.
  LocalRanksRequest req;
  std::vector<RunDirPlan> dirs;
  std::vector<std::optional<RankResumePlan>> resumes;
  try {
    for (int r = 0; r < gpus; ++r) {
      RunConfig c = shared;
      c.distributed.rank = r;
      std::optional<RankResumePlan> plan;
      if (run.resume) plan = plan_rank_resume(*run.resume, c);
      c.run.device = r;
      c.run.seed = gpu::rank_seed(shared.run.seed, r);
      dirs.push_back(
          plan_run_dir(rank_run_dir(run_dir_arg, c, r), overwrite, plan && plan->own ? plan->own : run.resume));
      resumes.push_back(plan);
      req.ranks.push_back(LocalRank{c, dirs.back().dir, std::nullopt});
    }
    for (const RunDirPlan& d : dirs) prepare_run_dir(d);
  } catch (const std::invalid_argument& e) {
    io.err << "foxhunt train: --gpus " << gpus << ": " << e.what() << "\n";
    return 2;
  }
  log_to_run_dir(dirs.front().dir, shared.logging.level);  // one process, one log: rank 0's
  for (const RunDirPlan& d : dirs) warn_replaced(d);
  for (int r = 0; r < gpus; ++r) {
    LocalRank& rank = req.ranks[static_cast<std::size_t>(r)];
    spdlog::info("rank {} of {}: run directory {}, device {}, seed {}", r, gpus, fs::absolute(rank.run_dir).string(),
                 rank.config.run.device, rank.config.run.seed);
    if (const auto& p = resumes[static_cast<std::size_t>(r)]) {
      if (r == 0)
        for (const int q : p->dropped)
          spdlog::warn("resuming a {}-rank run on {}: the replay shard of rank {} is dropped", p->old_world, gpus, q);
      rank.resume = materialize_rank_resume(*p, rank.run_dir / "resume_from_rank0");
    } else {
      rank.resume = run.resume;
    }
  }
  req.stop_signal = &install_stop_signals();
  req.on_undrained = [&io](int rank, int code) {
    io.err << "foxhunt train: rank " << rank << " of the run: its GPU work did not drain\n";
    end_undrained(io, code);
  };
  io.out << "foxhunt train: " << gpus << " ranks in this process (rank r on device r), run directory "
         << fs::absolute(dirs.front().dir).string() << std::endl;
  LocalRanksResult out;
  try {
    out = run_local_ranks(req);
  } catch (const std::exception& e) {
    io.err << "foxhunt train: --gpus " << gpus << ": " << e.what() << "\n";
    return 1;
  }
  if (out.first_failed >= 0)
    io.err << "foxhunt train: rank " << out.first_failed << " of " << gpus << " failed: " << out.cause
           << "; every rank was ended\n";
  for (int r = 0; r < gpus; ++r) {
    const LocalRankResult& x = out.ranks[static_cast<std::size_t>(r)];
    if (!x.result.checkpoint_error.empty())
      io.err << "foxhunt train: rank " << r << ": " << x.result.checkpoint_error << "\n";
  }
  return out.exit_code();
}

}  // namespace foxhunt::apps
