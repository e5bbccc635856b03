// `foxhunt train --config FILE [--resume DIR] [--run-dir DIR]` and
// `foxhunt eval --checkpoint DIR --config FILE`.
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <string>

#include "actors/dqn_stages.hpp"
#include "actors/gpu_replay_stage.hpp"
#include "actors/metrics_log.hpp"
#include "actors/pipeline.hpp"
#include "actors/run_config.hpp"
#include "actors/stage_factory.hpp"
#include "apps/commands.hpp"

namespace foxhunt::apps {
namespace fs = std::filesystem;
using namespace foxhunt::actors;

namespace {

std::string timestamp() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", &tm);
  return buf;
}

void setup_logging(const fs::path& run_dir, const std::string& level) {
  auto console = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
  auto file = std::make_shared<spdlog::sinks::basic_file_sink_mt>((run_dir / "train.log").string());
  auto logger = std::make_shared<spdlog::logger>("foxhunt", spdlog::sinks_init_list{console, file});
  logger->set_level(spdlog::level::from_str(level));
  logger->flush_on(spdlog::level::info);
  spdlog::set_default_logger(logger);
}

// --resume accepts a checkpoint directory or a run directory (its checkpoints/latest).
fs::path resolve_resume(const fs::path& p) {
  if (fs::exists(p / "counters.json")) return p;
  if (auto latest = CheckpointStore::latest(p / "checkpoints")) return *latest;
  if (auto latest = CheckpointStore::latest(p)) return *latest;
  throw std::invalid_argument(p.string() + ": no checkpoint there (neither counters.json nor checkpoints/latest)");
}

std::string human(double v) {
  char buf[32];
  if (v >= 1e9) std::snprintf(buf, sizeof buf, "%.2fG", v / 1e9);
  else if (v >= 1e6) std::snprintf(buf, sizeof buf, "%.2fM", v / 1e6);
  else if (v >= 1e3) std::snprintf(buf, sizeof buf, "%.1fk", v / 1e3);
  else std::snprintf(buf, sizeof buf, "%.0f", v);
  return buf;
}

// The live progress line and the metrics files, fed by run_pipeline's progress callback.
class ProgressReporter {
 public:
  ProgressReporter(const RunConfig& cfg, const fs::path& run_dir) : total_(cfg.run.total_env_steps), tty_(isatty(2)) {
    if (cfg.logging.jsonl) jsonl_ = std::make_unique<JsonlWriter>(run_dir / "metrics.jsonl");
    if (cfg.logging.tensorboard) tb_ = std::make_unique<TensorBoardWriter>(run_dir / "tensorboard");
  }
  void operator()(const ProgressSnapshot& s) {
    const double dt = s.seconds - last_seconds_;
    if (dt <= 0) return;
    const double sps = (s.counters.env_steps - last_steps_) / dt;
    const double ups = (s.updates_done - last_updates_) / dt;
    last_seconds_ = s.seconds;
    last_steps_ = s.counters.env_steps;
    last_updates_ = s.updates_done;
    std::string line = "steps " + human(static_cast<double>(s.counters.env_steps)) + "/" + human(static_cast<double>(total_)) +
                       " | " + human(sps) + " steps/s | " + human(ups) + " upd/s";
    Scalars scalars = s.scalars;
    for (const auto& [k, v] : scalars) {
      char buf[64];
      std::snprintf(buf, sizeof buf, " | %s %.4g", k.c_str(), v);
      line += buf;
    }
    if (s.checkpoints) line += " | ckpt " + std::to_string(s.checkpoints);
    if (tty_)
      std::fprintf(stderr, "\r\033[K%s", line.c_str());
    else if (s.seconds - last_line_ >= 10.0) {
      std::fprintf(stderr, "%s\n", line.c_str());
      last_line_ = s.seconds;
    }
    scalars.emplace_back("perf/env_steps_per_s", sps);
    scalars.emplace_back("perf/updates_per_s", ups);
    scalars.emplace_back("progress/updates", static_cast<double>(s.updates_done));
    const double now = wall_time_now();
    if (jsonl_) jsonl_->scalars(s.counters.env_steps, scalars, now);
    if (tb_) tb_->scalars(s.counters.env_steps, scalars, now);
    if (++calls_ % 10 == 0) flush();
  }
  void flush() {
    if (jsonl_) jsonl_->flush();
    if (tb_) tb_->flush();
  }
  void finish_line() {
    if (tty_) std::fprintf(stderr, "\n");
    flush();
  }

 private:
  std::int64_t total_;
  bool tty_;
  double last_seconds_ = 0, last_line_ = -1e9;
  std::int64_t last_steps_ = 0, last_updates_ = 0, calls_ = 0;
  std::unique_ptr<JsonlWriter> jsonl_;
  std::unique_ptr<TensorBoardWriter> tb_;
};

struct TrainArgs {
  std::string config, resume, run_dir;
};

int train(const TrainArgs& a) {
  RunConfig cfg;
  try {
    cfg = load_run_config(a.config);
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "foxhunt train: %s\n", e.what());
    return 2;
  }
  const fs::path run_dir = a.run_dir.empty() ? fs::path("runs") / (cfg.run.name + "-" + timestamp()) : fs::path(a.run_dir);
  fs::create_directories(run_dir);
  setup_logging(run_dir, cfg.logging.level);
  {
    std::ofstream out(run_dir / "config.resolved.toml");
    out << resolved_toml(cfg);
  }
  spdlog::info("run directory {}", fs::absolute(run_dir).string());

  PipelineConfig pcfg = cfg.pipeline_config();
  std::optional<fs::path> resume;
  if (!a.resume.empty()) {
    resume = resolve_resume(a.resume);
    pcfg.start = CheckpointStore::read_counters(*resume);
    spdlog::info("resuming from {} at {} env steps, {} updates", resume->string(), pcfg.start.env_steps,
                 pcfg.start.updates);
  }
  PipelineStages stages = make_stages(cfg, resume);

  ProgressReporter reporter(cfg, run_dir);
  RunHooks hooks;
  hooks.store = std::make_shared<CheckpointStore>(run_dir / "checkpoints");
  hooks.progress_interval = std::chrono::milliseconds(cfg.logging.progress_interval_ms);
  hooks.stop_signal = &install_stop_signals();
  hooks.on_progress = [&reporter](const ProgressSnapshot& s) { reporter(s); };
  if (cfg.logging.timeline) {
    // Busy intervals of the first ~20k pieces of work (the cap bounds the timing events).
    auto timeline = std::make_shared<StreamTimeline>(20'000);
    if (auto c = std::dynamic_pointer_cast<DqnCollectorStage>(stages.collector)) {
      timeline->start(c->stream());
      c->set_timeline(timeline.get());
      if (auto l = std::dynamic_pointer_cast<DqnLearnerStage>(stages.learner)) l->set_timeline(timeline.get());
      if (auto t = std::dynamic_pointer_cast<PolicyPublishStage>(stages.target_sync)) t->set_timeline(timeline.get());
      if (auto rp = std::dynamic_pointer_cast<GpuReplayStage>(stages.replay)) rp->set_timeline(timeline.get());
      hooks.timeline = timeline;
      hooks.timeline_file = run_dir / "timeline.json";
    }
  }
  RunResult r = run_pipeline(pcfg, stages, hooks);
  if (r.overlap >= 0) spdlog::info("timeline {}: overlap (>= 2 streams busy) {:.1f}% of the span",
                                   (run_dir / "timeline.json").string(), 100.0 * r.overlap);
  reporter.finish_line();

  spdlog::info("run {}: {} ({} env steps, {} updates)", kind_name(r.outcome.kind), r.outcome.reason,
               r.counters.env_steps, r.counters.updates);
  if (r.final_checkpoint) spdlog::info("final checkpoint {}", r.final_checkpoint->string());
  if (!r.checkpoint_error.empty()) spdlog::error("{}", r.checkpoint_error);
  if (!r.outcome.ok()) std::fprintf(stderr, "foxhunt train: failed: %s\n", r.outcome.reason.c_str());
  return r.exit_code();
}

}  // namespace

void add_train_commands(CLI::App& app) {
  auto args = std::make_shared<TrainArgs>();
  auto* t = app.add_subcommand("train", "Train an agent with the actor pipeline (progress, metrics, checkpoints)");
  t->add_option("--config", args->config, "TOML run configuration (see configs/)")->required()->check(CLI::ExistingFile);
  t->add_option("--resume", args->resume, "checkpoint directory, or a run directory to continue from its latest");
  t->add_option("--run-dir", args->run_dir, "where logs, metrics and checkpoints go (default runs/<name>-<time>)");
  t->callback([args] { set_exit_code(train(*args)); });

  auto eargs = std::make_shared<TrainArgs>();
  auto* e = app.add_subcommand("eval", "Run the greedy policy of a checkpoint and report return, Sharpe, drawdown");
  e->add_option("--checkpoint", eargs->resume, "checkpoint directory (or run directory)")->required();
  e->add_option("--config", eargs->config, "TOML configuration of the environment to evaluate on")
      ->required()
      ->check(CLI::ExistingFile);
  e->callback([eargs] {
    RunConfig cfg;
    try {
      cfg = load_run_config(eargs->config);
      const fs::path ckpt = resolve_resume(eargs->resume);
      (void)make_stages(cfg, ckpt);  // builds the greedy policy's stages, or says what is missing
      std::fprintf(stderr, "foxhunt eval: evaluation loop not implemented yet\n");
      set_exit_code(1);
    } catch (const std::exception& ex) {
      std::fprintf(stderr, "foxhunt eval: %s\n", ex.what());
      set_exit_code(2);
    }
  });
}

}  // namespace foxhunt::apps
