#include "actors/local_ranks.hpp"

#include <cuda_runtime.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>

#include "actors/train_run.hpp"
#include "actors/world_metrics.hpp"
#include "gpu/check.hpp"
#include "gpu/data_parallel.hpp"
#include "gpu/nccl.hpp"

namespace foxhunt::actors {
namespace {

// What the ranks share: the stop flag every run watches, each rank's communicator (to abort), the
// first failure, and every rank's latest metrics (rank 0 writes their aggregate).
class World {
 public:
  explicit World(int ranks) : comms_(static_cast<std::size_t>(ranks)), metrics_(static_cast<std::size_t>(ranks)) {
    for (int r = 0; r < ranks; ++r) metrics_[static_cast<std::size_t>(r)].rank = r;
  }

  std::atomic<int> stop{0};

  void set_comm(int rank, gpu::NcclCommunicator* c) {
    std::lock_guard lock(mutex_);
    comms_[static_cast<std::size_t>(rank)] = c;
    if (c && failed_ >= 0) c->abort();  // a rank failed while this one was joining
  }

  // The first failure ends the run: every communicator aborted (collectives return), every run
  // stopped. Later failures are the consequence and keep the first as the cause.
  void fail(int rank, const std::string& why) {
    std::lock_guard lock(mutex_);
    if (failed_ < 0) {
      failed_ = rank;
      cause_ = why;
      spdlog::error("rank {} of {}: {}; ending every rank", rank, comms_.size(), why);
    }
    for (gpu::NcclCommunicator* c : comms_)
      if (c) c->abort();
    int expected = 0;
    stop.compare_exchange_strong(expected, 2);
  }

  int failed() const {
    std::lock_guard lock(mutex_);
    return failed_;
  }
  std::string cause() const {
    std::lock_guard lock(mutex_);
    return cause_;
  }

  void report(const RankMetrics& m) {
    std::lock_guard lock(mutex_);
    metrics_[static_cast<std::size_t>(m.rank)] = m;
    reported_.insert(m.rank);
  }
  std::vector<RankMetrics> reported() const {
    std::lock_guard lock(mutex_);
    std::vector<RankMetrics> out;
    for (const int r : reported_) out.push_back(metrics_[static_cast<std::size_t>(r)]);
    return out;
  }

 private:
  mutable std::mutex mutex_;
  std::vector<gpu::NcclCommunicator*> comms_;
  std::vector<RankMetrics> metrics_;
  std::set<int> reported_;
  int failed_ = -1;
  std::string cause_;
};

void check_request(const LocalRanksRequest& req) {
  const int world = static_cast<int>(req.ranks.size());
  if (world < 1) throw std::invalid_argument("run_local_ranks: no ranks");
  std::set<int> devices;
  for (int r = 0; r < world; ++r) {
    const RunConfig& c = req.ranks[static_cast<std::size_t>(r)].config;
    if (c.distributed.rank != r || c.distributed.world != world)
      throw std::invalid_argument("run_local_ranks: rank " + std::to_string(r) + " has distributed.rank " +
                                  std::to_string(c.distributed.rank) + " and world " +
                                  std::to_string(c.distributed.world) + " (want " + std::to_string(r) + " of " +
                                  std::to_string(world) + ")");
    if (!devices.insert(c.run.device).second)
      throw std::invalid_argument("run_local_ranks: two ranks on device " + std::to_string(c.run.device) +
                                  " (NCCL needs one GPU per rank)");
  }
}

// One rank's thread: its communicator, its run, its failure reported to the world.
void run_rank(const LocalRanksRequest& req, int rank, gpu::NcclCommunicator& comm, World& world, LocalRankResult& out) {
  const LocalRank& me = req.ranks[static_cast<std::size_t>(rank)];
  try {
    FH_CHECK(cudaSetDevice(me.config.run.device));
    world.set_comm(rank, &comm);
    TrainRequest t;
    t.config = me.config;
    t.run_dir = me.run_dir;
    t.resume = me.resume;
    t.stage_options.data_parallel = gpu::DataParallel{&comm, me.config.distributed.bucket_bytes, false};
    t.stop_signal = &world.stop;
    t.console = req.console && rank == 0;
    t.on_learner_stall = [&world, rank](const std::string& why) { world.fail(rank, why); };
    auto track = std::make_shared<RankMetricsTracker>(rank);
    if (rank == 0)
      t.extend = [&world, track](ProgressSnapshot& s) {
        world.report((*track)(s));
        const Scalars w = world_scalars(world.reported());
        s.scalars.insert(s.scalars.end(), w.begin(), w.end());
      };
    t.observer = [&world, &req, track, rank](const ProgressSnapshot& s) {
      if (rank != 0) world.report((*track)(s));
      if (req.observer) req.observer(rank, s);
    };
    try {
      TrainOutcome o = run_training(t);
      world.set_comm(rank, nullptr);
      out.result = o.result;
      out.ran = true;
      if (o.result.undrained && req.on_undrained) req.on_undrained(rank, o.result.exit_code());
      if (!o.result.outcome.ok()) world.fail(rank, o.result.outcome.reason);
    } catch (...) {
      world.set_comm(rank, nullptr);
      throw;
    }
  } catch (const std::exception& e) {
    out.error = e.what();
    world.fail(rank, e.what());
  }
}

}  // namespace

int LocalRanksResult::exit_code() const {
  if (first_failed >= 0) return 1;
  for (const LocalRankResult& r : ranks)
    if (!r.ran || r.result.exit_code() != 0) return 1;
  return 0;
}

LocalRanksResult run_local_ranks(const LocalRanksRequest& req) {
  check_request(req);
  const int size = static_cast<int>(req.ranks.size());
  World world(size);
  LocalRanksResult result;
  result.ranks.resize(static_cast<std::size_t>(size));
  std::vector<int> devices;
  for (const LocalRank& r : req.ranks) devices.push_back(r.config.run.device);
  const std::vector<std::unique_ptr<gpu::NcclCommunicator>> comms = gpu::NcclCommunicator::for_local_devices(devices);
  // The caller's stop (SIGINT/SIGTERM) reaches every rank through the world's flag.
  std::atomic<bool> done{false};
  std::thread mirror([&] {
    while (!done.load()) {
      if (req.stop_signal)
        if (const int s = req.stop_signal->load(); s != 0) {
          int expected = 0;
          world.stop.compare_exchange_strong(expected, s);
        }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  std::vector<std::thread> threads;
  threads.reserve(static_cast<std::size_t>(size));
  for (int r = 0; r < size; ++r)
    threads.emplace_back(run_rank, std::cref(req), r, std::ref(*comms[static_cast<std::size_t>(r)]), std::ref(world),
                         std::ref(result.ranks[static_cast<std::size_t>(r)]));
  for (std::thread& t : threads) t.join();
  done.store(true);
  mirror.join();
  result.first_failed = world.failed();
  result.cause = world.cause();
  return result;
}

}  // namespace foxhunt::actors
