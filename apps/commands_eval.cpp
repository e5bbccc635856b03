// `foxhunt eval --checkpoint DIR [--config FILE] [--episodes N] [--seed S]`: the greedy policy of a
// checkpoint beside baselines (actors/evaluate.hpp). Exit 2 for bad arguments, 1 for a failure.
#include <cstdint>
#include <exception>
#include <limits>
#include <memory>
#include <string>

#include "actors/evaluate.hpp"
#include "apps/commands.hpp"

namespace foxhunt::apps {
using namespace foxhunt::actors;

namespace {
struct EvalArgs {
  std::string checkpoint, config;
  std::int64_t episodes = 100;
  std::uint64_t seed = 0;
};

// CLI11 converts "-1" to an unsigned integer by wrapping it; a seed is given as written or
// refused with the range.
std::string unsigned_integer(const std::string& text) {
  const bool digits = !text.empty() && text.find_first_not_of("0123456789") == std::string::npos;
  bool fits = digits;
  if (digits) try {
      std::size_t used = 0;
      (void)std::stoull(text, &used);
      fits = used == text.size();
    } catch (const std::exception&) {
      fits = false;
    }
  if (fits) return "";
  return "got " + text + ": must be an integer in [0, " + std::to_string(std::numeric_limits<std::uint64_t>::max()) +
         "]";
}
}  // namespace

void add_eval_command(CLI::App& app, Console& io) {
  auto args = std::make_shared<EvalArgs>();
  auto* e = app.add_subcommand("eval",
                               "Run the greedy policy of a checkpoint and report return, Sharpe, drawdown, "
                               "turnover beside buy-and-hold");
  e->add_option("--checkpoint", args->checkpoint, "checkpoint directory, or a run directory (its latest)")->required();
  e->add_option("--config", args->config, "run configuration (default: the checkpoint's config.resolved.toml)");
  e->add_option("--episodes", args->episodes,
                "episodes (parallel environments), in [1, " + std::to_string(kMaxEvalEpisodes) + "], default 100")
      ->check(CLI::Range(std::int64_t{1}, kMaxEvalEpisodes));
  auto* seed =
      e->add_option("--seed", args->seed, "environment seed (default: derived from run.seed, unseen in training)")
          ->check(CLI::Validator(unsigned_integer, "UINT64"));
  e->callback([args, seed, &io] {
    EvalRequest req;
    req.checkpoint = args->checkpoint;
    if (!args->config.empty()) req.config = args->config;
    req.episodes = args->episodes;
    if (seed->count() > 0) req.seed = args->seed;
    EvalPlan plan;
    try {
      plan = plan_eval(req);
    } catch (const std::invalid_argument& ex) {
      io.err << "foxhunt eval: " << ex.what() << "\n";
      io.exit_code = 2;
      return;
    }
    try {
      io.out << "checkpoint " << plan.checkpoint.string() << " (config " << plan.config_file.string() << ")\n";
      io.out.flush();
      const EvalReport report = evaluate(plan);
      io.out << format_eval_table(report);
      io.out.flush();
    } catch (const std::exception& ex) {
      io.err << "foxhunt eval: " << ex.what() << "\n";
      io.exit_code = 1;
    }
  });
}

}  // namespace foxhunt::apps
