// `foxhunt pretrain --config FILE [--run-dir DIR] [--resume DIR] [--steps N] [--overwrite]`: the CLI
// around actors::run_pretraining (actors/pretrain_run.hpp). Order as `foxhunt train`: every host
// check (config, checkpoint, run directory), then the device, and only then the run directory is
// created: a refused run writes nothing. Exit codes: 0 a completed or stopped run, 1 a failed run
// or no device, 2 a refused one (bad config, checkpoint or run directory).
#include <spdlog/spdlog.h>

#include <exception>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "actors/pipeline.hpp"
#include "actors/pretrain_run.hpp"
#include "actors/train_run.hpp"
#include "apps/commands.hpp"
#include "apps/run_dir.hpp"
#include "gpu/device.hpp"
#include "pretrain/config.hpp"

namespace foxhunt::apps {
namespace fs = std::filesystem;

namespace {

struct PretrainArgs {
  std::string config, resume, run_dir;
  std::int64_t steps = -1;
  bool overwrite = false;
};

int pretrain(const PretrainArgs& a, Console& io) {
  pretrain::PretrainConfig config;
  std::optional<fs::path> resume;
  RunDirPlan dir;
  try {
    config = pretrain::load_pretrain_config(a.config);
    if (!a.resume.empty()) resume = actors::resolve_checkpoint(a.resume);
    const fs::path path =
        a.run_dir.empty() ? default_run_dir(config.run.name) : fs::path(a.run_dir);
    dir = plan_run_dir(path, a.overwrite, resume);
  } catch (const std::invalid_argument& e) {
    io.err << "foxhunt pretrain: " << e.what() << "\n";
    return 2;
  }
  std::string why;
  const int count = gpu::device_count(&why);
  if (count == 0) {
    io.err << "foxhunt pretrain: needs a CUDA device: " << (why.empty() ? "none found" : why) << "\n";
    return 1;
  }
  if (config.run.device >= count) {
    io.err << "foxhunt pretrain: run.device = " << config.run.device << ": this machine has " << count
           << (count == 1 ? " device" : " devices") << " (run.device in [0, " << count - 1 << "])\n";
    return 2;
  }
  try {
    prepare_run_dir(dir);
  } catch (const std::invalid_argument& e) {
    io.err << "foxhunt pretrain: " << e.what() << "\n";
    return 2;
  }
  log_to_run_dir(dir.dir, config.run.level);
  warn_replaced(dir);
  spdlog::info("run directory {}", fs::absolute(dir.dir).string());
  actors::PretrainRequest req;
  req.config = config;
  req.run_dir = dir.dir;
  req.resume = resume;
  req.stop_at = a.steps;
  req.stop_signal = &actors::install_stop_signals();
  try {
    const actors::PretrainOutcome out = actors::run_pretraining(req);
    const actors::RunResult& r = out.result;
    if (!r.outcome.ok()) io.err << "foxhunt pretrain: failed: " << r.outcome.reason << "\n";
    return r.exit_code();
  } catch (const std::invalid_argument& e) {
    io.err << "foxhunt pretrain: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    io.err << "foxhunt pretrain: " << e.what() << "\n";
    return 1;
  }
}

}  // namespace

void add_pretrain_command(CLI::App& app, Console& io) {
  auto args = std::make_shared<PretrainArgs>();
  auto* p = app.add_subcommand("pretrain",
                               "Train a supervised sequence model on market windows (progress, metrics, checkpoints)");
  p->add_option("--config", args->config, "TOML pretrain configuration (configs/pretrain/*.toml, docs/pretrain.md)")
      ->required()
      ->check(CLI::ExistingFile);
  p->add_option("--resume", args->resume,
                "checkpoint directory, or a run directory to continue from its latest; the resumed run writes "
                "into a new --run-dir (its step count continues)");
  p->add_option("--run-dir", args->run_dir,
                "where logs, metrics and checkpoints go (default runs/<name>-<time>); must be new or empty");
  p->add_option("--steps", args->steps, "stop after this many training steps in all (default optim.steps)")
      ->check(CLI::PositiveNumber);
  p->add_flag("--overwrite", args->overwrite, "replace the contents of a non-empty --run-dir");
  p->callback([args, &io] { io.exit_code = pretrain(*args, io); });
}

}  // namespace foxhunt::apps
