#pragma once
// Each subcommand registers itself on the CLI11 app and records its exit code.
#include <CLI/CLI.hpp>

namespace foxhunt::apps {

void add_devices_command(CLI::App& app);
void add_train_commands(CLI::App& app);  // train (apps/commands_train.cpp)
void add_eval_command(CLI::App& app);    // eval (apps/commands_eval.cpp)

// The exit code set by the subcommand that ran (0 unless it reported a failure).
int exit_code();
void set_exit_code(int code);

}  // namespace foxhunt::apps
