#pragma once
// The host-side checks `foxhunt check` and `foxhunt train` share, none needing a device: the run
// config and everything it references (load_run_config), the checkpoint to resume
// (actors/checkpoint_check), and the run's device-memory estimate (actors/memory_estimate).
#include <filesystem>
#include <optional>
#include <string>

#include "actors/memory_estimate.hpp"
#include "actors/run_config.hpp"
#include "actors/stages.hpp"

namespace foxhunt::apps {

struct CheckedRun {
  actors::RunConfig config;
  std::optional<std::filesystem::path> resume;  // the checkpoint directory --resume resolves to
  actors::Counters resume_counters;
  actors::MemoryEstimate memory;
};

// std::invalid_argument listing the problems of the first file that has any: the config's (all of
// them, from load_run_config), or the checkpoint's (naming --resume, each file, tensor and shape).
// `resume` empty: no resume.
CheckedRun check_run(const std::filesystem::path& config, const std::string& resume);

}  // namespace foxhunt::apps
