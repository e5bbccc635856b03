// `foxhunt eval --checkpoint DIR [--config FILE] [--episodes N] [--seed S]`: the greedy policy of a
// checkpoint beside baselines (actors/evaluate.hpp). Exit 2 for bad arguments, 1 for a failure.
#include <cstdio>
#include <exception>
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
  bool seed_given = false;
};
}  // namespace

void add_eval_command(CLI::App& app) {
  auto args = std::make_shared<EvalArgs>();
  auto* e = app.add_subcommand("eval",
                               "Run the greedy policy of a checkpoint and report return, Sharpe, drawdown, "
                               "turnover beside buy-and-hold");
  e->add_option("--checkpoint", args->checkpoint, "checkpoint directory, or a run directory (its latest)")->required();
  e->add_option("--config", args->config, "run configuration (default: the checkpoint's config.resolved.toml)");
  e->add_option("--episodes", args->episodes, "episodes (parallel environments), default 100");
  auto* seed =
      e->add_option("--seed", args->seed, "environment seed (default: derived from run.seed, unseen in training)");
  e->callback([args, seed] {
    EvalRequest req;
    req.checkpoint = args->checkpoint;
    if (!args->config.empty()) req.config = args->config;
    req.episodes = args->episodes;
    if (seed->count() > 0) req.seed = args->seed;
    EvalPlan plan;
    try {
      plan = plan_eval(req);
    } catch (const std::invalid_argument& ex) {
      std::fprintf(stderr, "foxhunt eval: %s\n", ex.what());
      set_exit_code(2);
      return;
    }
    try {
      std::printf("checkpoint %s (config %s)\n", plan.checkpoint.string().c_str(), plan.config_file.string().c_str());
      const EvalReport report = evaluate(plan);
      std::printf("%s", format_eval_table(report).c_str());
      std::fflush(stdout);
    } catch (const std::exception& ex) {
      std::fprintf(stderr, "foxhunt eval: %s\n", ex.what());
      set_exit_code(1);
    }
  });
}

}  // namespace foxhunt::apps
