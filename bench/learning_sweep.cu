// Learning-recipe sweep for the DQN market tests (tests/rl/dqn_learning_test.cu): trains K candidate
// recipes on the single-asset OU market (configs/markets/ou_mean_reversion.toml, DQN) and on the
// 8-asset markets (configs/markets/gbm8_correlated.toml and its OU variant ou8_correlated.toml, BDQ),
// all at once, one host thread, stream and cuBLASLt lane per run, and prints one row per run:
// the greedy policy's mean episode Sharpe net of costs next to the OU oracle, buy-and-hold, random
// and flat on the same evaluation episodes, the turnover per episode (churning shows there), the
// steps and updates done and the wall time.
//
//   foxhunt_bench_learning_sweep [--steps 1000000] [--seeds 1] [--budget 270] [--only SUBSTR]
//                                [--parallel K] [--configs DIR] [--list]
//
// --budget caps the whole run (seconds): a run still training at budget - 25 s stops early and
// is evaluated as it is (its row shows the steps it reached). --parallel caps the runs training at
// once (default: all; fewer runs go in waves that share the budget equally). A progress line comes
// every 30 s. scripts/gpu-host.sh gives each bench 120 s by default: run this one alone, or with
// FOXHUNT_BENCH_TIMEOUT=300 there. Recipes (see make_recipes) are a config file plus MarketConfig
// fields (what a TOML file can say) and learner settings, and vary one thing at a time:
//   reward   the market's own (ou: differential Sharpe, gbm8: log return, ou8: log return x 100) or
//            log return x scale (reward.kind, reward.scale);
//   level    observation.price_level on or off: (log price - OU mean) / stationary sd per asset,
//            the OU state that the return window shows only in part (best linear estimate from 32
//            returns: R^2 0.23);
//   upd      updates per vector step of 64 environments (replay ratio);
//   w1/w256  the observation window overridden (gbm8: the window is unpredictable noise; ou: a
//            longer path shows more of the OU level);
//   gamma / n-step, learning rate, turnover penalty (a shaped training reward; the Sharpe is
//   always computed from the equity returns).
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gpu/check.hpp"
#include "gpu/context.hpp"
#include "rl/dqn/market_run.hpp"
#include "rl/envs/market_config.hpp"
#include "rl/envs/market_policies.hpp"

namespace foxhunt::rl {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// ---- recipes -------------------------------------------------------------------------------------

enum class Market { ou, gbm8, ou8 };
const char* market_name(Market m) { return m == Market::ou ? "ou" : (m == Market::gbm8 ? "gbm8" : "ou8"); }

struct Recipe {
  std::string name;
  Market market = Market::ou;
  bool own_reward = true;  // false: reward.kind = log_return, reward.scale = reward_scale
  double reward_scale = 1.0;
  double turnover_penalty = 0.0;  // added to reward.turnover_penalty (applied before the scale)
  bool level = false;             // observation.price_level (one column per asset)
  int window = 0;                 // > 0: overrides market.window (returns per asset observed)
  std::vector<std::int64_t> hidden{128, 128};
  float lr = 2.5e-4f;
  float gamma = 0.99f;
  int n_step = 3;
  std::int64_t batch = 256;
  std::int64_t updates = 1;   // per vector step (64 transitions)
  double eps_fraction = 0.5;  // epsilon 1 -> eps_end over this fraction of the steps
  float eps_end = 0.02f;
  float tau = 0.005f;
};

std::vector<Recipe> make_recipes() {
  std::vector<Recipe> r;
  auto ou = [](const std::string& name, bool level, bool logret, std::int64_t updates) {
    Recipe x;
    x.name = name;
    x.market = Market::ou;
    x.level = level;
    x.own_reward = !logret;
    x.reward_scale = logret ? 100.0 : 1.0;
    x.updates = updates;
    return x;
  };
  auto bdq = [](const std::string& name, Market m, bool level, bool logret, std::int64_t updates) {
    Recipe x;
    x.name = name;
    x.market = m;
    x.hidden = {256, 256};
    x.level = level;
    x.own_reward = !logret;
    x.reward_scale = logret ? 100.0 : 1.0;
    x.updates = updates;
    return x;
  };
  // OU, the return window only (the test's observation): the test's recipe, and the reward change.
  r.push_back(ou("ou.base", false, false, 1));
  r.push_back(ou("ou.logret100.u2", false, true, 2));
  // A 256-return window: the path pins the OU level down better (R^2 0.71 instead of 0.23).
  {
    auto x = ou("ou.w256.logret100.u2", false, true, 2);
    x.window = 256;
    r.push_back(x);
  }
  // OU with the level feature (what the oracle sees), then reward, replay ratio, horizon.
  r.push_back(ou("ou.level", true, false, 1));
  r.push_back(ou("ou.level.u2", true, false, 2));
  r.push_back(ou("ou.level.logret100.u2", true, true, 2));
  r.push_back(ou("ou.level.logret100.u4", true, true, 4));
  {
    auto x = ou("ou.level.logret100.u2.g95n5", true, true, 2);
    x.gamma = 0.95f;
    x.n_step = 5;
    r.push_back(x);
  }
  // BDQ on the 8-asset GBM market (drifts 2-9 %/yr, nothing else to predict): the test's recipe,
  // the reward change, a 1-return window (GBM returns are unpredictable: the 256 window inputs are
  // noise a greedy policy can overfit and churn on), and a turnover penalty on top.
  r.push_back(bdq("gbm8.base", Market::gbm8, false, false, 1));
  r.push_back(bdq("gbm8.logret100.u2", Market::gbm8, false, true, 2));
  {
    auto x = bdq("gbm8.w1.logret100.u2", Market::gbm8, false, true, 2);
    x.window = 1;
    r.push_back(x);
  }
  {
    auto x = bdq("gbm8.w1.logret100.turn1e-3.u2", Market::gbm8, false, true, 2);
    x.window = 1;
    x.turnover_penalty = 1e-3;
    r.push_back(x);
  }
  // BDQ on 8 OU assets (ou8_correlated: the gbm8 market with OU prices, kappa 5, its sigmas): a
  // per-asset signal.
  r.push_back(bdq("ou8.level.logret100.u2", Market::ou8, true, true, 2));
  r.push_back(bdq("ou8.level.logret100.u1", Market::ou8, true, true, 1));
  return r;
}

std::filesystem::path configs_dir(const std::string& arg) {
  if (!arg.empty()) return arg;
  if (const char* env = std::getenv("FOXHUNT_CONFIGS")) return env;
  if (std::filesystem::exists("configs/markets")) return "configs";
  return std::filesystem::path(__FILE__).parent_path().parent_path() / "configs";
}

MarketConfig market_config(const Recipe& r, const std::filesystem::path& dir) {
  const char* file = r.market == Market::ou
                         ? "ou_mean_reversion.toml"
                         : (r.market == Market::gbm8 ? "gbm8_correlated.toml" : "ou8_correlated.toml");
  MarketConfig mc = load_market_config(dir / "markets" / file);
  if (!r.own_reward) {
    mc.reward = RewardKind::log_return;
    mc.reward_scale = r.reward_scale;
  }
  mc.turnover_penalty += r.turnover_penalty;
  mc.price_level = r.level;
  if (r.window > 0) mc.window = r.window;
  validate(mc);
  return mc;
}

// ---- one run ---------------------------------------------------------------------------------------

struct Result {
  std::int64_t steps = 0, updates = 0;
  double greedy = NAN, oracle = NAN, hold = NAN, random = NAN, flat = NAN;
  double greedy_turnover = NAN, random_turnover = NAN;
  double q_mean = NAN, loss = NAN;
  double train_s = 0, wall_s = 0;
  std::string error;
};

MarketLearning learning(const Recipe& r) {
  MarketLearning l;
  l.hidden = r.hidden;
  l.lr = r.lr;
  l.gamma = r.gamma;
  l.n_step = r.n_step;
  l.batch = r.batch;
  l.updates_per_vector_step = r.updates;
  l.eps_fraction = r.eps_fraction;
  l.eps_end = r.eps_end;
  l.tau = r.tau;
  return l;
}

// Everything a run owns, built on the main thread (allocations, pinned exits), used by one worker.
struct Run {
  Recipe recipe;
  std::uint64_t seed;
  std::int64_t total_steps;
  MarketDqnRun run;
  Result res;
  std::atomic<std::int64_t> progress{0};  // transitions so far (read by the progress printer)
  std::atomic<bool> done{false};

  Run(const Recipe& r, std::uint64_t sd, std::int64_t steps, gpu::BlasLane lane, const std::filesystem::path& dir)
      : recipe(r), seed(sd), total_steps(steps), run(market_config(r, dir), learning(r), sd, steps, lane) {}

  void work(Clock::time_point t0, double train_deadline_s) {
    const Clock::time_point start = Clock::now();
    const cudaStream_t s = run.stream();
    DqnTrainer& trainer = run.trainer();
    trainer.reset(seed);
    const std::int64_t chunk = MarketDqnRun::kEnvs * 64;
    while (trainer.transitions() < total_steps) {
      trainer.run(std::min(chunk, total_steps - trainer.transitions()));
      FH_CHECK(cudaStreamSynchronize(s));  // keeps the host within one chunk of the device
      progress.store(trainer.transitions(), std::memory_order_relaxed);
      if (seconds_since(t0) > train_deadline_s) break;
    }
    res.steps = trainer.transitions();
    res.updates = trainer.updates();
    res.train_s = seconds_since(start);
    run.learner().publish_metrics();
    const DqnState m = run.learner().metrics().wait();
    res.q_mean = m.q_mean;
    res.loss = m.loss;
    const MarketDqnRun::Scores sc = run.score();
    res.greedy = sc.greedy;
    res.greedy_turnover = sc.greedy_turnover;
    res.oracle = sc.oracle;
    res.hold = sc.hold;
    res.random = sc.random;
    res.random_turnover = sc.random_turnover;
    res.flat = sc.flat;
    res.wall_s = seconds_since(start);
  }
};

struct Args {
  std::int64_t steps = 1000000;
  int seeds = 1;
  double budget = 270;
  int parallel = 0;
  std::string only, configs;
  bool list = false;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", k.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (k == "--steps")
      a.steps = std::stoll(next());
    else if (k == "--seeds")
      a.seeds = std::stoi(next());
    else if (k == "--budget")
      a.budget = std::stod(next());
    else if (k == "--parallel")
      a.parallel = std::stoi(next());
    else if (k == "--only")
      a.only = next();
    else if (k == "--configs")
      a.configs = next();
    else if (k == "--list")
      a.list = true;
    else {
      std::fprintf(stderr,
                   "usage: %s [--steps N] [--seeds K] [--budget S] [--parallel K] [--only SUBSTR] [--configs DIR] "
                   "[--list]\n",
                   argv[0]);
      std::exit(2);
    }
  }
  return a;
}

std::string fmt(double v, const char* f = "%.3f") {
  if (std::isnan(v)) return "-";
  char b[32];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

int sweep_main(int argc, char** argv) {
  const Args args = parse(argc, argv);
  std::vector<Recipe> recipes;
  for (const Recipe& r : make_recipes())
    if (args.only.empty() || r.name.find(args.only) != std::string::npos) recipes.push_back(r);
  if (args.list || recipes.empty()) {
    for (const Recipe& r : make_recipes()) std::printf("%s\n", r.name.c_str());
    return recipes.empty() ? 1 : 0;
  }
  const Clock::time_point t0 = Clock::now();
  const std::filesystem::path dir = configs_dir(args.configs);
  const int jobs = static_cast<int>(recipes.size()) * args.seeds;
  const int parallel = args.parallel > 0 ? std::min(args.parallel, jobs) : jobs;
  std::printf(
      "learning sweep: %d runs (%zu recipes x %d seeds), %lld steps each, %lld envs, %d at once, budget %.0f s, "
      "configs %s\n",
      jobs, recipes.size(), args.seeds, static_cast<long long>(args.steps), static_cast<long long>(MarketDqnRun::kEnvs),
      parallel, args.budget, dir.string().c_str());
  std::fflush(stdout);

  gpu::DeviceContext ctx(0, parallel);
  std::vector<std::unique_ptr<Run>> runs;
  std::vector<std::string> build_errors(static_cast<std::size_t>(jobs));
  // Runs are built (allocations) on this thread in waves of `parallel`, then trained by one
  // worker each: no allocation happens while a worker captures its update graph.
  std::vector<Result> results(static_cast<std::size_t>(jobs));
  const int waves = (jobs + parallel - 1) / parallel;
  for (int w0 = 0; w0 < jobs; w0 += parallel) {
    const int w1 = std::min(jobs, w0 + parallel);
    // Each wave gets an equal share of what is left of the budget, 25 s kept for evaluation.
    const int waves_left = waves - w0 / parallel;
    const double now = seconds_since(t0);
    const double train_deadline = now + (args.budget - 25.0 * waves_left - now) / waves_left;
    std::vector<std::unique_ptr<Run>> wave;
    for (int j = w0; j < w1; ++j) {
      const Recipe& r = recipes[static_cast<std::size_t>(j / args.seeds)];
      const std::uint64_t seed = 1 + static_cast<std::uint64_t>(j % args.seeds);
      try {
        wave.push_back(std::make_unique<Run>(r, seed, args.steps, ctx.blas(j - w0), dir));
      } catch (const std::exception& e) {
        wave.push_back(nullptr);
        results[static_cast<std::size_t>(j)].error = std::string("build: ") + e.what();
      }
    }
    std::vector<std::thread> threads;
    for (int j = w0; j < w1; ++j) {
      Run* run = wave[static_cast<std::size_t>(j - w0)].get();
      if (run == nullptr) continue;
      threads.emplace_back([run, &ctx, t0, train_deadline] {
        try {
          ctx.make_current();
          run->work(t0, train_deadline);
        } catch (const std::exception& e) {
          run->res.error = e.what();
        }
        run->done.store(true, std::memory_order_release);
      });
    }
    // Progress every 30 s (a run cut short by an outside timeout still shows how far it got).
    double last_print = seconds_since(t0);
    for (;;) {
      bool all_done = true;
      for (const auto& run : wave)
        if (run && !run->done.load(std::memory_order_acquire)) all_done = false;
      if (all_done) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      if (seconds_since(t0) - last_print >= 30.0) {
        last_print = seconds_since(t0);
        std::printf("[%4.0f s] k steps:", last_print);
        for (const auto& run : wave)
          if (run)
            std::printf(" %s=%lld", run->recipe.name.c_str(),
                        static_cast<long long>(run->progress.load(std::memory_order_relaxed) / 1000));
        std::printf("\n");
        std::fflush(stdout);
      }
    }
    for (auto& t : threads) t.join();
    for (int j = w0; j < w1; ++j)
      if (Run* run = wave[static_cast<std::size_t>(j - w0)].get()) results[static_cast<std::size_t>(j)] = run->res;
    FH_CHECK(cudaDeviceSynchronize());
  }

  std::printf("\n%-34s %4s %5s %8s %7s %7s %7s %7s %7s %7s %8s %8s %8s %7s\n", "recipe", "mkt", "seed", "steps",
              "updates", "greedy", "oracle", "hold", "random", "flat", "turn_g", "turn_rnd", "q_mean", "wall_s");
  std::printf("%s\n", std::string(140, '-').c_str());
  for (int j = 0; j < jobs; ++j) {
    const Recipe& r = recipes[static_cast<std::size_t>(j / args.seeds)];
    const Result& x = results[static_cast<std::size_t>(j)];
    std::printf("%-34s %4s %5d %8lld %7lld %7s %7s %7s %7s %7s %8s %8s %8s %7s%s%s\n", r.name.c_str(),
                market_name(r.market), 1 + j % args.seeds, static_cast<long long>(x.steps),
                static_cast<long long>(x.updates), fmt(x.greedy).c_str(), fmt(x.oracle).c_str(), fmt(x.hold).c_str(),
                fmt(x.random).c_str(), fmt(x.flat).c_str(), fmt(x.greedy_turnover, "%.1f").c_str(),
                fmt(x.random_turnover, "%.1f").c_str(), fmt(x.q_mean, "%.3g").c_str(), fmt(x.wall_s, "%.0f").c_str(),
                x.steps < args.steps && x.error.empty() ? "  (stopped early: budget)" : "",
                x.error.empty() ? "" : ("  ERROR " + x.error).c_str());
  }
  if (args.seeds > 1) {
    std::printf("\nmean over seeds:\n");
    for (std::size_t k = 0; k < recipes.size(); ++k) {
      double g = 0, o = 0;
      int n = 0;
      for (int s = 0; s < args.seeds; ++s) {
        const Result& x = results[k * static_cast<std::size_t>(args.seeds) + static_cast<std::size_t>(s)];
        if (!x.error.empty()) continue;
        g += x.greedy;
        o += x.oracle;
        ++n;
      }
      if (n > 0)
        std::printf("%-34s greedy %s oracle %s (greedy / oracle %s)\n", recipes[k].name.c_str(), fmt(g / n).c_str(),
                    fmt(o / n).c_str(), fmt(g / o).c_str());
    }
  }
  std::printf("\ntotal wall %.0f s\n", seconds_since(t0));
  return 0;
}

}  // namespace
}  // namespace foxhunt::rl

int main(int argc, char** argv) {
  try {
    return foxhunt::rl::sweep_main(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "learning_sweep: %s\n", e.what());
    return 1;
  }
}
