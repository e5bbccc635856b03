#include "config/text_file.hpp"

#include <fstream>
#include <sstream>
#include <stdexcept>
#include <system_error>

namespace foxhunt::config {

std::string read_config_text(const std::filesystem::path& file, const std::string& what) {
  std::error_code ec;
  if (std::filesystem::is_directory(file, ec))
    throw std::invalid_argument(file.string() + ": is a directory, not a " + what);
  std::ifstream in(file, std::ios::binary);
  if (!in) throw std::invalid_argument(file.string() + ": cannot read the config file");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace foxhunt::config
