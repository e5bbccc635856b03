#pragma once
// config::Error, the exception of a config file with problems. Apart from config/reader.hpp so
// that headers seen by CUDA code (rl/envs/market_config.hpp) need not include toml++.
#include <stdexcept>
#include <string>
#include <vector>

namespace foxhunt::config {

// Every problem of one file: what() is "<source>: invalid configuration (N problems):" and one
// indented line per problem; errors() the same lines without the header.
class Error : public std::invalid_argument {
 public:
  Error(const std::string& source, std::vector<std::string> errors);
  // One problem, already located ("file:line: key = value: ...").
  explicit Error(const std::string& message);
  const std::vector<std::string>& errors() const { return errors_; }

 private:
  std::vector<std::string> errors_;
};

}  // namespace foxhunt::config
