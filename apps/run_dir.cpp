#include "apps/run_dir.hpp"

#include <unistd.h>

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <ctime>
#include <memory>
#include <stdexcept>
#include <system_error>

namespace foxhunt::apps {
namespace fs = std::filesystem;

namespace {

std::string flag(const fs::path& dir) { return "--run-dir " + dir.string(); }

// What a previous run left, one entry per top-level name (checkpoint directories counted).
std::vector<std::string> entries_of(const fs::path& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    std::string name = e.path().filename().string();
    if (e.is_directory(ec)) {
      std::size_t steps = 0;
      for (const auto& c : fs::directory_iterator(e.path(), ec))
        steps += c.path().filename().string().starts_with("step_") ? 1 : 0;
      name += "/";
      if (steps > 0) name += " (" + std::to_string(steps) + (steps == 1 ? " checkpoint)" : " checkpoints)");
    }
    names.push_back(std::move(name));
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string join(const std::vector<std::string>& items, std::size_t most = 8) {
  std::string s;
  for (std::size_t i = 0; i < items.size() && i < most; ++i) s += (i ? ", " : "") + items[i];
  if (items.size() > most) s += ", ... (" + std::to_string(items.size() - most) + " more)";
  return s;
}

// Canonical, without a trailing separator ("old/" and "old" are one directory).
fs::path canonical_dir(const fs::path& p) {
  std::error_code ec;
  fs::path c = fs::weakly_canonical(p, ec);
  if (ec) c = fs::absolute(p, ec).lexically_normal();
  return c.filename().empty() ? c.parent_path() : c;
}

bool inside(const fs::path& p, const fs::path& dir) {
  const fs::path a = canonical_dir(p), d = canonical_dir(dir);
  auto [end_d, end_a] = std::mismatch(d.begin(), d.end(), a.begin(), a.end());
  return end_d == d.end();
}

}  // namespace

RunDirPlan plan_run_dir(const fs::path& dir, bool overwrite, const std::optional<fs::path>& resume) {
  RunDirPlan plan{dir, {}};
  std::error_code ec;
  const fs::file_status st = fs::status(dir, ec);
  if (fs::exists(st) && !fs::is_directory(st))
    throw std::invalid_argument(flag(dir) + ": an existing file, not a directory (give a new directory)");
  if (fs::is_directory(st)) {
    if (resume && inside(*resume, dir))
      throw std::invalid_argument(flag(dir) + ": holds the checkpoint being resumed (" + resume->string() +
                                  "); a resume writes into a new run directory: --resume " + dir.string() +
                                  " --run-dir NEW (the step count continues there)");
    const std::vector<std::string> entries = entries_of(dir);
    if (!entries.empty() && !overwrite)
      throw std::invalid_argument(flag(dir) + ": not empty (" + join(entries) +
                                  "): a previous run's directory. To continue that run: --resume " + dir.string() +
                                  " --run-dir NEW; to replace it: --overwrite");
    plan.replaced = entries;
    if (::access(dir.c_str(), W_OK | X_OK) != 0) throw std::invalid_argument(flag(dir) + ": no write permission");
    return plan;
  }
  // Not there yet: the nearest existing ancestor must be a writable directory.
  fs::path ancestor = fs::absolute(dir, ec).parent_path();
  while (!ancestor.empty() && !fs::exists(fs::symlink_status(ancestor, ec))) {
    if (ancestor == ancestor.root_path()) break;
    ancestor = ancestor.parent_path();
  }
  if (!fs::is_directory(ancestor, ec))
    throw std::invalid_argument(flag(dir) + ": cannot be created: " + ancestor.string() + " is not a directory");
  if (::access(ancestor.c_str(), W_OK | X_OK) != 0)
    throw std::invalid_argument(flag(dir) + ": cannot be created: no write permission in " + ancestor.string());
  return plan;
}

void prepare_run_dir(const RunDirPlan& plan) {
  std::error_code ec;
  if (!plan.replaced.empty())
    for (const auto& e : fs::directory_iterator(plan.dir, ec)) {
      fs::remove_all(e.path(), ec);
      if (ec)
        throw std::invalid_argument(flag(plan.dir) + " --overwrite: cannot remove " + e.path().string() + ": " +
                                    ec.message());
    }
  fs::create_directories(plan.dir, ec);
  if (ec) throw std::invalid_argument(flag(plan.dir) + ": cannot be created: " + ec.message());
}

std::filesystem::path default_run_dir(const std::string& name) {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", &tm);
  return std::filesystem::path("runs") / (name + "-" + buf);
}

void log_to_run_dir(const std::filesystem::path& run_dir, const std::string& level) {
  auto console = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
  auto file = std::make_shared<spdlog::sinks::basic_file_sink_mt>((run_dir / "train.log").string());
  auto logger = std::make_shared<spdlog::logger>("foxhunt", spdlog::sinks_init_list{console, file});
  logger->set_level(spdlog::level::from_str(level));
  logger->flush_on(spdlog::level::info);
  spdlog::set_default_logger(logger);
}

void warn_replaced(const RunDirPlan& plan) {
  if (plan.replaced.empty()) return;
  spdlog::warn("--overwrite: replaced the contents of {}: {}", plan.dir.string(),
               join(plan.replaced, plan.replaced.size()));
}

}  // namespace foxhunt::apps
