#include "actors/rendezvous.hpp"

#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <atomic>
#include <future>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#ifndef FOXHUNT_GIT_COMMIT
#define FOXHUNT_GIT_COMMIT "unknown"
#endif

namespace foxhunt::actors {
namespace {

// Atoms of the rendezvous (0.17: at most 10 characters; atom values travel without registration).
using join_atom = caf::atom_constant<caf::atom("rdvjoin")>;
// The join's answer: an atom value first, then the id (accepted) or the reason (refused).
constexpr caf::atom_value kAccepted = caf::atom("rdvok");
constexpr caf::atom_value kRefused = caf::atom("rdvrefuse");
using done_atom = caf::atom_constant<caf::atom("rdvdone")>;
using lost_atom = caf::atom_constant<caf::atom("rdvlost")>;
using stop_atom = caf::atom_constant<caf::atom("rdvstop")>;
using metrics_atom = caf::atom_constant<caf::atom("rdvmetric")>;

}  // namespace

struct RendezvousShared {
  RendezvousSpec spec;
  std::string id_hex;
  Rendezvous::LostFn on_lost;
  Rendezvous::StopFn on_stop;
  std::once_flag lost_once, stop_once;
  mutable std::mutex metrics_mutex;
  std::map<int, RankMetrics> metrics;  // rank 0: each rank's latest
  // rank r: rank 0 finished (its going away is no fault); shared with the Rendezvous.
  std::shared_ptr<std::atomic<bool>> coordinator_done = std::make_shared<std::atomic<bool>>(false);
  std::promise<std::string> ready;  // rank 0: all joined; rank r: the id (or an exception)
  std::once_flag ready_once;
  void lost(int rank, const std::string& why) {
    std::call_once(lost_once, [&] {
      if (on_lost) on_lost(rank, why);
    });
  }
  void stopped(int origin, int signal) {
    std::call_once(stop_once, [&] {
      if (on_stop) on_stop(origin, signal);
    });
  }
  void set_ready(std::string v) {
    std::call_once(ready_once, [&] { ready.set_value(std::move(v)); });
  }
  void set_failed(const std::string& why) {
    std::call_once(ready_once, [&] { ready.set_exception(std::make_exception_ptr(RendezvousError(why))); });
  }
};

namespace {
using Shared = RendezvousShared;

struct CoordinatorState {
  std::map<int, caf::actor> peers;  // joined ranks
  std::map<caf::actor_addr, int> rank_of;
  std::set<int> done;
  bool stopping = false;
};

std::string describe(caf::actor_system& sys, const caf::error& e) { return e ? sys.render(e) : "exited normally"; }

// The actors keep their state in a struct of their own, touched only by their handlers (one at a
// time), not in stateful_actor's state.
caf::behavior coordinator(caf::event_based_actor* self, std::shared_ptr<Shared> sh) {
  auto state = std::make_shared<CoordinatorState>();
  self->set_down_handler([=](const caf::down_msg& dm) {
    auto& st = *state;
    const auto it = st.rank_of.find(dm.source);
    if (it == st.rank_of.end()) return;
    const int r = it->second;
    if (st.done.count(r)) return;
    const std::string why = "rank " + std::to_string(r) + " is gone (" + describe(self->system(), dm.reason) + ")";
    // Every other rank learns it from the coordinator: they may be blocked in a collective that
    // waits for the lost rank, and only rank 0 watches every rank.
    for (const auto& [other, peer] : st.peers)
      if (other != r && !st.done.count(other)) self->send(peer, lost_atom::value, r, why);
    sh->lost(r, why);
  });
  return {
      [=](join_atom, int rank, int world, const std::string& hash, const std::string& build,
          const caf::actor& peer) -> caf::result<caf::atom_value, std::string> {
        auto& st = *state;
        const RendezvousSpec& s = sh->spec;
        std::string why;
        if (world != s.world)
          why = "world size " + std::to_string(world) + " differs from rank 0's " + std::to_string(s.world);
        else if (hash != s.config_hash)
          why = "config hash " + hash + " differs from rank 0's " + s.config_hash +
                " (every rank must read the same config; only distributed.rank may differ)";
        else if (build != s.build_id)
          why = "build \"" + build + "\" differs from rank 0's \"" + s.build_id + "\"";
        else if (rank < 1 || rank >= s.world)
          why = "rank " + std::to_string(rank) + " is out of range [1, " + std::to_string(s.world) + ")";
        else if (st.peers.count(rank))
          why = "rank " + std::to_string(rank) + " has already joined";
        if (!why.empty()) return {kRefused, "refused by rank 0: " + why};
        self->monitor(peer);
        st.peers[rank] = peer;
        st.rank_of[peer.address()] = rank;
        if (static_cast<int>(st.peers.size()) == s.world - 1) sh->set_ready("");
        return {kAccepted, sh->id_hex};
      },
      // A rank that finished: its going away is no fault. Rank 0's own: every peer is told (and
      // acknowledges) before rank 0 answers, so its process may exit right after.
      [=](done_atom, int rank) -> caf::response_promise {
        auto& st = *state;
        st.done.insert(rank);
        auto rp = std::make_shared<caf::response_promise>(self->make_response_promise());
        auto pending = std::make_shared<int>(0);
        if (rank == 0)
          for (const auto& [other, peer] : st.peers)
            if (!st.done.count(other)) {
              ++*pending;
              const auto one_done = [rp, pending] {
                if (--*pending == 0) rp->deliver(0);
              };
              self->request(peer, sh->spec.timeout, done_atom::value, 0)
                  .then([one_done](int) { one_done(); }, [one_done](const caf::error&) { one_done(); });
            }
        if (*pending == 0) rp->deliver(0);
        return *rp;
      },
      // A stop asked by any rank: passed on once to every rank still running.
      [=](stop_atom, int origin, int signal) {
        auto& st = *state;
        if (st.stopping) return;
        st.stopping = true;
        for (const auto& [other, peer] : st.peers)
          if (!st.done.count(other)) self->send(peer, stop_atom::value, origin, signal);
        sh->stopped(origin, signal);
      },
      [=](metrics_atom, int rank, std::int64_t env_steps, std::int64_t updates, double steps_per_s,
          double episode_return, bool has_return) {
        if (rank < 0 || rank >= sh->spec.world) return;
        std::lock_guard lock(sh->metrics_mutex);
        sh->metrics[rank] = RankMetrics{rank, env_steps, updates, steps_per_s, episode_return, has_return};
      },
  };
}

caf::behavior peer(caf::event_based_actor* self, std::shared_ptr<Shared> sh, caf::actor coord) {
  self->monitor(coord);
  self->set_down_handler([=](const caf::down_msg& dm) {
    if (dm.source != coord.address() || sh->coordinator_done->load()) return;
    const std::string why = "rank 0 (the coordinator) is gone (" + describe(self->system(), dm.reason) + ")";
    sh->set_failed(why);
    sh->lost(0, why);
  });
  const RendezvousSpec& s = sh->spec;
  self->request(coord, s.timeout, join_atom::value, s.rank, s.world, s.config_hash, s.build_id,
                caf::actor_cast<caf::actor>(self))
      .then(
          [=](caf::atom_value a, const std::string& text) {
            if (a == kAccepted)
              sh->set_ready(text);
            else
              sh->set_failed(text);
          },
          [=](const caf::error& e) { sh->set_failed("join request to rank 0 failed: " + self->system().render(e)); });
  return {
      [=](lost_atom, int rank, const std::string& why) { sh->lost(rank, why); },
      [=](stop_atom, int origin, int signal) { sh->stopped(origin, signal); },
      [=](done_atom, int) {
        sh->coordinator_done->store(true);
        return 0;
      },
  };
}

}  // namespace

WorldMetrics aggregate(const std::vector<RankMetrics>& ranks) {
  WorldMetrics w;
  double returns = 0;
  for (const RankMetrics& m : ranks) {
    w.updates = w.ranks == 0 ? m.updates : std::min(w.updates, m.updates);
    ++w.ranks;
    w.env_steps += m.env_steps;
    w.steps_per_s += m.steps_per_s;
    if (m.has_return) {
      returns += m.episode_return;
      ++w.ranks_with_return;
    }
  }
  if (w.ranks_with_return > 0) w.episode_return = returns / w.ranks_with_return;
  return w;
}

std::string build_id() {
  int nccl = 0;
  (void)ncclGetVersion(&nccl);
  return std::string("foxhunt ") + FOXHUNT_GIT_COMMIT + ", NCCL " + std::to_string(nccl) + ", CUDA runtime " +
         std::to_string(CUDART_VERSION);
}

void configure_rendezvous(caf::actor_system_config& cfg, std::chrono::milliseconds timeout) {
  cfg.load<caf::io::middleman>();
  const auto beat = std::max<std::chrono::milliseconds>(timeout / 10, std::chrono::milliseconds(20));
  cfg.set("middleman.heartbeat-interval", caf::timespan{beat});
  cfg.set("middleman.connection-timeout", caf::timespan{timeout});
}

Rendezvous::Rendezvous(caf::actor_system& system, const RendezvousSpec& spec, const std::string& nccl_id_hex,
                       LostFn on_lost, StopFn on_stop)
    : system_(system), spec_(spec) {
  if (spec.world < 1 || spec.rank < 0 || spec.rank >= spec.world)
    throw RendezvousError("rendezvous: rank " + std::to_string(spec.rank) + " is not in [0, " +
                          std::to_string(spec.world) + ")");
  auto sh = std::make_shared<Shared>();
  sh->spec = spec;
  sh->id_hex = nccl_id_hex;
  sh->on_lost = std::move(on_lost);
  sh->on_stop = std::move(on_stop);
  shared_ = sh;
  auto ready = sh->ready.get_future();
  coordinator_done_ = sh->coordinator_done;
  const auto deadline = std::chrono::steady_clock::now() + spec.timeout;
  const std::string where = spec.host + ":" + std::to_string(spec.port);
  if (spec.rank == 0) {
    self_ = system.spawn(coordinator, sh);
    // Loopback stays loopback; a named host is served on every interface (the peers come from
    // other machines).
    const bool loopback = spec.host == "127.0.0.1" || spec.host == "localhost" || spec.host == "::1";
    auto port = system.middleman().publish(self_, spec.port, loopback ? spec.host.c_str() : nullptr, true);
    if (!port) {
      caf::anon_send_exit(self_, caf::exit_reason::user_shutdown);
      throw RendezvousError("rank 0: cannot publish the coordinator at " + where + ": " + system.render(port.error()));
    }
    port_ = *port;
    id_hex_ = nccl_id_hex;
    if (spec.world == 1) sh->set_ready("");
  } else {
    caf::expected<caf::actor> coord{caf::make_error(caf::sec::invalid_argument)};
    while (true) {  // rank 0 may not be listening yet
      coord = system.middleman().remote_actor(spec.host, spec.port);
      if (coord || std::chrono::steady_clock::now() >= deadline) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (!coord)
      throw RendezvousError("rank " + std::to_string(spec.rank) + ": cannot reach rank 0's coordinator at " + where +
                            " within " + std::to_string(spec.timeout.count()) + " ms: " + system.render(coord.error()));
    coordinator_ = *coord;
    self_ = system.spawn(peer, sh, coordinator_);
  }
  if (ready.wait_until(deadline) != std::future_status::ready) {
    caf::anon_send_exit(self_, caf::exit_reason::user_shutdown);
    throw RendezvousError(spec.rank == 0 ? "rank 0: not every rank joined within " +
                                               std::to_string(spec.timeout.count()) + " ms (world " +
                                               std::to_string(spec.world) + ")"
                                         : "rank " + std::to_string(spec.rank) + ": rank 0 did not answer within " +
                                               std::to_string(spec.timeout.count()) + " ms");
  }
  try {
    std::string id = ready.get();
    if (spec.rank != 0) id_hex_ = std::move(id);
  } catch (...) {
    caf::anon_send_exit(self_, caf::exit_reason::user_shutdown);
    throw;
  }
}

void Rendezvous::finished() {
  if (finished_) return;
  finished_ = true;
  if (spec_.rank != 0 && coordinator_done_->load()) return;  // rank 0 finished first: nobody to tell
  // Acknowledged, so the message is through before this process may exit; a coordinator already
  // gone answers with an error at once (or the wait ends after the bound).
  caf::scoped_actor s{system_};
  const auto bound = std::min<std::chrono::milliseconds>(spec_.timeout, std::chrono::milliseconds(5000));
  s->request(spec_.rank == 0 ? self_ : coordinator_, bound, done_atom::value, spec_.rank)
      .receive([](int) {}, [](const caf::error&) {});
}

void Rendezvous::request_stop(int signal) {
  if (spec_.rank == 0 || !coordinator_done_->load())
    caf::anon_send(spec_.rank == 0 ? self_ : coordinator_, stop_atom::value, spec_.rank, signal);
  shared_->stopped(spec_.rank, signal);  // this rank stops even when rank 0 cannot be reached
}

void Rendezvous::send_metrics(const RankMetrics& m) {
  if (spec_.rank != 0 && coordinator_done_->load()) return;
  caf::anon_send(spec_.rank == 0 ? self_ : coordinator_, metrics_atom::value, spec_.rank, m.env_steps, m.updates,
                 m.steps_per_s, m.episode_return, m.has_return);
}

std::vector<RankMetrics> Rendezvous::rank_metrics() const {
  std::lock_guard lock(shared_->metrics_mutex);
  std::vector<RankMetrics> out;
  for (const auto& [rank, m] : shared_->metrics) out.push_back(m);
  return out;
}

Rendezvous::~Rendezvous() {
  if (spec_.rank == 0 && port_ != 0) (void)system_.middleman().unpublish(self_, port_);
  if (self_) caf::anon_send_exit(self_, caf::exit_reason::user_shutdown);
}

}  // namespace foxhunt::actors
