#pragma once
// Paths the tests read shipped files from. configs_dir(): $FOXHUNT_CONFIGS, else the package's
// share/foxhunt/configs beside the test binary, else the source tree's configs/ (the rule of
// actors/shipped_configs.hpp), so a packaged folder runs its tests without the source tree.
// Empty when none exists (a test opening a file under it then fails naming the file).
#include <filesystem>

#include "actors/shipped_configs.hpp"

namespace foxhunt::test {

inline std::filesystem::path configs_dir() { return actors::shipped_configs_dir(); }

}  // namespace foxhunt::test
