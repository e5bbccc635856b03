#include "actors/train_run.hpp"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>

#include "actors/checkpoint_check.hpp"
#include "actors/checkpoint_store.hpp"
#include "actors/completion_poller.hpp"
#include "actors/metrics_log.hpp"
#include "actors/ppo_run.hpp"
#include "actors/progress_reporter.hpp"

namespace foxhunt::actors {
namespace fs = std::filesystem;

fs::path resolve_checkpoint(const fs::path& p) {
  std::error_code ec;
  if (!fs::exists(p, ec)) throw std::invalid_argument(p.string() + ": no such directory");
  if (!fs::is_directory(p, ec)) throw std::invalid_argument(p.string() + ": not a directory");
  if (fs::exists(p / "counters.json")) return p;
  for (const fs::path& root : {p / "checkpoints", p}) {
    const fs::path latest = root / "latest";
    const fs::file_status link = fs::symlink_status(latest, ec);
    if (!fs::exists(link)) continue;
    std::string name;
    if (fs::is_symlink(link)) {  // a link to the checkpoint directory
      name = fs::read_symlink(latest, ec).string();
      if (fs::is_directory(latest, ec)) {
        if (!fs::exists(latest / "counters.json"))
          throw std::invalid_argument(latest.string() + " names " + name + ", which has no counters.json (incomplete)");
        return fs::canonical(latest);
      }
    } else if (const auto n = CheckpointStore::latest_name(root)) {
      name = *n;
      if (fs::is_directory(root / name)) {
        if (!fs::exists(root / name / "counters.json"))
          throw std::invalid_argument(latest.string() + " names " + name + ", which has no counters.json (incomplete)");
        return root / name;
      }
    } else {
      throw std::invalid_argument(latest.string() + " is empty (it should name the newest checkpoint directory)");
    }
    throw std::invalid_argument(latest.string() + " names " + name + ", which does not exist");
  }
  throw std::invalid_argument(p.string() + ": no checkpoint there (neither counters.json nor checkpoints/latest)");
}

std::optional<fs::path> run_config_of(const fs::path& checkpoint) {
  for (const fs::path& f :
       {checkpoint / "config.resolved.toml", checkpoint.parent_path().parent_path() / "config.resolved.toml"})
    if (fs::is_regular_file(f)) return f;
  return std::nullopt;
}

std::vector<std::pair<std::string, std::string>> write_kept_configs(const fs::path& run_dir, const RunConfig& cfg) {
  auto kept = kept_config_files(cfg);
  for (const auto& [name, text] : kept) {
    fs::create_directories((run_dir / name).parent_path());  // [features]: the extractor's folder
    std::ofstream out(run_dir / name, std::ios::binary);
    out << text;
    out.flush();
    if (!out) throw std::runtime_error("cannot write " + (run_dir / name).string());
  }
  return kept;
}

TrainOutcome run_training(const TrainRequest& req) {
  const RunConfig& cfg = req.config;
  if (cfg.learner.kind == "ppo" && cfg.pipeline.mode == "sync") return run_ppo_training(req);
  if (req.resume) require_resumable(cfg, *req.resume);  // before anything is created
  fs::create_directories(req.run_dir);
  // The run's configuration as it trains (a market with its resolved [split]): beside the
  // checkpoints and in each of them.
  const auto kept = write_kept_configs(req.run_dir, cfg);
  PipelineConfig pcfg = cfg.pipeline_config();
  if (req.resume) {
    pcfg.start = CheckpointStore::read_counters(*req.resume);
    spdlog::info("resuming from {} at {} env steps, {} updates", req.resume->string(), pcfg.start.env_steps,
                 pcfg.start.updates);
  }
  TrainOutcome out;
  // The lanes consult the process-wide switch at every completion (CudaLane::when_done): it stays
  // set for the whole run, stage construction and the final drain included.
  set_completion_polling(cfg.pipeline.completions == "polled");
  struct PollingReset {
    ~PollingReset() { set_completion_polling(false); }
  } polling_reset;

  ProgressReporter reporter(cfg, req.run_dir, req.console);
  RunHooks hooks;
  hooks.store = std::make_shared<CheckpointStore>(req.run_dir / "checkpoints");
  hooks.store->keep_newest(cfg.checkpoint.keep);
  for (const auto& [name, text] : kept) hooks.store->attach(name, text);  // foxhunt eval reads them
  hooks.progress_interval = std::chrono::milliseconds(cfg.logging.progress_interval_ms);
  hooks.stop_signal = req.stop_signal;
  hooks.learner_stall_timeout = std::chrono::milliseconds(cfg.pipeline.stall_timeout_ms);
  hooks.on_learner_stall = req.on_learner_stall;
  hooks.low_latency_scheduler = true;  // a GPU host: message hops without CAF's 50 us sleeps
  hooks.scheduler_threads = scheduler_threads(cfg, 1);
  hooks.on_progress = [&reporter, &req](const ProgressSnapshot& s) {
    if (req.extend) {
      ProgressSnapshot extended = s;
      req.extend(extended);
      reporter(extended);
    } else {
      reporter(s);
    }
    if (req.observer) req.observer(s);
  };

  // checkpoint.replay = "always": a periodic checkpoint must hold the replay buffer, the learner
  // and the collector from one consistent moment, which only a quiesced pipeline has (periodic
  // checkpoints are otherwise taken by the learner while collection and inserts run). So the run
  // goes in segments of every_env_steps: each segment is a run_pipeline ending at its boundary
  // (quiesced, complete final checkpoint), and the next one resumes from that checkpoint exactly
  // as --resume would (fresh stages, the run's own total_env_steps for every schedule).
  // PPO's actors write no periodic checkpoints of their own (a learner-only one could not resume
  // the environments): every PPO checkpoint is a segment end.
  const bool segmented = (cfg.checkpoint.replay == "always" || cfg.learner.kind == "ppo") &&
                         cfg.checkpoint.every_env_steps > 0;
  std::optional<fs::path> resume = req.resume;
  for (bool first = true;; first = false) {
    PipelineConfig seg = pcfg;
    if (segmented) {
      const std::int64_t every = cfg.checkpoint.every_env_steps;
      seg.checkpoint_every = 0;  // the segment's final checkpoint is the periodic one
      seg.total_env_steps = std::min(cfg.run.total_env_steps, (seg.start.env_steps / every + 1) * every);
    }
    out.stages = PipelineStages{};  // the previous segment's device memory goes before the next is built
    out.agent = nullptr;
    out.agent = make_stage_set(cfg, resume, req.stage_options, seg, &out.stages);
    StageSet& agent = *out.agent;
    hooks.timeline = nullptr;
    hooks.timeline_file.clear();
    // The timeline times every stream against one origin event, so it needs one device:
    // placement "split" across two devices records none.
    const bool one_device = collector_device(cfg) == cfg.run.device;
    if (cfg.logging.timeline && first && !one_device)
      spdlog::info("timeline: not recorded (placement \"split\" runs the collector on device {}, the learner on {})",
                   collector_device(cfg), cfg.run.device);
    if (cfg.logging.timeline && first && one_device) {
      // Busy intervals of the first ~20k pieces of work (the cap bounds the timing events).
      auto timeline = std::make_shared<StreamTimeline>(20'000);
      bool recorded = false;
      for (Stage* stage : agent.all())
        if (stage != nullptr && stage->record_timeline(timeline.get())) recorded = true;
      if (recorded) {
        timeline->reserve(20'000);  // its timing events created now, not by the actors while they run
        hooks.timeline = timeline;
        hooks.timeline_file = req.run_dir / "timeline.json";
      }
    }
    reporter.restart_clock();
    out.result = run_stage_set(agent, hooks);
    const RunResult& r = out.result;
    if (!segmented || seg.total_env_steps >= cfg.run.total_env_steps) break;
    // A stop, a failure or a missing checkpoint ends the run here (with that outcome).
    if (r.outcome.kind != RunOutcome::Kind::completed || !r.final_checkpoint ||
        r.counters.env_steps < seg.total_env_steps)
      break;
    spdlog::info("periodic checkpoint {} (with the replay buffer); continuing from it", r.final_checkpoint->string());
    resume = *r.final_checkpoint;
    pcfg.start = CheckpointStore::read_counters(*resume);
  }
  const RunResult& r = out.result;
  if (r.overlap >= 0)
    spdlog::info("timeline {}: overlap (>= 2 streams busy) {:.1f}% of the span",
                 (req.run_dir / "timeline.json").string(), 100.0 * r.overlap);
  reporter.finish_line();
  spdlog::info("run {}: {} ({} env steps, {} updates)", kind_name(r.outcome.kind), r.outcome.reason,
               r.counters.env_steps, r.counters.updates);
  if (r.final_checkpoint) spdlog::info("final checkpoint {}", r.final_checkpoint->string());
  if (!r.checkpoint_error.empty()) spdlog::error("{}", r.checkpoint_error);
  return out;
}

}  // namespace foxhunt::actors
