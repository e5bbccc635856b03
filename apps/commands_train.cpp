// `foxhunt train --config FILE [--resume DIR] [--run-dir DIR]`: the CLI around
// actors::run_training (actors/train_run.hpp).
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <ctime>
#include <exception>
#include <filesystem>
#include <memory>
#include <string>

#include "actors/train_run.hpp"
#include "apps/commands.hpp"
#include "gpu/device.hpp"

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

struct TrainArgs {
  std::string config, resume, run_dir;
};

int train(const TrainArgs& a) {
  TrainRequest req;
  try {
    req.config = load_run_config(a.config);
    if (!a.resume.empty()) req.resume = resolve_checkpoint(a.resume);
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "foxhunt train: %s\n", e.what());
    return 2;
  }
  // Before anything is written: without a device there is no run, so no run directory either.
  std::string why;
  if (gpu::device_count(&why) == 0) {
    std::fprintf(stderr, "foxhunt train: needs a CUDA device: %s\n", why.empty() ? "none found" : why.c_str());
    return 1;
  }
  req.run_dir = a.run_dir.empty() ? fs::path("runs") / (req.config.run.name + "-" + timestamp()) : fs::path(a.run_dir);
  fs::create_directories(req.run_dir);
  setup_logging(req.run_dir, req.config.logging.level);
  spdlog::info("run directory {}", fs::absolute(req.run_dir).string());
  req.stop_signal = &install_stop_signals();
  TrainOutcome out = run_training(req);
  const RunResult& r = out.result;
  if (!r.outcome.ok()) std::fprintf(stderr, "foxhunt train: failed: %s\n", r.outcome.reason.c_str());
  return r.exit_code();
}

}  // namespace

void add_train_commands(CLI::App& app) {
  auto args = std::make_shared<TrainArgs>();
  auto* t = app.add_subcommand("train", "Train an agent with the actor pipeline (progress, metrics, checkpoints)");
  t->add_option("--config", args->config, "TOML run configuration (see configs/)")
      ->required()
      ->check(CLI::ExistingFile);
  t->add_option("--resume", args->resume, "checkpoint directory, or a run directory to continue from its latest");
  t->add_option("--run-dir", args->run_dir, "where logs, metrics and checkpoints go (default runs/<name>-<time>)");
  t->callback([args] { set_exit_code(train(*args)); });
}

}  // namespace foxhunt::apps
