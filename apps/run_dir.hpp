#pragma once
// The run directory `foxhunt train` writes into (--run-dir, default runs/<run.name>-<time>):
// decided and checked before anything is created, then created in one step.
//   - an existing file, or a path whose nearest existing ancestor is a file or not writable: an
//     error naming --run-dir and the path;
//   - an existing non-empty directory: an error saying how to continue (--resume X --run-dir NEW)
//     or replace (--overwrite), unless --overwrite is given; then its entries are listed and
//     removed by prepare_run_dir;
//   - the directory holding the checkpoint being resumed: always an error (a resume writes a new
//     run directory; --overwrite would delete the checkpoint it reads).
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace foxhunt::apps {

struct RunDirPlan {
  std::filesystem::path dir;
  std::vector<std::string> replaced;  // entries --overwrite removes ("checkpoints/ (3 checkpoints)", ...)
};

// std::invalid_argument naming --run-dir (and --resume / --overwrite where they are the way out).
RunDirPlan plan_run_dir(const std::filesystem::path& dir, bool overwrite,
                        const std::optional<std::filesystem::path>& resume);

// Removes what the plan replaces and creates the directory; std::invalid_argument naming
// --run-dir and the filesystem's reason when that fails.
void prepare_run_dir(const RunDirPlan& plan);

// runs/<name>-<local time YYYYmmdd-HHMMSS>: the default --run-dir.
std::filesystem::path default_run_dir(const std::string& name);

// The default logger from here on: stderr and <run_dir>/train.log, at `level` (spdlog's names).
void log_to_run_dir(const std::filesystem::path& run_dir, const std::string& level);

// A warning in the log naming what --overwrite removed from plan.dir; nothing when it removed nothing.
void warn_replaced(const RunDirPlan& plan);

}  // namespace foxhunt::apps
