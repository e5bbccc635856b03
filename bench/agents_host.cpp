// Host-only part of bench/agents.cu: spdlog's headers do not compile under nvcc (fmt's consteval
// format strings), so the log level is set here.
#include <spdlog/spdlog.h>

namespace foxhunt::bench {

// The runtime's log: info and above with verbose, else warnings and errors only (the tables stay
// readable; a failing run's reasons still show).
void set_runtime_log_level(bool verbose) { spdlog::set_level(verbose ? spdlog::level::info : spdlog::level::warn); }

}  // namespace foxhunt::bench
