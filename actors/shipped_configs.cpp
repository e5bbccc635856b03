#include "actors/shipped_configs.hpp"

#include <cstdlib>
#include <system_error>

namespace foxhunt::actors {
namespace fs = std::filesystem;

fs::path shipped_configs_dir() {
  if (const char* env = std::getenv("FOXHUNT_CONFIGS"); env && *env) return env;
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const fs::path installed = (exe.parent_path() / ".." / "share" / "foxhunt" / "configs").lexically_normal();
    if (fs::is_directory(installed, ec)) return installed;
  }
  const fs::path source = FOXHUNT_SOURCE_CONFIGS_DIR;  // baked in by actors/CMakeLists.txt
  if (fs::is_directory(source, ec)) return source;
  return {};
}

}  // namespace foxhunt::actors
