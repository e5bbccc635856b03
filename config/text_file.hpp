#pragma once
// Reading a config file's text, with the errors every config loader gives for a bad path.
#include <filesystem>
#include <string>

namespace foxhunt::config {

// The file's text; std::invalid_argument "<file>: is a directory, not a <what>" or
// "<file>: cannot read the config file".
std::string read_config_text(const std::filesystem::path& file, const std::string& what);

}  // namespace foxhunt::config
