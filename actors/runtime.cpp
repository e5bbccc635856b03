#include "actors/runtime.hpp"

#include <spdlog/spdlog.h>

#include <csignal>
#include <stdexcept>

#include "actors/messages.hpp"

namespace foxhunt::actors {

void Progress::put_scalars(const Scalars& s) {
  std::lock_guard lock(mutex_);
  for (const auto& [k, v] : s) scalars_[k] = v;
}

Scalars Progress::scalars() const {
  std::lock_guard lock(mutex_);
  return {scalars_.begin(), scalars_.end()};
}

Counters Progress::counters() const { return {env_steps.load(), updates_issued.load(), policy_version.load()}; }

void configure_actor_system(caf::actor_system_config& cfg, int scheduler_threads, bool low_latency) {
  cfg.add_message_types<caf::id_block::foxhunt_actors>();
  cfg.set("scheduler.max-threads", static_cast<std::int64_t>(scheduler_threads));
  if (low_latency) {
    // CAF 0.17 work stealing: aggressive polling never sleeps; ~1M polls of an empty queue are
    // some tens of ms, far longer than the pipeline's gaps between messages.
    cfg.set("work-stealing.aggressive-poll-attempts", std::int64_t{1'000'000});
    cfg.set("work-stealing.aggressive-steal-interval", std::int64_t{4});
  }
}

namespace {
std::atomic<int> g_stop_signal{0};
extern "C" void on_stop_signal(int sig) { g_stop_signal.store(sig == SIGINT ? 1 : 2); }
}  // namespace

const std::atomic<int>& install_stop_signals() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESETHAND;  // the second signal of a kind ends the process at once
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  return g_stop_signal;
}

const char* stop_signal_name(int flag) { return flag == 1 ? "SIGINT" : flag == 2 ? "SIGTERM" : "no signal"; }

namespace {

ProgressSnapshot snapshot_of(const Progress& p, std::chrono::steady_clock::time_point t0) {
  ProgressSnapshot s;
  s.counters = p.counters();
  s.updates_done = p.updates_done.load();
  s.held_slot_credits = p.held_slot_credits.load();
  s.checkpoints = p.checkpoints.load();
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  s.scalars = p.scalars();
  return s;
}

}  // namespace

RunResult run_stage_set(StageSet& set, const RunHooks& hooks) {
  using Clock = std::chrono::steady_clock;
  const auto entry = Clock::now();
  auto ms_since = [](Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
  };
  set.validate();
  const std::vector<Stage*> stages = set.all();
  auto shared = std::make_shared<RunShared>();
  shared->store = hooks.store;
  if (hooks.store && set.periodic_checkpoints()) shared->worker = std::make_shared<BackgroundWorker>();
  auto progress = shared->progress;
  const Counters start = set.start();
  progress->env_steps = start.env_steps;
  progress->updates_issued = start.updates;
  progress->updates_done = start.updates;
  progress->policy_version = start.policy_version;

  RunResult result;
  std::string sync_error;
  if (hooks.timeline) hooks.timeline->start(nullptr);  // the origin every interval is measured from
  const auto t0 = std::chrono::steady_clock::now();
  auto latch = std::make_shared<OutcomeLatch>();
  Clock::time_point outcome_at;
  {
    caf::actor_system_config cfg;
    configure_actor_system(cfg, hooks.scheduler_threads, hooks.low_latency_scheduler);
    caf::actor_system sys{cfg};

    // Children as dynamically typed handles: the supervisor treats them alike.
    std::vector<ChildSpec> specs = set.children(shared);
    auto on_started = hooks.on_started;
    auto wired_at = std::make_shared<std::atomic<Clock::rep>>(0);
    StageSet* agent = &set;  // outlives the actor system
    WireFn wire = [agent, on_started, wired_at](caf::local_actor* sup, const std::map<std::string, caf::actor>& ch) {
      wired_at->store(Clock::now().time_since_epoch().count());
      agent->wire(sup, ch);
      if (on_started) on_started(caf::actor_cast<caf::actor>(sup), ch);
    };
    SupervisorActor sup = sys.spawn(supervisor_actor, std::move(specs), hooks.policy, wire, latch);

    bool stop_sent = false, failure_sent = false;
    auto last_change = std::chrono::steady_clock::now();
    std::int64_t last_steps = -1, last_updates = -1;
    for (;;) {
      if (auto out = latch->wait_for(hooks.progress_interval)) break;
      if (hooks.stop_signal && hooks.stop_signal->load() != 0 && !stop_sent) {
        stop_sent = true;
        caf::anon_send(sup, stop_atom_v, std::string("received ") + stop_signal_name(hooks.stop_signal->load()));
      }
      if (!failure_sent) {
        for (Stage* s : stages) {
          std::string why;
          try {
            why = s->health();
          } catch (const std::exception& e) {
            why = e.what();
          }
          if (!why.empty()) {
            failure_sent = true;
            caf::anon_send(sup, failure_atom_v, "device error: " + why);
            break;
          }
        }
      }
      const auto now = std::chrono::steady_clock::now();
      const std::int64_t steps = progress->env_steps.load(), updates = progress->updates_done.load();
      if (steps != last_steps || updates != last_updates) {
        last_steps = steps;
        last_updates = updates;
        last_change = now;
      } else if (!failure_sent && now - last_change > hooks.stall_timeout) {
        failure_sent = true;
        caf::anon_send(
            sup, failure_atom_v,
            "stalled: no environment step or update for " +
                std::to_string(std::chrono::duration_cast<std::chrono::seconds>(hooks.stall_timeout).count()) + " s");
      }
      if (hooks.on_progress) {
        // An exception escaping here would leave live actors behind ~actor_system (a hang):
        // a failing progress sink (e.g. a full disk under the metrics files) stops the run instead.
        try {
          hooks.on_progress(snapshot_of(*progress, t0));
        } catch (const std::exception& e) {
          if (!failure_sent) {
            failure_sent = true;
            caf::anon_send(sup, failure_atom_v, std::string("progress/metrics output failed: ") + e.what());
          }
        }
      }
    }
    result.outcome = *latch->get();
    outcome_at = Clock::now();
    if (const auto w = wired_at->load(); w != 0)
      result.startup_ms = ms_since(entry, Clock::time_point(Clock::duration(w)));
    sys.await_all_actors_done();
    if (shared->worker) shared->worker->drain();
    // Quiesce the device: all enqueued work done and every host callback run (they send to
    // actors of `sys`, which must outlive them).
    for (Stage* s : stages) {
      try {
        s->synchronize();
      } catch (const std::exception& e) {
        if (sync_error.empty()) sync_error = e.what();
      }
    }
    if (hooks.on_progress) {
      try {
        hooks.on_progress(snapshot_of(*progress, t0));
      } catch (const std::exception&) {
      }
    }
  }  // ~actor_system: its scheduler threads joined
  const auto down_at = Clock::now();
  result.shutdown_ms = ms_since(outcome_at, down_at);
  if (hooks.timeline && !hooks.timeline_file.empty() && sync_error.empty()) {
    try {
      auto intervals = hooks.timeline->resolve();
      result.overlap = overlap_fraction(intervals, 2);
      write_chrome_trace(hooks.timeline_file, intervals);
    } catch (const std::exception& e) {
      spdlog::warn("timeline not written: {}", e.what());
    }
  }
  result.counters = set.final_counters(progress->counters());
  if (hooks.store) {
    if (!sync_error.empty()) {
      auto latest = CheckpointStore::latest(hooks.store->root());
      result.checkpoint_error = "no final checkpoint: the device is unusable (" + sync_error +
                                "); the latest good checkpoint is " + (latest ? latest->string() : std::string("none"));
    } else {
      try {
        // Every stage's state from the same quiesced moment.
        auto job = set.final_checkpoint_job();
        result.final_checkpoint = hooks.store->write(result.counters, job);
      } catch (const std::exception& e) {
        result.checkpoint_error = e.what();
      }
    }
  }
  if (!sync_error.empty() && result.outcome.ok())
    result.outcome = {RunOutcome::Kind::failed, "device error at shutdown: " + sync_error};
  result.after_ms = ms_since(down_at, Clock::now());
  return result;
}

}  // namespace foxhunt::actors
