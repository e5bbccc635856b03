#include "apps/run_checks.hpp"

#include <stdexcept>

#include "actors/checkpoint_check.hpp"
#include "actors/checkpoint_store.hpp"
#include "actors/train_run.hpp"

namespace foxhunt::apps {

CheckedRun check_run(const std::filesystem::path& config, const std::string& resume) {
  CheckedRun run;
  run.config = actors::load_run_config(config);
  if (!resume.empty()) {
    try {
      run.resume = actors::resolve_checkpoint(resume);
    } catch (const std::invalid_argument& e) {
      throw std::invalid_argument(std::string("--resume ") + e.what());
    }
    actors::require_resumable(run.config, *run.resume);
    run.resume_counters = actors::CheckpointStore::read_counters(*run.resume);
  }
  run.memory = actors::estimate_memory(run.config);
  return run;
}

}  // namespace foxhunt::apps
