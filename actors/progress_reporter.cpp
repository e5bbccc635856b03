#include "actors/progress_reporter.hpp"

#include <unistd.h>

#include <cstdio>

namespace foxhunt::actors {
namespace fs = std::filesystem;

std::string human_count(double v) {
  char buf[32];
  if (v >= 1e9)
    std::snprintf(buf, sizeof buf, "%.2fG", v / 1e9);
  else if (v >= 1e6)
    std::snprintf(buf, sizeof buf, "%.2fM", v / 1e6);
  else if (v >= 1e3)
    std::snprintf(buf, sizeof buf, "%.1fk", v / 1e3);
  else
    std::snprintf(buf, sizeof buf, "%.0f", v);
  return buf;
}

ProgressReporter::ProgressReporter(const RunConfig& cfg, const fs::path& run_dir, bool console)
    : total_(cfg.run.total_env_steps), console_(console), tty_(console && isatty(2)) {
  if (cfg.logging.jsonl) jsonl_ = std::make_unique<JsonlWriter>(run_dir / "metrics.jsonl");
  if (cfg.logging.tensorboard) tb_ = std::make_unique<TensorBoardWriter>(run_dir / "tensorboard");
}
void ProgressReporter::operator()(const ProgressSnapshot& s) {
  const double dt = s.seconds - last_seconds_;
  if (dt <= 0) return;
  const double sps = static_cast<double>(s.counters.env_steps - last_steps_) / dt;
  const double ups = static_cast<double>(s.updates_done - last_updates_) / dt;
  last_seconds_ = s.seconds;
  last_steps_ = s.counters.env_steps;
  last_updates_ = s.updates_done;
  Scalars scalars = s.scalars;
  if (console_) {
    std::string line = "steps " + human_count(static_cast<double>(s.counters.env_steps)) + "/" +
                       human_count(static_cast<double>(total_)) + " | " + human_count(sps) + " steps/s | " +
                       human_count(ups) + " upd/s";
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
  }
  scalars.emplace_back("perf/env_steps_per_s", sps);
  scalars.emplace_back("perf/updates_per_s", ups);
  scalars.emplace_back("progress/updates", static_cast<double>(s.updates_done));
  const double now = wall_time_now();
  if (jsonl_) jsonl_->scalars(s.counters.env_steps, scalars, now);
  if (tb_) tb_->scalars(s.counters.env_steps, scalars, now);
  if (++calls_ % 10 == 0) flush();
}
void ProgressReporter::flush() {
  if (jsonl_) jsonl_->flush();
  if (tb_) tb_->flush();
}
void ProgressReporter::finish_line() {
  if (tty_) std::fprintf(stderr, "\n");
  flush();
}

}  // namespace foxhunt::actors
