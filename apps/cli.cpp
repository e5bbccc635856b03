#include "apps/cli.hpp"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <exception>
#include <functional>
#include <utility>

#include "apps/commands.hpp"
#include "config/reader.hpp"

namespace foxhunt::apps {

namespace {

std::string join(const std::vector<std::string>& items) {
  std::string s;
  for (const auto& i : items) s += (s.empty() ? "" : ", ") + i;
  return s;
}

// The long flags of a (sub)command, "--config" style.
std::vector<std::string> long_flags(const CLI::App& app) {
  std::vector<std::string> flags;
  for (const CLI::Option* o : app.get_options())
    for (const std::string& name : o->get_lnames()) flags.push_back("--" + name);
  return flags;
}

}  // namespace

std::string closest_match(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  std::size_t best_distance = 3;
  for (const std::string& c : candidates) {
    const std::size_t d = c.starts_with(word) && word.size() >= 2 ? 1 : config::edit_distance(word, c);
    if (d < best_distance) {
      best_distance = d;
      best = c;
    }
  }
  return best;
}

int run_cli(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  Console console{out, err};
  CLI::App app{"foxhunt: GPU-resident, actor-based reinforcement learning"};
  app.require_subcommand(1);
  add_check_command(app, console);
  add_devices_command(app, console);
  add_eval_command(app, console);
  add_launch_command(app, console);
  add_pretrain_command(app, console);
  add_train_command(app, console);

  std::vector<std::string> commands;
  const std::function<bool(const CLI::App*)> all = [](const CLI::App*) { return true; };
  for (const CLI::App* sub : std::as_const(app).get_subcommands(all)) commands.push_back(sub->get_name());
  // A first word that is neither a flag nor a command: a misspelled command, answered with the
  // nearest one (CLI11 alone would only say the argument was not expected).
  if (args.size() > 1 && !args[1].empty() && args[1][0] != '-' &&
      std::find(commands.begin(), commands.end(), args[1]) == commands.end()) {
    err << "foxhunt: '" << args[1] << "' is not a command";
    if (const std::string near = closest_match(args[1], commands); !near.empty())
      err << "; did you mean '" << near << "'?";
    err << "\ncommands: " << join(commands) << " (foxhunt --help)\n";
    return 2;
  }

  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::ParseError& e) {
    // CLI11 prints the message (or the help) and has a code per kind of error (105, 106, 109, ...);
    // every refused command line leaves with 2, the code of refused input everywhere else.
    const int code = app.exit(e, out, err) == 0 ? 0 : 2;
    // A misspelled flag of the command given (reported by CLI11 as unexpected, or as a required
    // flag missing): name the nearest flag the command has.
    if (args.size() > 1 && std::find(commands.begin(), commands.end(), args[1]) != commands.end()) {
      const std::vector<std::string> known = long_flags(*app.get_subcommand(args[1]));
      for (std::size_t i = 2; i < args.size(); ++i) {
        if (!args[i].starts_with("--")) continue;
        const std::string flag = args[i].substr(0, args[i].find('='));
        if (std::find(known.begin(), known.end(), flag) != known.end() || flag == "--help") continue;
        if (const std::string near = closest_match(flag, known); !near.empty())
          err << "foxhunt " << args[1] << ": unknown flag " << flag << "; did you mean " << near << "?\n";
      }
    }
    return code;
  } catch (const std::exception& e) {
    err << "foxhunt: " << e.what() << "\n";
    return 1;
  }
  return console.exit_code;
}

}  // namespace foxhunt::apps
