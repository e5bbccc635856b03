#include "actors/agents_run.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <optional>
#include <stdexcept>

#include "actors/checkpoint_check.hpp"
#include "actors/checkpoint_store.hpp"
#include "actors/completion_poller.hpp"
#include "actors/progress_reporter.hpp"
#include "actors/timeline.hpp"
#include "actors/train_run.hpp"
#include "gpu/stream_priority.hpp"

namespace foxhunt::actors {
namespace fs = std::filesystem;

fs::path agent_dir(const fs::path& run_dir, const std::string& name) { return run_dir / "agents" / name; }

std::map<std::string, fs::path> resolve_agent_checkpoints(const AgentsConfig& config, const fs::path& p) {
  std::map<std::string, fs::path> out;
  for (const AgentConfig& a : config.agents) {
    try {
      out[a.name] = resolve_checkpoint(agent_dir(p, a.name));
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument("--resume " + p.string() + ": agent \"" + a.name +
                                  "\": " + e.what() + " (a run of several agents keeps each agent's checkpoints in "
                                  "<run>/agents/<name>/checkpoints)");
    }
  }
  return out;
}

namespace {

// One agent across the segments of the run.
struct AgentTrack {
  const AgentConfig* config = nullptr;
  std::shared_ptr<CheckpointStore> store;
  std::optional<fs::path> resume;
  Counters start;
  bool done = false;  // reached run.total_env_steps
};

bool needs_segments(const AgentsConfig& c) {
  for (const AgentConfig& a : c.agents) {
    const RunConfig& r = a.config;
    if ((r.checkpoint.replay == "always" || r.learner.kind == "ppo") && r.checkpoint.every_env_steps > 0) return true;
  }
  return false;
}

}  // namespace

AgentsTrainOutcome run_agents_training(const AgentsTrainRequest& req) {
  const AgentsConfig& cfg = req.config;
  if (cfg.agents.empty()) throw std::invalid_argument("run_agents_training: no agent");
  if (const auto problems = agents_problems(cfg); !problems.empty()) {
    std::string s = "the agents cannot run together:";
    for (const auto& p : problems) s += "\n  " + p;
    throw std::invalid_argument(s);
  }
  if (!req.resume.empty())
    for (const AgentConfig& a : cfg.agents) {
      const auto it = req.resume.find(a.name);
      if (it == req.resume.end()) throw std::invalid_argument("--resume: no checkpoint for agent \"" + a.name + "\"");
      require_resumable(a.config, it->second);  // before anything is created
    }
  const RunConfig& shared = cfg.agents.front().config;  // [run] [env] [checkpoint] [logging] are everyone's
  fs::create_directories(req.run_dir);

  std::vector<AgentTrack> tracks(cfg.agents.size());
  std::vector<std::pair<std::string, std::int64_t>> columns;
  for (std::size_t i = 0; i < cfg.agents.size(); ++i) {
    AgentTrack& t = tracks[i];
    t.config = &cfg.agents[i];
    const RunConfig& c = t.config->config;
    const fs::path dir = agent_dir(req.run_dir, t.config->name);
    fs::create_directories(dir);
    const auto kept = write_kept_configs(dir, c);  // foxhunt eval of <run>/agents/<name> reads them
    t.store = std::make_shared<CheckpointStore>(dir / "checkpoints");
    t.store->keep_newest(c.checkpoint.keep);
    for (const auto& [name, text] : kept) t.store->attach(name, text);
    if (const auto it = req.resume.find(t.config->name); it != req.resume.end()) {
      t.resume = it->second;
      t.start = CheckpointStore::read_counters(it->second);
      spdlog::info("agent {}: resuming from {} at {} env steps, {} updates", t.config->name, it->second.string(),
                   t.start.env_steps, t.start.updates);
    }
    t.done = t.start.env_steps >= c.run.total_env_steps;
    columns.emplace_back(t.config->name, c.run.total_env_steps);
  }

  // The completion mechanism is process-wide (agents_problems: every agent has the same one).
  set_completion_polling(shared.pipeline.completions == "polled");
  struct PollingReset {
    ~PollingReset() { set_completion_polling(false); }
  } polling_reset;

  AgentsProgressReporter reporter(columns, shared.logging.jsonl, shared.logging.tensorboard, req.run_dir,
                                  req.console);
  const bool segmented = needs_segments(cfg);
  const std::int64_t every = shared.checkpoint.every_env_steps;
  AgentsTrainOutcome out;
  std::vector<AgentResult> latest(tracks.size());  // every agent's last result (an agent done early keeps its own)
  for (std::size_t i = 0; i < tracks.size(); ++i) {
    latest[i].name = tracks[i].config->name;
    latest[i].counters = tracks[i].start;
    latest[i].finished = tracks[i].done;
    latest[i].final_checkpoint = tracks[i].resume;
  }
  double overlap = -1;  // the first segment's: only it records a timeline
  for (bool first = true;; first = false) {
    std::vector<std::size_t> running;
    for (std::size_t i = 0; i < tracks.size(); ++i)
      if (!tracks[i].done) running.push_back(i);
    if (running.empty()) break;
    // The previous segment's device memory goes before the next is built.
    out.sets.clear();
    std::vector<AgentSpec> specs;
    std::vector<std::string> names;
    std::vector<std::int64_t> segment_end;
    for (std::size_t i : running) {
      const AgentTrack& t = tracks[i];
      const RunConfig& c = t.config->config;
      PipelineConfig p = c.pipeline_config();
      p.start = t.start;
      if (segmented) {
        p.checkpoint_every = 0;  // the segment's final checkpoint is the periodic one
        p.total_env_steps = std::min(c.run.total_env_steps, (t.start.env_steps / every + 1) * every);
      }
      std::shared_ptr<StageSet> set;
      {
        gpu::StreamPriorityScope priority(t.config->stream_priority);
        set = make_stage_set(c, t.resume, req.stage_options, p);
      }
      AgentSpec spec;
      spec.name = t.config->name;
      spec.set = set.get();
      spec.store = t.store;
      spec.learner_stall_timeout = std::chrono::milliseconds(c.pipeline.stall_timeout_ms);
      if (shared.logging.timeline && first) {
        // Busy intervals of the first ~20k pieces of work of each agent.
        auto timeline = std::make_shared<StreamTimeline>(20'000);
        bool recorded = false;
        for (Stage* stage : set->all())
          if (stage != nullptr && stage->record_timeline(timeline.get())) recorded = true;
        if (recorded) {
          timeline->reserve(20'000);
          spec.timeline = timeline;
        }
      }
      specs.push_back(spec);
      names.push_back(spec.name);
      segment_end.push_back(p.total_env_steps);
      out.sets.push_back(std::move(set));
    }
    RunHooks hooks;
    hooks.progress_interval = std::chrono::milliseconds(shared.logging.progress_interval_ms);
    hooks.stall_timeout = req.stall_timeout;
    hooks.stop_signal = req.stop_signal;
    hooks.low_latency_scheduler = true;  // a GPU host: message hops without CAF's 50 us sleeps
    hooks.scheduler_threads = scheduler_threads(shared, specs.size());
    if (first) {
      hooks.timeline_file = req.run_dir / "timeline.json";
      hooks.on_started = req.on_started;
    }
    hooks.on_agents_progress = [&reporter, &req, names](const std::vector<ProgressSnapshot>& s) {
      reporter(names, s);
      if (req.observer) req.observer(names, s);
    };
    reporter.restart_clock();
    out.result = run_agents(specs, hooks);
    const AgentsResult& r = out.result;
    bool go_on = segmented && r.outcome.kind == RunOutcome::Kind::completed;
    for (std::size_t k = 0; k < running.size(); ++k) {
      AgentTrack& t = tracks[running[k]];
      const AgentResult& a = r.agents[k];
      latest[running[k]] = a;
      if (a.final_checkpoint) {
        t.resume = *a.final_checkpoint;
        t.start = CheckpointStore::read_counters(*t.resume);
      }
      // Done: it finished the segment that ends the run (PPO's last rollout may end short of
      // run.total_env_steps: whole rollouts only, as in a run of one agent).
      const std::int64_t total = t.config->config.run.total_env_steps;
      t.done = a.counters.env_steps >= total || (a.finished && segment_end[k] >= total);
      if (!t.done && (!a.final_checkpoint || a.counters.env_steps < segment_end[k])) go_on = false;
    }
    if (r.overlap >= 0) {
      overlap = r.overlap;
      spdlog::info("timeline {}: overlap (>= 2 streams busy, every agent) {:.1f}% of the span",
                   (req.run_dir / "timeline.json").string(), 100.0 * r.overlap);
    }
    if (!go_on) break;
    spdlog::info("periodic checkpoint of every agent; continuing from them");
  }
  out.result.agents = latest;
  out.result.overlap = overlap;
  reporter.finish_line();
  const AgentsResult& r = out.result;
  spdlog::info("run {}: {}", kind_name(r.outcome.kind), r.outcome.reason);
  for (const AgentResult& a : r.agents) {
    spdlog::info("agent {}: {} env steps, {} updates{}", a.name, a.counters.env_steps, a.counters.updates,
                 a.final_checkpoint ? ", checkpoint " + a.final_checkpoint->string() : std::string());
    if (!a.checkpoint_error.empty()) spdlog::error("agent {}: {}", a.name, a.checkpoint_error);
  }
  return out;
}

}  // namespace foxhunt::actors
