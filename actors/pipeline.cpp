#include "actors/pipeline.hpp"

#include <spdlog/spdlog.h>

#include <csignal>
#include <stdexcept>

#include "actors/pipeline_actors.hpp"
#include "actors/ratio.hpp"

namespace foxhunt::actors {

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

void validate(const PipelineConfig& c, const PipelineStages& s) {
  if (!s.collector || !s.replay || !s.learner || !s.target_sync)
    throw std::invalid_argument("pipeline: every stage (collector, replay, learner, target_sync) is required");
  if (s.collector->slots() < 1) throw std::invalid_argument("pipeline: the collector needs >= 1 transition slot");
  if (s.collector->steps_per_slot() < 1) throw std::invalid_argument("pipeline: a slot must hold >= 1 transition");
  if (s.replay->batches() < 1) throw std::invalid_argument("pipeline: replay needs >= 1 batch buffer");
  if (c.total_env_steps < 1) throw std::invalid_argument("pipeline: total_env_steps must be >= 1");
  if (c.sync_every < 1) throw std::invalid_argument("pipeline: sync_every must be >= 1");
  if (c.checkpoint_every < 0) throw std::invalid_argument("pipeline: checkpoint_every must be >= 0");
  if (c.start.env_steps < 0 || c.start.updates < 0 || c.start.policy_version < 0)
    throw std::invalid_argument("pipeline: resumed counters must be >= 0");
  ReplayRatio check(c.replay_ratio, c.learning_starts, c.ratio_slack, s.replay->batch_size());  // throws
  (void)check;
}

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

RunResult run_pipeline(const PipelineConfig& config, const PipelineStages& stages, const RunHooks& hooks) {
  using Clock = std::chrono::steady_clock;
  const auto entry = Clock::now();
  auto ms_since = [](Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
  };
  validate(config, stages);
  auto shared = std::make_shared<PipelineShared>();
  shared->config = config;
  shared->store = hooks.store;
  if (hooks.store && config.checkpoint_every > 0) shared->worker = std::make_shared<BackgroundWorker>();
  shared->sync_writes_learner = stages.target_sync->writes_learner_state();
  auto progress = shared->progress;
  progress->env_steps = config.start.env_steps;
  progress->updates_issued = config.start.updates;
  progress->updates_done = config.start.updates;
  progress->policy_version = config.start.policy_version;

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
    std::vector<ChildSpec> specs;
    specs.push_back({"collector", [s = stages.collector, shared](caf::local_actor* sup) {
                       return spawn_collector(sup, s, shared);
                     }});
    specs.push_back(
        {"replay", [s = stages.replay, shared](caf::local_actor* sup) { return spawn_replay(sup, s, shared); }});
    specs.push_back(
        {"learner", [s = stages.learner, shared](caf::local_actor* sup) { return spawn_learner(sup, s, shared); }});
    specs.push_back({"target_sync", [s = stages.target_sync, shared](caf::local_actor* sup) {
                       return caf::actor_cast<caf::actor>(spawn_target_sync(sup, s, shared));
                     }});
    auto on_started = hooks.on_started;
    auto wired_at = std::make_shared<std::atomic<Clock::rep>>(0);
    WireFn wire = [on_started, wired_at](caf::local_actor* sup, const std::map<std::string, caf::actor>& ch) {
      wired_at->store(Clock::now().time_since_epoch().count());
      const caf::actor &c = ch.at("collector"), &r = ch.at("replay"), &l = ch.at("learner"), &t = ch.at("target_sync");
      caf::actor me = caf::actor_cast<caf::actor>(sup);
      // Order matters: the collector starts producing on its wire message, so everyone it (and
      // its consumers, transitively) sends to must have been wired before it.
      for (const caf::actor* a : {&r, &l, &t, &c}) caf::anon_send(*a, wire_atom_v, c, r, l, t, me);
      if (on_started) on_started(me, ch);
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
        for (Stage* s : stages.all()) {
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
    for (Stage* s : stages.all()) {
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
  result.counters = progress->counters();
  // Deterministic mode: version v is the weights right after update v * sync_every. Whether the
  // last one was already taken when the run stopped depends on timing (its predecessor may still
  // have been publishing); the final checkpoint names it either way (the collector's checkpoint
  // carries its weights), so a resumed learner continues with the next one.
  if (config.deterministic) result.counters.policy_version = result.counters.updates / config.sync_every;
  if (hooks.store) {
    if (!sync_error.empty()) {
      auto latest = CheckpointStore::latest(hooks.store->root());
      result.checkpoint_error = "no final checkpoint: the device is unusable (" + sync_error +
                                "); the latest good checkpoint is " + (latest ? latest->string() : std::string("none"));
    } else {
      try {
        // Learner and collector state from the same quiesced moment (periodic checkpoints, taken
        // while collection runs, hold the learner's only).
        auto learner_job = stages.learner->checkpoint_job();
        auto collector_job = stages.collector->checkpoint_job();
        result.final_checkpoint =
            hooks.store->write(result.counters, [&learner_job, &collector_job](const std::filesystem::path& dir) {
              if (learner_job) learner_job(dir);
              if (collector_job) collector_job(dir);
            });
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
