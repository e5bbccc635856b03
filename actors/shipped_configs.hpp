#pragma once
// Where the shipped run configs (configs/*.toml, configs/markets/*.toml) are, for a build tree
// and for the folder scripts/package.sh installs alike. In order:
//   1. $FOXHUNT_CONFIGS when set (an explicit choice wins);
//   2. <folder of the running executable>/../share/foxhunt/configs when it exists (the package:
//      cmake/FoxhuntInstall.cmake installs configs/ there);
//   3. the source tree's configs/ (the build tree, where nothing is installed).
// The empty path when none exists.
#include <filesystem>

namespace foxhunt::actors {

std::filesystem::path shipped_configs_dir();

}  // namespace foxhunt::actors
