// foxhunt: the command-line program. The commands live in apps/commands_*.cpp, the parsing in
// apps/cli.cpp.
#include <iostream>
#include <string>
#include <vector>

#include "apps/cli.hpp"

int main(int argc, char** argv) {
  return foxhunt::apps::run_cli(std::vector<std::string>(argv, argv + argc), std::cout, std::cerr);
}
