// `foxhunt eval --checkpoint DIR [--checkpoint DIR ...] [--config FILE] [--episodes N] [--seed S]
// [--cost-multipliers LIST] [--report-dir DIR]`: the policies of checkpoints beside baselines, with
// the backtest report written to the report directory (actors/evaluate.hpp, docs/eval.md). Exit 2
// for bad arguments, 1 for a failure.
#include <cstdint>
#include <exception>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "actors/evaluate.hpp"
#include "apps/commands.hpp"

namespace foxhunt::apps {
using namespace foxhunt::actors;

namespace {
struct EvalArgs {
  std::vector<std::string> checkpoints;
  std::string config, cost_multipliers = "1", report_dir, split;
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
                               "Backtest the policies of checkpoints beside buy-and-hold, flat, random and the "
                               "oracle: metrics with confidence intervals, report.json, equity.csv, report.html");
  e->add_option("--checkpoint", args->checkpoints,
                "checkpoint directory, run directory (its latest), a run of several agents (each agent's latest), or "
                "a directory of run directories; repeatable")
      ->required()
      ->take_all();
  e->add_option("--config", args->config, "run configuration (default: the checkpoint's config.resolved.toml)");
  e->add_option("--episodes", args->episodes,
                "episodes (parallel environments), in [1, " + std::to_string(kMaxEvalEpisodes) + "], default 100")
      ->check(CLI::Range(std::int64_t{1}, kMaxEvalEpisodes));
  auto* seed =
      e->add_option("--seed", args->seed, "environment seed (default: derived from run.seed, unseen in training)")
          ->check(CLI::Validator(unsigned_integer, "UINT64"));
  e->add_option("--cost-multipliers", args->cost_multipliers,
                "fees, half-spread and slippage scaled by each, one report row each (default 1), e.g. 0,1,2,5");
  e->add_option("--split", args->split,
                "part of a replay market's [split] to replay: train, validation or test (default: test when the "
                "market has a [split], else the whole market)");
  e->add_option("--report-dir", args->report_dir,
                "where report.json, equity.csv, report.html go (default: <checkpoint>/eval)");
  e->callback([args, seed, &io] {
    EvalRequest req;
    for (const auto& c : args->checkpoints) req.checkpoints.emplace_back(c);
    if (!args->config.empty()) req.config = args->config;
    req.episodes = args->episodes;
    if (seed->count() > 0) req.seed = args->seed;
    if (!args->report_dir.empty()) req.report_dir = args->report_dir;
    EvalPlan plan;
    try {
      if (!args->split.empty()) try {
          req.split = rl::parse_split(args->split);
        } catch (const std::invalid_argument& ex) {
          throw std::invalid_argument(std::string("--split: ") + ex.what());
        }
      req.cost_multipliers = parse_cost_multipliers(args->cost_multipliers);
      plan = plan_eval(req);
    } catch (const std::invalid_argument& ex) {
      io.err << "foxhunt eval: " << ex.what() << "\n";
      io.exit_code = 2;
      return;
    }
    try {
      for (const EvalTarget& t : plan.targets)
        io.out << (t.agent.empty() ? "" : "agent " + t.agent + " (" + t.config.learner.kind + "): ") << "checkpoint "
               << t.checkpoint.string() << " (config " << t.config_file.string() << ")\n";
      io.out.flush();
      const EvalReport report = evaluate(plan);
      io.out << format_eval_table(report);
      const auto files = write_eval_report(report, plan.report_dir);
      io.out << "report " << plan.report_dir.string() << ":";
      for (const auto& f : files) io.out << " " << f.filename().string();
      io.out << "\n";
      io.out.flush();
    } catch (const std::exception& ex) {
      io.err << "foxhunt eval: " << ex.what() << "\n";
      io.exit_code = 1;
    }
  });
}

}  // namespace foxhunt::apps
