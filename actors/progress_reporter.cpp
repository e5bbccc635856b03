#include "actors/progress_reporter.hpp"

#include <unistd.h>

#include <algorithm>
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

AgentsProgressReporter::AgentsProgressReporter(const std::vector<std::pair<std::string, std::int64_t>>& agents,
                                               bool jsonl, bool tensorboard, const fs::path& run_dir, bool console)
    : console_(console), tty_(console && isatty(2)) {
  for (const auto& [name, total] : agents) {
    Column c;
    c.name = name;
    c.total = total;
    c.text = name + " 0/" + human_count(static_cast<double>(total));
    columns_.push_back(std::move(c));
  }
  if (jsonl) jsonl_ = std::make_unique<JsonlWriter>(run_dir / "metrics.jsonl");
  if (tensorboard) tb_ = std::make_unique<TensorBoardWriter>(run_dir / "tensorboard");
}

AgentsProgressReporter::Column* AgentsProgressReporter::column(const std::string& name) {
  for (auto& c : columns_)
    if (c.name == name) return &c;
  return nullptr;
}

void AgentsProgressReporter::operator()(const std::vector<std::string>& names,
                                        const std::vector<ProgressSnapshot>& snapshots) {
  const double now = wall_time_now();
  double seconds = 0;
  for (std::size_t i = 0; i < names.size() && i < snapshots.size(); ++i) {
    Column* c = column(names[i]);
    const ProgressSnapshot& s = snapshots[i];
    if (c == nullptr) continue;
    seconds = std::max(seconds, s.seconds);
    const double dt = s.seconds - c->last_seconds;
    if (dt <= 0) continue;
    const double sps = static_cast<double>(s.counters.env_steps - c->last_steps) / dt;
    const double ups = static_cast<double>(s.updates_done - c->last_updates) / dt;
    c->last_seconds = s.seconds;
    c->last_steps = s.counters.env_steps;
    c->last_updates = s.updates_done;
    c->text = c->name + " " + human_count(static_cast<double>(s.counters.env_steps)) + "/" +
              human_count(static_cast<double>(c->total)) + " " + human_count(sps) + "/s";
    const std::string prefix = "agent/" + c->name + "/";
    Scalars scalars;
    for (const auto& [k, v] : s.scalars) {
      if (k == "episode/return") {
        char buf[48];
        std::snprintf(buf, sizeof buf, " ret %.4g", v);
        c->text += buf;
      }
      scalars.emplace_back(prefix + k, v);
    }
    scalars.emplace_back(prefix + "perf/env_steps_per_s", sps);
    scalars.emplace_back(prefix + "perf/updates_per_s", ups);
    scalars.emplace_back(prefix + "progress/updates", static_cast<double>(s.updates_done));
    if (jsonl_) jsonl_->scalars(s.counters.env_steps, scalars, now);
    if (tb_) tb_->scalars(s.counters.env_steps, scalars, now);
  }
  if (console_) {
    std::string line;
    for (const auto& c : columns_) line += (line.empty() ? "" : " | ") + c.text;
    if (tty_)
      std::fprintf(stderr, "\r\033[K%s", line.c_str());
    else if (seconds - last_line_ >= 10.0) {
      std::fprintf(stderr, "%s\n", line.c_str());
      last_line_ = seconds;
    }
  }
  if (++calls_ % 10 == 0) flush();
}

void AgentsProgressReporter::flush() {
  if (jsonl_) jsonl_->flush();
  if (tb_) tb_->flush();
}

void AgentsProgressReporter::restart_clock() {
  for (auto& c : columns_) c.last_seconds = 0;
  last_line_ = -1e9;
}

void AgentsProgressReporter::finish_line() {
  if (tty_) std::fprintf(stderr, "\n");
  flush();
}

}  // namespace foxhunt::actors
