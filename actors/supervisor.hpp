#pragma once
// Supervisor: CAF 0.17 has no supervisor class, so this one is built from monitor + a policy.
// It spawns and monitors its children and decides on every DOWN message:
//   - a child that stopped because the supervisor asked (user_shutdown) is just counted down;
//   - a child that failed (exception, CUDA error turned exception, injected fault, killed with an
//     abnormal reason) is respawned if its spec says so and the restart intensity allows it
//     (at most policy.max_restarts within policy.window); otherwise the whole pipeline stops and
//     the run outcome is a failure carrying the child's name and reason.
// When every child is down the supervisor fills the OutcomeLatch and quits: nobody is left
// behind, so ~actor_system does not hang.
//
// A typed actor (SupervisorActor): its three messages are its whole interface, and everyone who
// reports to it (run_pipeline, the collector, the learner's checkpoint worker) holds the typed
// handle. Its children stay dynamically typed handles (caf::actor): it treats them all alike.
#include <caf/all.hpp>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "actors/messages.hpp"

namespace foxhunt::actors {

struct RunOutcome {
  enum class Kind { completed, stopped, failed };
  Kind kind = Kind::completed;
  std::string reason;
  bool ok() const noexcept { return kind != Kind::failed; }
};
const char* kind_name(RunOutcome::Kind k);

// Set once by the supervisor; waited on by the thread that runs the pipeline.
class OutcomeLatch {
 public:
  void set(RunOutcome outcome);
  std::optional<RunOutcome> wait_for(std::chrono::milliseconds timeout);
  std::optional<RunOutcome> get();

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::optional<RunOutcome> outcome_;
};

struct ChildSpec {
  std::string name;
  std::function<caf::actor(caf::local_actor* supervisor)> spawn;
  bool restart = false;  // respawn on failure (within the intensity) instead of stopping the pipeline
  // The agent the child belongs to ("" in a run of one agent). With several agents, the run is
  // complete once a child of every agent has reported finished_atom.
  std::string agent{};
};

struct SupervisorPolicy {
  int max_restarts = 3;  // restarts allowed within `window`, all children together
  std::chrono::milliseconds window{std::chrono::seconds(10)};
};

// Called after the children are spawned and after every restart, with every live child by name:
// sends them whatever they need to find each other.
using WireFn = std::function<void(caf::local_actor* supervisor, const std::map<std::string, caf::actor>& children)>;

// (finished_atom): the sender's agent is complete (the run, once every agent is; a sender that is
// no child of an agent completes the run at once); (stop_atom, why): a graceful stop (signals);
// (failure_atom, why): a failure found outside the actors (device health, stalls, checkpoint writes).
using SupervisorActor = caf::typed_actor<caf::reacts_to<finished_atom>, caf::reacts_to<stop_atom, std::string>,
                                         caf::reacts_to<failure_atom, std::string>>;

struct SupervisorState {
  struct Child {
    ChildSpec spec;
    caf::actor handle;
    bool down = false;
  };
  std::vector<Child> children;
  std::deque<std::chrono::steady_clock::time_point> restarts;
  bool stopping = false;
  RunOutcome outcome;
  int restart_count = 0;
  std::set<std::string> finished_agents;
  const char* name = "foxhunt.supervisor";
};

// Called (on the supervisor's thread; it must not block) when an agent has finished.
using AgentFinishedFn = std::function<void(const std::string& agent)>;

SupervisorActor::behavior_type supervisor_actor(SupervisorActor::stateful_pointer<SupervisorState> self,
                                                std::vector<ChildSpec> specs, SupervisorPolicy policy, WireFn wire,
                                                std::shared_ptr<OutcomeLatch> latch,
                                                AgentFinishedFn on_agent_finished);

// Readable text for an actor's exit reason (the exception text when there is one).
std::string describe(caf::actor_system& sys, const caf::error& reason);

// Makes an actor's uncaught exception its exit reason: sec::runtime_error with "<role>: <what>".
void report_exceptions_as(caf::scheduled_actor* self, std::string role);

}  // namespace foxhunt::actors
