#pragma once
// The rendezvous of a data-parallel run's ranks (docs/distributed.md), over CAF remoting (caf::io):
//
//   rank 0   publishes a coordinator actor at distributed.coordinator (host:port; loopback unless
//            the config names another host) and waits until every other rank has joined
//   rank r   connects to it (retrying until the timeout: rank 0 may start later), and asks to join
//            with (rank, world, config hash, build id); the coordinator refuses a peer whose world,
//            config hash or build differs, or whose rank is out of range or taken, with a reason
//            the peer reports; an accepted peer receives the NCCL unique id (hex).
//
// After the rendezvous each side watches the other (CAF monitors): the coordinator every peer, a
// peer the coordinator. A rank that goes away without having said it finished (its process died,
// its connection broke) is lost: on_lost(rank, why) is called (once per Rendezvous, from a CAF
// thread) on rank 0 and, through the coordinator's stop message, on every other rank, and on
// every rank when rank 0 is lost. The caller ends its run there (NCCL abort, checkpoint, exit code
// naming the rank). finished() tells the others this rank ended normally.
//
// The control plane after the rendezvous (CAF messages, atoms of at most 10 characters):
//   stop      request_stop(signal) on any rank sends (rdvstop, origin rank, signal) to the
//             coordinator (signal: install_stop_signals' flag, 1 SIGINT, 2 SIGTERM), which passes
//             it once to every other rank; on_stop(origin, signal) is called once on every rank
//             (the origin included): each stops its run gracefully and writes its final
//             checkpoint, as at a local SIGINT/SIGTERM.
//   metrics   send_metrics(m) on any rank sends (rdvmetric, rank, env steps, updates, steps/s,
//             episode return, has return) to the coordinator, which keeps each rank's latest;
//             rank 0 reads them with rank_metrics() and writes aggregate() into its own metrics.
//   checkpoint  every rank writes its own final checkpoint when its run stops (above); periodic
//             checkpoints follow the counts, which are the same on every rank.
#include <caf/actor.hpp>
#include <caf/actor_system.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace foxhunt::actors {

struct RendezvousSpec {
  int world = 1;
  int rank = 0;
  std::string host = "127.0.0.1";
  std::uint16_t port = 0;  // rank 0: 0 picks a free port (port() tells which)
  std::string config_hash;
  std::string build_id;
  std::chrono::milliseconds timeout{60'000};
};

// One rank's periodic metrics, as the metrics message carries them (its progress snapshot).
struct RankMetrics {
  int rank = 0;
  std::int64_t env_steps = 0;  // this rank's transitions
  std::int64_t updates = 0;    // learner updates done
  double steps_per_s = 0;      // env steps per second over the last progress interval
  double episode_return = 0;   // the latest mean episode return (when has_return)
  bool has_return = false;
};

// The run as one: what rank 0 writes under `world/` in its metrics.
struct WorldMetrics {
  int ranks = 0;                 // ranks that have reported
  std::int64_t env_steps = 0;    // summed
  std::int64_t updates = 0;      // the fewest of any rank (every update is a collective)
  double steps_per_s = 0;        // summed
  double episode_return = 0;     // mean over the ranks with a return
  int ranks_with_return = 0;
};
WorldMetrics aggregate(const std::vector<RankMetrics>& ranks);

struct RendezvousShared;

// A refused join, a rank that never came, a coordinator that cannot be reached or published.
class RendezvousError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// This build's identity as ranks compare it: the foxhunt commit (when built from git), the NCCL
// and CUDA runtime versions it was compiled against.
std::string build_id();

class Rendezvous {
 public:
  using LostFn = std::function<void(int rank, const std::string& why)>;
  using StopFn = std::function<void(int origin_rank, int signal)>;
  // Blocks until the rendezvous is complete (rank 0: every other rank joined; rank r: accepted)
  // or throws RendezvousError after spec.timeout. nccl_id_hex: rank 0's id to hand out (ignored
  // on other ranks). `system` must have the middleman loaded (make_rendezvous_system_config).
  // on_stop: called once (from a CAF thread) when any rank asked the run to stop.
  Rendezvous(caf::actor_system& system, const RendezvousSpec& spec, const std::string& nccl_id_hex, LostFn on_lost,
             StopFn on_stop = {});
  ~Rendezvous();
  Rendezvous(const Rendezvous&) = delete;
  Rendezvous& operator=(const Rendezvous&) = delete;

  const std::string& nccl_id_hex() const noexcept { return id_hex_; }
  std::uint16_t port() const noexcept { return port_; }  // rank 0: where the coordinator listens
  // This rank ended normally: its going away is no fault to the others. Then the actors exit.
  void finished();
  // Stops every rank of the run (this one too, through on_stop): see the control plane above.
  void request_stop(int signal);
  // This rank's periodic metrics, to rank 0's coordinator (rank 0's own included).
  void send_metrics(const RankMetrics& m);
  // Rank 0: the latest metrics of every rank that has sent any, by rank (empty on other ranks).
  std::vector<RankMetrics> rank_metrics() const;

 private:
  caf::actor_system& system_;
  RendezvousSpec spec_;
  std::string id_hex_;
  std::uint16_t port_ = 0;
  caf::actor self_;         // rank 0: the coordinator; rank r: its peer actor
  caf::actor coordinator_;  // rank r: rank 0's coordinator (a remote proxy)
  bool finished_ = false;
  std::shared_ptr<std::atomic<bool>> coordinator_done_;  // rank r: rank 0 said it finished
  std::shared_ptr<RendezvousShared> shared_;
};

// An actor system configuration with the middleman (caf::io) loaded, for a Rendezvous, with
// heartbeats: a peer whose node sends nothing for `timeout` (a frozen or hung process, a dead
// host) is disconnected, which its monitors see as it going away.
void configure_rendezvous(caf::actor_system_config& cfg, std::chrono::milliseconds timeout);

}  // namespace foxhunt::actors
