#include "actors/runtime.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <future>
#include <stdexcept>
#include <thread>

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

namespace {

// A child's name in the supervisor: "<agent>/<role>", or the role alone in a run of one agent.
std::string child_name(const std::string& agent, const std::string& role) {
  return agent.empty() ? role : agent + "/" + role;
}

std::string agent_label(const std::string& agent) { return agent.empty() ? std::string() : " (agent " + agent + ")"; }

struct AgentRuntime {
  AgentSpec spec;
  std::vector<Stage*> stages;
  std::shared_ptr<RunShared> shared;
  std::string sync_error;
  std::int64_t last_steps = -1, last_updates = -1;
  std::chrono::steady_clock::time_point last_change;
  // The learner watchdog: updates_done at the last look, and since when no completion came while
  // updates were outstanding.
  std::int64_t learner_done = -1;
  std::chrono::steady_clock::time_point learner_since;
  bool learner_stalled = false;
  bool undrained = false;  // a stream (or the checkpoint worker) did not drain within the bound
};

// "600 s", "0.2 s".
std::string seconds_text(std::chrono::milliseconds t) {
  if (t.count() % 1000 == 0) return std::to_string(t.count() / 1000) + " s";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g s", static_cast<double>(t.count()) / 1000.0);
  return buf;
}

// Synchronizes every stage (all enqueued work done, every host callback run); the first failure's
// text, "" when every stream drained cleanly.
std::string synchronize_all(const std::vector<Stage*>& stages) {
  std::string first;
  for (Stage* s : stages) {
    try {
      s->synchronize();
    } catch (const std::exception& e) {
      if (first.empty()) first = e.what();
    }
  }
  return first;
}

// An agent's quiesce after a stall, on a thread of its own: its checkpoint worker drained, then
// every stage synchronized. A thread blocked in the driver (a stream that never drains) can be
// neither cancelled nor joined: it is detached, holding what it uses (the worker), and left to the
// process's exit. Every agent's runs at once, so one agent's hung stream takes none of the
// others' time.
struct BoundedQuiesce {
  struct Shared {
    std::mutex mutex;
    std::string error;  // synchronize_all's (a faulted stream)
    bool worker_done = false;
  };
  std::shared_ptr<Shared> shared = std::make_shared<Shared>();
  std::future<void> done;

  BoundedQuiesce(std::shared_ptr<BackgroundWorker> worker, std::vector<Stage*> stages) {
    auto task = std::make_shared<std::packaged_task<void()>>([sh = shared, worker, stages] {
      if (worker) worker->drain();
      {
        std::lock_guard lock(sh->mutex);
        sh->worker_done = true;
      }
      std::string error = synchronize_all(stages);
      std::lock_guard lock(sh->mutex);
      sh->error = std::move(error);
    });
    done = task->get_future();
    std::thread([task] { (*task)(); }).detach();
  }
  // "" when everything drained before `deadline` (error: a stream's failure); else what did not.
  std::string wait_until(std::chrono::steady_clock::time_point deadline, std::string& error) {
    const bool in_time = done.wait_until(deadline) == std::future_status::ready;
    std::lock_guard lock(shared->mutex);
    error = shared->error;
    if (in_time) return "";
    return shared->worker_done ? "its GPU work" : "its periodic checkpoint";
  }
};

// How long the quiesce after a stall waits for the streams: the stall's timeout, at most 60 s.
std::chrono::milliseconds drain_bound(std::chrono::milliseconds stall_timeout) {
  return std::min(stall_timeout, std::chrono::milliseconds(60'000));
}

}  // namespace

RunResult run_stage_set(StageSet& set, const RunHooks& hooks) {
  AgentSpec spec;
  spec.set = &set;
  spec.store = hooks.store;
  spec.timeline = hooks.timeline;
  spec.learner_stall_timeout = hooks.learner_stall_timeout;
  RunHooks h = hooks;
  if (hooks.on_progress && !hooks.on_agents_progress)
    h.on_agents_progress = [f = hooks.on_progress](const std::vector<ProgressSnapshot>& s) { f(s.front()); };
  const AgentsResult all = run_agents({spec}, h);
  RunResult r;
  r.outcome = all.outcome;
  r.counters = all.agents.front().counters;
  r.final_checkpoint = all.agents.front().final_checkpoint;
  r.checkpoint_error = all.agents.front().checkpoint_error;
  r.learner_stalled = all.agents.front().learner_stalled;
  r.undrained = all.undrained;
  r.overlap = all.overlap;
  r.startup_ms = all.startup_ms;
  r.shutdown_ms = all.shutdown_ms;
  r.after_ms = all.after_ms;
  return r;
}

AgentsResult run_agents(const std::vector<AgentSpec>& specs, const RunHooks& hooks) {
  using Clock = std::chrono::steady_clock;
  const auto entry = Clock::now();
  auto ms_since = [](Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
  };
  if (specs.empty()) throw std::invalid_argument("run_agents: no agent");
  std::map<std::string, std::size_t> index_of;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    if (specs[i].set == nullptr) throw std::invalid_argument("run_agents: agent " + std::to_string(i) + " has no stages");
    if (specs.size() > 1 && specs[i].name.empty())
      throw std::invalid_argument("run_agents: with several agents every agent needs a name (agent " +
                                  std::to_string(i) + " has none)");
    if (!index_of.emplace(specs[i].name, i).second)
      throw std::invalid_argument("run_agents: two agents are named \"" + specs[i].name + "\"");
  }
  for (const auto& a : specs) a.set->validate();

  std::vector<AgentRuntime> agents(specs.size());
  for (std::size_t i = 0; i < specs.size(); ++i) {
    AgentRuntime& a = agents[i];
    a.spec = specs[i];
    a.stages = a.spec.set->all();
    a.shared = std::make_shared<RunShared>();
    a.shared->store = a.spec.store;
    if (a.spec.store && a.spec.set->periodic_checkpoints()) a.shared->worker = std::make_shared<BackgroundWorker>();
    const Counters start = a.spec.set->start();
    Progress& p = *a.shared->progress;
    p.env_steps = start.env_steps;
    p.updates_issued = start.updates;
    p.updates_done = start.updates;
    p.policy_version = start.policy_version;
  }
  // Set by the supervisor when an agent finished (read by the stall watchdog).
  auto finished = std::make_shared<std::vector<std::atomic<bool>>>(specs.size());

  AgentsResult result;
  for (auto& a : agents)  // the origin every interval is measured from
    if (a.spec.timeline) a.spec.timeline->start(nullptr);
  const auto t0 = std::chrono::steady_clock::now();
  auto snapshots = [&agents, t0] {
    std::vector<ProgressSnapshot> out;
    for (const auto& a : agents) out.push_back(snapshot_of(*a.shared->progress, t0));
    return out;
  };
  auto latch = std::make_shared<OutcomeLatch>();
  Clock::time_point outcome_at;
  {
    caf::actor_system_config cfg;
    configure_actor_system(cfg, hooks.scheduler_threads, hooks.low_latency_scheduler);
    caf::actor_system sys{cfg};

    // Children as dynamically typed handles: the supervisor treats them alike.
    std::vector<ChildSpec> children;
    std::vector<std::pair<std::string, StageSet*>> wiring;  // agent name, its set (outlives the system)
    for (auto& a : agents) {
      for (ChildSpec c : a.spec.set->children(a.shared)) {
        c.name = child_name(a.spec.name, c.name);
        c.agent = a.spec.name;
        children.push_back(std::move(c));
      }
      wiring.emplace_back(a.spec.name, a.spec.set);
    }
    auto on_started = hooks.on_started;
    auto wired_at = std::make_shared<std::atomic<Clock::rep>>(0);
    WireFn wire = [wiring, on_started, wired_at](caf::local_actor* sup, const std::map<std::string, caf::actor>& ch) {
      wired_at->store(Clock::now().time_since_epoch().count());
      for (const auto& [name, set] : wiring) {
        if (name.empty()) {
          set->wire(sup, ch);
          continue;
        }
        // Each agent sees its own actors under their role names.
        std::map<std::string, caf::actor> own;
        const std::string prefix = name + "/";
        for (const auto& [n, h] : ch)
          if (n.rfind(prefix, 0) == 0) own.emplace(n.substr(prefix.size()), h);
        set->wire(sup, own);
      }
      if (on_started) on_started(caf::actor_cast<caf::actor>(sup), ch);
    };
    AgentFinishedFn on_finished = [finished, index_of](const std::string& agent) {
      if (auto it = index_of.find(agent); it != index_of.end()) (*finished)[it->second] = true;
    };
    SupervisorActor sup = sys.spawn(supervisor_actor, std::move(children), hooks.policy, wire, latch, on_finished);

    bool stop_sent = false, failure_sent = false;
    // Set by a stall (either watchdog): the quiesce then waits at most this long for the streams.
    std::chrono::milliseconds bound{0};
    const auto begin = std::chrono::steady_clock::now();
    for (auto& a : agents) a.last_change = a.learner_since = begin;
    auto fail = [&](const std::string& why) {
      if (failure_sent) return;
      failure_sent = true;
      caf::anon_send(sup, failure_atom_v, why);
    };
    for (;;) {
      if (auto out = latch->wait_for(hooks.progress_interval)) break;
      if (hooks.stop_signal && hooks.stop_signal->load() != 0 && !stop_sent) {
        stop_sent = true;
        caf::anon_send(sup, stop_atom_v, std::string("received ") + stop_signal_name(hooks.stop_signal->load()));
      }
      const auto now = std::chrono::steady_clock::now();
      for (std::size_t i = 0; i < agents.size() && !failure_sent; ++i) {
        AgentRuntime& a = agents[i];
        for (Stage* s : a.stages) {
          std::string why;
          try {
            why = s->health();
          } catch (const std::exception& e) {
            why = e.what();
          }
          if (!why.empty()) {
            fail("device error" + agent_label(a.spec.name) + ": " + why);
            break;
          }
        }
        const Progress& p = *a.shared->progress;
        // done before issued: issued >= done holds for the two values read.
        const std::int64_t steps = p.env_steps.load(), updates = p.updates_done.load();
        const std::int64_t issued = p.updates_issued.load();
        const auto learner_timeout = a.spec.learner_stall_timeout;
        const bool outstanding = issued > updates;
        if (updates != a.learner_done || !outstanding) {
          a.learner_done = updates;
          a.learner_since = now;
        } else if (learner_timeout.count() > 0 && now - a.learner_since > learner_timeout && !failure_sent) {
          const std::string why = "learner" + agent_label(a.spec.name) + " made no progress for " +
                                  seconds_text(learner_timeout) + ": its GPU work did not complete (" +
                                  std::to_string(issued - updates) + " update(s) issued, none completed since)";
          a.learner_stalled = true;
          bound = std::max(bound, drain_bound(learner_timeout));
          fail(why);  // first: the failure an aborted collective may cause next must not be the reason
          if (hooks.on_learner_stall) {
            try {
              hooks.on_learner_stall(why);
            } catch (const std::exception& e) {
              spdlog::error("learner stall hook failed: {}", e.what());
            }
          }
        }
        if (steps != a.last_steps || updates != a.last_updates) {
          a.last_steps = steps;
          a.last_updates = updates;
          a.last_change = now;
        } else if (!(*finished)[i] && now - a.last_change > hooks.stall_timeout && !failure_sent &&
                   !(learner_timeout.count() > 0 && outstanding)) {  // the learner watchdog's case
          bound = std::max(bound, drain_bound(hooks.stall_timeout));
          fail(std::string("stalled") + (a.spec.name.empty() ? "" : " (agent " + a.spec.name + ")") +
               ": no environment step or update for " + seconds_text(hooks.stall_timeout));
        }
      }
      if (hooks.on_agents_progress) {
        // An exception escaping here would leave live actors behind ~actor_system (a hang):
        // a failing progress sink (e.g. a full disk under the metrics files) stops the run instead.
        try {
          hooks.on_agents_progress(snapshots());
        } catch (const std::exception& e) {
          fail(std::string("progress/metrics output failed: ") + e.what());
        }
      }
    }
    result.outcome = *latch->get();
    outcome_at = Clock::now();
    if (const auto w = wired_at->load(); w != 0)
      result.startup_ms = ms_since(entry, Clock::time_point(Clock::duration(w)));
    sys.await_all_actors_done();
    if (bound.count() == 0) {
      for (auto& a : agents)
        if (a.shared->worker) a.shared->worker->drain();
      // Quiesce the device: all enqueued work done and every host callback run (they send to
      // actors of `sys`, which must outlive them).
      for (auto& a : agents) a.sync_error = synchronize_all(a.stages);
    } else {
      // After a stall the device may never drain (a hung kernel, a collective waiting for a
      // peer): every agent's quiesce ends at one common deadline.
      const auto deadline = Clock::now() + bound;
      std::vector<BoundedQuiesce> quiesces;
      for (auto& a : agents) quiesces.emplace_back(a.shared->worker, a.stages);
      for (std::size_t i = 0; i < agents.size(); ++i) {
        std::string error;
        const std::string late = quiesces[i].wait_until(deadline, error);
        if (!late.empty()) {
          agents[i].undrained = true;
          error = late + " did not complete within " + seconds_text(bound) + " after the stall";
        }
        if (!error.empty()) agents[i].sync_error = error;
      }
    }
    if (hooks.on_agents_progress) {
      try {
        hooks.on_agents_progress(snapshots());
      } catch (const std::exception&) {
      }
    }
  }  // ~actor_system: its scheduler threads joined
  const auto down_at = Clock::now();
  result.shutdown_ms = ms_since(outcome_at, down_at);
  bool any_sync_error = false;
  for (const auto& a : agents) any_sync_error = any_sync_error || !a.sync_error.empty();
  if (!hooks.timeline_file.empty() && !any_sync_error) {
    // Every agent's lanes in one trace ("<agent>/<lane>" with several agents).
    std::vector<BusyInterval> intervals;
    bool any = false;
    try {
      for (const auto& a : agents) {
        if (!a.spec.timeline) continue;
        any = true;
        for (BusyInterval& b : a.spec.timeline->resolve()) {
          if (!a.spec.name.empty()) b.lane = a.spec.name + "/" + b.lane;
          intervals.push_back(std::move(b));
        }
      }
      if (any) {
        result.overlap = overlap_fraction(intervals, 2);
        write_chrome_trace(hooks.timeline_file, intervals);
      }
    } catch (const std::exception& e) {
      spdlog::warn("timeline not written: {}", e.what());
    }
  }
  for (std::size_t i = 0; i < agents.size(); ++i) {
    AgentRuntime& a = agents[i];
    AgentResult r;
    r.name = a.spec.name;
    r.finished = (*finished)[i] || (agents.size() == 1 && result.outcome.kind == RunOutcome::Kind::completed);
    r.counters = a.spec.set->final_counters(a.shared->progress->counters());
    r.learner_stalled = a.learner_stalled;
    result.undrained = result.undrained || a.undrained;
    if (a.spec.store) {
      if (!a.sync_error.empty()) {
        auto latest = CheckpointStore::latest(a.spec.store->root());
        r.checkpoint_error = "no final checkpoint" + agent_label(a.spec.name) +
                             (a.undrained ? ": the state is unreadable (" : ": the device is unusable (") +
                             a.sync_error + "); the latest good checkpoint is " +
                             (latest ? latest->string() : std::string("none"));
      } else {
        try {
          // Every stage's state from the same quiesced moment.
          auto job = a.spec.set->final_checkpoint_job();
          r.final_checkpoint = a.spec.store->write(r.counters, job);
        } catch (const std::exception& e) {
          r.checkpoint_error = e.what();
        }
      }
    }
    if (!a.sync_error.empty() && result.outcome.ok())
      result.outcome = {RunOutcome::Kind::failed, "device error at shutdown" + agent_label(a.spec.name) + ": " + a.sync_error};
    result.agents.push_back(std::move(r));
  }
  result.after_ms = ms_since(down_at, Clock::now());
  return result;
}

}  // namespace foxhunt::actors
