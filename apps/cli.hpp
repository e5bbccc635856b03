#pragma once
// The whole `foxhunt` command line as a function: parses `args` (args[0] is the program name),
// runs the subcommand, returns its exit code. main() passes std::cout / std::cerr; the CPU tests
// pass string streams and check the messages and what was (not) written to disk.
// Exit codes: 0 success; 1 a failure while running (no device, a failed run); 2 bad input
// (flags, config, checkpoint, run directory); CLI11's own codes for its parse errors.
#include <ostream>
#include <string>
#include <vector>

namespace foxhunt::apps {

int run_cli(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

// The closest of `candidates` to `word` within edit distance 2 (a prefix of one counts too), or
// "" when none is that close: the "did you mean" of a misspelled command or flag.
std::string closest_match(const std::string& word, const std::vector<std::string>& candidates);

}  // namespace foxhunt::apps
