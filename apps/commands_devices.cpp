// `foxhunt devices`: lists the CUDA devices, or says plainly that there are none (exit 1).
#include <cstdio>
#include <string>

#include "apps/commands.hpp"
#include "gpu/device.hpp"

namespace foxhunt::apps {

void add_devices_command(CLI::App& app, Console& io) {
  auto* cmd = app.add_subcommand("devices", "List the CUDA devices with name, memory and SM count");
  cmd->callback([&io] {
    std::string why;
    if (gpu::device_count(&why) == 0) {
      io.err << "foxhunt: no CUDA device present (" << why << ")\n";
      io.exit_code = 1;
      return;
    }
    char line[160];
    std::snprintf(line, sizeof line, "%-4s %-28s %12s %5s %5s %8s\n", "id", "name", "memory", "SMs", "cc", "L2");
    io.out << line;
    for (const auto& d : gpu::list_devices()) {
      std::snprintf(line, sizeof line, "%-4d %-28s %8.1f GiB %5d %3d.%d %5.0f MB\n", d.ordinal, d.name.c_str(),
                    d.total_memory / double(1ull << 30), d.sm_count, d.cc_major, d.cc_minor, d.l2_bytes / 1e6);
      io.out << line;
    }
  });
}

}  // namespace foxhunt::apps
