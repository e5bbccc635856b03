#pragma once
// Each subcommand registers itself on the CLI11 app with the run's Console: where it prints and
// where it records its exit code (so tests run the real commands and read both).
#include <CLI/CLI.hpp>

#include <ostream>

namespace foxhunt::apps {

struct Console {
  std::ostream& out;  // results: tables, the resolved config
  std::ostream& err;  // errors and warnings
  int exit_code = 0;  // set by the subcommand that ran (0 unless it reported a failure)
};

// After a stall whose streams did not drain (RunResult::undrained), destroying the stages would
// wait for that work forever (cudaFree synchronizes): the process ends here, its output flushed.
[[noreturn]] void end_undrained(Console& io, int code);

void add_devices_command(CLI::App& app, Console& console);  // apps/commands_devices.cpp
void add_train_command(CLI::App& app, Console& console);    // apps/commands_train.cpp
void add_check_command(CLI::App& app, Console& console);    // apps/commands_check.cpp
void add_eval_command(CLI::App& app, Console& console);     // apps/commands_eval.cpp
void add_pretrain_command(CLI::App& app, Console& console); // apps/commands_pretrain.cpp
void add_launch_command(CLI::App& app, Console& console);   // apps/commands_launch.cpp

}  // namespace foxhunt::apps
