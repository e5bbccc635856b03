#pragma once
// run_pipeline: spawns the supervisor and the four pipeline actors on a CAF system, watches them
// from the calling thread (progress callback, SIGINT/SIGTERM, device health, stalls), and on any
// end (completed, stopped, failed) quiesces: every actor gone, every stage's stream drained, then
// the final checkpoint from that consistent state. Never hangs: actors are event-based (no
// detached actors, whose shutdown 0.17 gets wrong) and the blocking work (checkpoint writes,
// stream synchronization) runs on plain threads.
#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "actors/pipeline_shared.hpp"
#include "actors/supervisor.hpp"
#include "actors/timeline.hpp"

namespace foxhunt::actors {

// The CAF configuration every foxhunt actor system uses: the message types registered and a
// bounded scheduler (idle work-stealing workers poll; a small pool is plenty for four actors).
// low_latency: idle workers spin (~tens of ms of aggressive polling) before CAF 0.17's moderate
// polling, which sleeps 50 us (more with Linux timer slack) between looks at their queue: every
// message hop of the pipeline otherwise risks that delay. Costs busy cores while a run is
// active; off for CPU tests on small machines.
void configure_actor_system(caf::actor_system_config& cfg, int scheduler_threads = 4, bool low_latency = false);

// Installs SIGINT/SIGTERM handlers that set the returned flag (1 = SIGINT, 2 = SIGTERM). A second
// signal of either kind gets the default action (immediate exit).
const std::atomic<int>& install_stop_signals();
const char* stop_signal_name(int flag);

struct ProgressSnapshot {
  Counters counters;
  std::int64_t updates_done = 0;
  std::int64_t held_slot_credits = 0;
  std::int64_t checkpoints = 0;
  double seconds = 0.0;  // since the start of the run
  Scalars scalars;
};

struct RunHooks {
  std::shared_ptr<CheckpointStore> store;  // null: no checkpoints at all
  std::function<void(const ProgressSnapshot&)> on_progress;
  std::chrono::milliseconds progress_interval{500};
  std::chrono::milliseconds stall_timeout{std::chrono::seconds(120)};  // no progress for this long: failure
  const std::atomic<int>* stop_signal = nullptr;
  int scheduler_threads = 4;
  bool low_latency_scheduler = false;                    // configure_actor_system's low_latency
  SupervisorPolicy policy{0, std::chrono::seconds(10)};  // pipeline actors are not restarted
  // Timeline: stages record into it (Stage::record_timeline); written as Chrome trace to
  // timeline_file after the streams are synchronized (nothing when either is empty).
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
  double overlap = -1;           // timeline: time with >= 2 streams busy / span (-1: none)
  // Where the wall time went (host clock, ms): start-up = entry until every actor is spawned and
  // wired (the collector starts on its wire message); shutdown = the outcome known until every
  // actor is gone, every stream drained and the actor system destroyed; after_ms = the timeline
  // file and the final checkpoint after that.
  double startup_ms = 0, shutdown_ms = 0, after_ms = 0;
  int exit_code() const { return outcome.ok() && checkpoint_error.empty() ? 0 : 1; }
};

// Throws std::invalid_argument for a configuration the protocol cannot run (before spawning).
RunResult run_pipeline(const PipelineConfig& config, const PipelineStages& stages, const RunHooks& hooks);

}  // namespace foxhunt::actors
