// `foxhunt check --config FILE [--resume DIR]`: the checks `foxhunt train` runs before it touches
// the device, without a device: the config and the files it names, the checkpoint to resume, the
// device-memory estimate. Prints the resolved config (every default filled in) and the estimate;
// exit 0 when the run can start, 2 with every problem of the first bad file otherwise. A pretrain
// config (one with [model] and [task] tables: configs/pretrain/) gets `foxhunt pretrain`'s checks.
#include <exception>
#include <memory>
#include <string>

#include <toml++/toml.h>

#include "actors/memory_estimate.hpp"
#include "actors/agents_run.hpp"
#include "actors/run_config.hpp"
#include "actors/shipped_configs.hpp"
#include "apps/commands.hpp"
#include "apps/run_checks.hpp"
#include "config/text_file.hpp"
#include "pretrain/config.hpp"

namespace foxhunt::apps {

namespace {
struct CheckArgs {
  std::string config, resume, seeds;
};

// A pretrain config has [model] and [task] tables, which no run config has. A file that does not
// parse is left to the run-config checks, which name its syntax error.
bool is_pretrain_config(const std::string& path) {
  try {
    const toml::table root = toml::parse(config::read_config_text(path, "config"), path);
    return root["model"].is_table() && root["task"].is_table();
  } catch (const std::exception&) {
    return false;
  }
}
}  // namespace

void add_check_command(CLI::App& app, Console& io) {
  auto args = std::make_shared<CheckArgs>();
  const std::filesystem::path shipped = actors::shipped_configs_dir();
  auto* c = app.add_subcommand("check",
                               "Validate a run config, the files it names and a checkpoint to resume, without a GPU; "
                               "print the resolved config and the estimated device memory");
  c->add_option(
       "--config", args->config,
       "TOML run configuration" + (shipped.empty() ? std::string() : " (shipped ones: " + shipped.string() + ")"))
      ->required()
      ->check(CLI::ExistingFile);
  c->add_option("--resume", args->resume, "checkpoint (or run) directory that `train --resume` would read");
  c->add_option("--seeds", args->seeds, "as `train --seeds`: every agent once per seed (e.g. 1,2,3)");
  c->callback([args, &io] {
    if (is_pretrain_config(args->config)) {
      if (!args->resume.empty()) {
        io.err << "foxhunt check: --resume: a pretrain checkpoint is checked by `foxhunt pretrain --resume`\n";
        io.exit_code = 2;
        return;
      }
      try {
        const pretrain::PretrainConfig config = pretrain::load_pretrain_config(args->config);
        io.out << "# " << args->config << ": ok (a pretrain config); the resolved config (every default filled in):\n"
               << pretrain::resolved_pretrain_toml(config) << "\n";
      } catch (const std::invalid_argument& e) {
        io.err << "foxhunt check: " << e.what() << "\n";
        io.exit_code = 2;
      }
      return;
    }
    CheckedAgents agents;
    try {
      agents = check_agents(args->config, args->seeds, args->resume);
    } catch (const std::invalid_argument& e) {
      io.err << "foxhunt check: " << e.what() << "\n";
      io.exit_code = 2;
      return;
    }
    if (agents.config.several) {
      const auto& list = agents.config.agents;
      io.out << "# " << args->config << ": ok; " << list.size()
             << " agents, each as the run it trains (its resolved config, every default filled in):\n";
      for (std::size_t i = 0; i < list.size(); ++i) {
        io.out << "\n# ---- agent " << list[i].name << " (stream_priority " << list[i].stream_priority
               << "): <run>/agents/" << list[i].name << "/config.resolved.toml\n"
               << actors::resolved_toml(list[i].config) << "\n";
        io.out << "# agent " << list[i].name << ": estimated device memory\n"
               << actors::format_memory_table(agents.memory[i]);
        if (agents.resume)
          io.out << "resume: agent " << list[i].name << ": " << agents.checkpoints.at(list[i].name).string()
                 << ": ok (env_steps " << agents.resume_counters.at(list[i].name).env_steps << ", updates "
                 << agents.resume_counters.at(list[i].name).updates << ")\n";
      }
      io.out << "\ndevice: run.device = " << list.front().config.run.device
             << " (not checked without a GPU: `foxhunt devices` lists the devices of a GPU host)\n";
      io.out << "# every agent together (" << list.size() << " agents on one device): estimated device memory\n"
             << actors::format_memory_table(agents.total);
      return;
    }
    CheckedRun run;
    try {
      run = check_run(args->config, args->resume);
    } catch (const std::invalid_argument& e) {
      io.err << "foxhunt check: " << e.what() << "\n";
      io.exit_code = 2;
      return;
    }
    io.out << "# " << args->config << ": ok; the resolved config (every default filled in):\n"
           << actors::resolved_toml(run.config) << "\n";
    io.out << "device: run.device = " << run.config.run.device
           << " (not checked without a GPU: `foxhunt devices` lists the devices of a GPU host)\n";
    io.out << actors::format_memory_table(run.memory);
    if (const auto shares = actors::per_device(run.config, run.memory); shares.size() > 1)
      for (const actors::DeviceMemoryShare& share : shares)
        io.out << "  on device " << share.device << " (" << share.roles << "): " << actors::human_bytes(share.bytes)
               << "\n";
    if (run.resume)
      io.out << "resume: " << run.resume->string() << ": ok (env_steps " << run.resume_counters.env_steps
             << ", updates " << run.resume_counters.updates << ")\n";
  });
}

}  // namespace foxhunt::apps
