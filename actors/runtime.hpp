#pragma once
// The algorithm-neutral actor runtime: run_stage_set spawns an agent's actors under the
// supervisor, watches them from the calling thread (progress callback, SIGINT/SIGTERM, device
// health of every stage, stall watchdog, learner watchdog), and on any end (completed, stopped, failed) quiesces:
// every actor gone, every stage's stream drained, then the final checkpoint from that consistent
// state. What an agent is (its stages, its actors and how they are wired, its checkpoint) comes
// from a StageSet: DQN's (actors/pipeline.hpp: collector, replay, learner, target sync) and PPO's
// (actors/ppo_pipeline.hpp: collector and learner exchanging rollout slots). Never hangs: actors
// are event-based (no detached actors, whose shutdown 0.17 gets wrong) and the blocking work
// (checkpoint writes, stream synchronization) runs on plain threads.
#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "actors/checkpoint_store.hpp"
#include "actors/stages.hpp"
#include "actors/supervisor.hpp"
#include "actors/timeline.hpp"

namespace foxhunt::actors {

// The CAF configuration every foxhunt actor system uses: the message types registered and a
// bounded scheduler (idle work-stealing workers poll; a small pool is plenty for a few actors).
// low_latency: idle workers spin (~tens of ms of aggressive polling) before CAF 0.17's moderate
// polling, which sleeps 50 us (more with Linux timer slack) between looks at their queue: every
// message hop of the pipeline otherwise risks that delay. Costs busy cores while a run is
// active; off for CPU tests on small machines.
void configure_actor_system(caf::actor_system_config& cfg, int scheduler_threads = 4, bool low_latency = false);

// Installs SIGINT/SIGTERM handlers that set the returned flag (1 = SIGINT, 2 = SIGTERM). A second
// signal of either kind gets the default action (immediate exit).
const std::atomic<int>& install_stop_signals();
const char* stop_signal_name(int flag);

// Host counts and the latest stage scalars, written by the actors and read by the progress line.
struct Progress {
  std::atomic<std::int64_t> env_steps{0};  // transitions handed on (to replay, or to the learner)
  std::atomic<std::int64_t> updates_issued{0};
  std::atomic<std::int64_t> updates_done{0};
  std::atomic<std::int64_t> policy_version{0};  // policy versions published
  std::atomic<std::int64_t> policy_swaps{0};    // policy buffers the collector switched to
  std::atomic<std::int64_t> checkpoints{0};
  std::atomic<std::int64_t> held_slot_credits{0};  // slots held back by the replay ratio now (DQN)

  void put_scalars(const Scalars& s);
  Scalars scalars() const;
  Counters counters() const;

 private:
  mutable std::mutex mutex_;
  std::map<std::string, double> scalars_;
};

// What the runtime gives every agent's actors: progress counts, the checkpoint store and the
// worker that writes periodic checkpoints off the scheduler threads.
struct RunShared {
  std::shared_ptr<Progress> progress = std::make_shared<Progress>();
  std::shared_ptr<CheckpointStore> store;    // null: no checkpoints at all
  std::shared_ptr<BackgroundWorker> worker;  // null unless StageSet::periodic_checkpoints()
};

// One agent: its stages and the actors that drive them. run_stage_set asks it, in this order:
// validate, start, periodic_checkpoints, children (spawned by the supervisor, which calls wire
// after spawning and after every restart), and once everything is quiesced final_counters and
// final_checkpoint_job.
class StageSet {
 public:
  virtual ~StageSet() = default;
  // Every stage (health probes, draining, the timeline). No nulls.
  virtual std::vector<Stage*> all() const = 0;
  // Throws std::invalid_argument for a configuration the protocol cannot run (before spawning).
  virtual void validate() const = 0;
  // The counts a resumed run continues from (zero for a fresh run).
  virtual Counters start() const = 0;
  // Whether the actors write periodic checkpoints themselves (the runtime then gives them a worker).
  virtual bool periodic_checkpoints() const = 0;
  // The actors, by name, for the supervisor to spawn (and respawn).
  virtual std::vector<ChildSpec> children(const std::shared_ptr<RunShared>& run) = 0;
  // Sends the spawned children whatever they need to find each other (and the supervisor).
  virtual void wire(caf::local_actor* supervisor, const std::map<std::string, caf::actor>& children) = 0;
  // The counts the final checkpoint records, from the progress counts at the end.
  virtual Counters final_counters(const Counters& at_end) const { return at_end; }
  // The final checkpoint's writer, asked once every stream is idle: writes every stage's part
  // into a directory (the checkpoint store makes it complete atomically).
  virtual std::function<void(const std::filesystem::path& dir)> final_checkpoint_job() = 0;
};

struct ProgressSnapshot {
  Counters counters;
  std::int64_t updates_done = 0;
  std::int64_t held_slot_credits = 0;
  std::int64_t checkpoints = 0;
  double seconds = 0.0;  // since the start of the run
  Scalars scalars;
};

struct RunHooks {
  std::shared_ptr<CheckpointStore> store;  // null: no checkpoints at all (run_agents: AgentSpec::store)
  std::function<void(const ProgressSnapshot&)> on_progress;  // run_stage_set (run_agents: the first agent's)
  // run_agents: every agent's snapshot, in the order of the agents, each progress interval.
  std::function<void(const std::vector<ProgressSnapshot>&)> on_agents_progress;
  std::chrono::milliseconds progress_interval{500};
  std::chrono::milliseconds stall_timeout{std::chrono::seconds(120)};  // no progress for this long: failure
  // The learner watchdog (run_stage_set's agent; run_agents: AgentSpec::learner_stall_timeout):
  // 0 disables it. See AgentSpec.
  std::chrono::milliseconds learner_stall_timeout{0};
  // Called on the watch thread when a learner stalled, with the reason, right after the failure is
  // sent to the supervisor and before the quiesce: whatever lets the stalled streams drain (a
  // data-parallel rank aborts its NCCL communicator).
  std::function<void(const std::string& why)> on_learner_stall;
  const std::atomic<int>* stop_signal = nullptr;
  int scheduler_threads = 4;
  bool low_latency_scheduler = false;                    // configure_actor_system's low_latency
  SupervisorPolicy policy{0, std::chrono::seconds(10)};  // pipeline actors are not restarted
  // Timeline: stages record into it (Stage::record_timeline); written as Chrome trace to
  // timeline_file after the streams are synchronized (nothing when either is empty).
  // run_agents: AgentSpec::timeline, one per agent, written together into timeline_file.
  std::shared_ptr<StreamTimeline> timeline;
  std::filesystem::path timeline_file;
  // Test hook: called with the supervisor and the actors by name right after spawning.
  std::function<void(caf::actor supervisor, const std::map<std::string, caf::actor>&)> on_started;
};

struct RunResult {
  RunOutcome outcome;
  Counters counters;  // at the end
  std::optional<std::filesystem::path> final_checkpoint;
  std::string checkpoint_error;  // why the final checkpoint is missing, if it is
  bool learner_stalled = false;  // the learner watchdog stopped the run
  // After a stall, some stream did not drain within the bound: device memory its work may still
  // use must not be freed (cudaFree would wait for it), so the process should end without
  // destroying the stages (std::_Exit once its output is written).
  bool undrained = false;
  double overlap = -1;           // timeline: time with >= 2 streams busy / span (-1: none)
  // Where the wall time went (host clock, ms): start-up = entry until every actor is spawned and
  // wired (the collector starts on its wire message); shutdown = the outcome known until every
  // actor is gone, every stream drained and the actor system destroyed; after_ms = the timeline
  // file and the final checkpoint after that.
  double startup_ms = 0, shutdown_ms = 0, after_ms = 0;
  int exit_code() const { return outcome.ok() && checkpoint_error.empty() ? 0 : 1; }
};

// Runs one agent to its end. Throws std::invalid_argument (StageSet::validate) before spawning.
RunResult run_stage_set(StageSet& set, const RunHooks& hooks);

// One agent of a run of several (run_agents).
struct AgentSpec {
  // Names the agent's actors ("<name>/collector"), its progress and its failures; "" only in a run
  // of one agent (plain actor names, as run_stage_set).
  std::string name;
  StageSet* set = nullptr;                 // outlives the run
  std::shared_ptr<CheckpointStore> store;  // its own checkpoint directory; null: no checkpoints
  std::shared_ptr<StreamTimeline> timeline;  // its stages record into it; null: none
  // The learner watchdog (0: off): while the learner has updates issued whose completion has not
  // arrived (Progress::updates_issued > updates_done, both host counts the completion callbacks
  // move), a completion must arrive within this long, else the run fails with "learner made no
  // progress for N s: its GPU work did not complete" (measured from the last completion, or from
  // the last look of the watch loop that saw nothing outstanding: up to one progress interval
  // early). Nothing is read from the device to decide.
  std::chrono::milliseconds learner_stall_timeout{0};
};

struct AgentResult {
  std::string name;
  Counters counters;  // at the end
  bool finished = false;  // reached its configured end (others may have stopped it before)
  std::optional<std::filesystem::path> final_checkpoint;
  std::string checkpoint_error;  // why the final checkpoint is missing, if it is
  bool learner_stalled = false;  // its learner watchdog stopped the run
};

struct AgentsResult {
  RunOutcome outcome;  // the run's: completed once every agent finished; the first stop or failure
  std::vector<AgentResult> agents;
  bool undrained = false;  // as RunResult's
  double overlap = -1;  // every agent's streams together (-1: no timeline)
  double startup_ms = 0, shutdown_ms = 0, after_ms = 0;  // as RunResult's
  int exit_code() const {
    if (!outcome.ok()) return 1;
    for (const auto& a : agents)
      if (!a.checkpoint_error.empty()) return 1;
    return 0;
  }
};

// Runs several agents at once under one supervisor and one watch loop, each with its own stages
// (streams), progress counts, checkpoint store and timeline: the run completes when every agent
// has; a stop (signal) stops them all; one agent's failure (an actor's, a stage's health, a stall
// of that agent, its learner's stall) stops them all with the reason naming the agent. After the
// quiesce every agent writes its final checkpoint into its own store. After a learner stall the
// quiesce is bounded (the periodic checkpoint worker and every stage's synchronize, together at
// most min(the stall timeout, 60 s)): an agent whose streams did not drain in that time writes no
// final checkpoint (checkpoint_error names the stall and its latest good checkpoint), and the
// threads still blocked on its device are left to the process's exit. Throws std::invalid_argument (an agent's
// StageSet::validate, or names that are empty or repeated with several agents) before spawning.
AgentsResult run_agents(const std::vector<AgentSpec>& agents, const RunHooks& hooks);

}  // namespace foxhunt::actors
