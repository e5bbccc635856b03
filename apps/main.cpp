// foxhunt: the command-line program. Subcommands live in apps/commands_*.cpp.
#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>

#include <exception>

#include "apps/commands.hpp"

int main(int argc, char** argv) {
  CLI::App app{"foxhunt: GPU-resident, actor-based reinforcement learning"};
  app.require_subcommand(1);
  foxhunt::apps::add_devices_command(app);
  foxhunt::apps::add_train_commands(app);
  foxhunt::apps::add_eval_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
    return 1;
  }
  return foxhunt::apps::exit_code();
}
