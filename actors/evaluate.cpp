#include "actors/evaluate.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <memory>
#include <stdexcept>
#include <utility>

#include "actors/eval_policy.hpp"
#include "actors/metrics_log.hpp"
#include "actors/stage_factory.hpp"
#include "actors/train_run.hpp"
#include "gpu/buffer.hpp"
#include "gpu/check.hpp"
#include "gpu/context.hpp"
#include "gpu/device.hpp"
#include "gpu/exit.hpp"
#include "rl/envs/cartpole.hpp"
#include "rl/envs/market.hpp"
#include "rl/envs/market_policies.hpp"
#include "rl/envs/ohlcv_csv.hpp"
#include "rl/eval/metrics.hpp"

namespace foxhunt::actors {
namespace fs = std::filesystem;

std::uint64_t eval_seed(std::uint64_t run_seed) {
  // splitmix64 of a tagged seed: far from run.seed and its neighbours (other runs' seeds).
  std::uint64_t z = run_seed + 0x9e3779b97f4a7c15ull * 0x6576616cull;  // "eval"
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return z == run_seed ? z + 1 : z;
}

std::vector<double> parse_cost_multipliers(const std::string& text) {
  const std::string allowed = "a comma-separated list of numbers in [0, " +
                              std::to_string(static_cast<int>(kMaxCostMultiplier)) + "], each once (e.g. 0,1,2,5)";
  std::vector<double> out;
  std::size_t begin = 0;
  while (true) {
    const std::size_t end = std::min(text.find(',', begin), text.size());
    std::string item = text.substr(begin, end - begin);
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    double v = 0.0;
    bool ok = !item.empty() && item.find_first_not_of("0123456789.eE+-") == std::string::npos;
    if (ok) try {
        std::size_t used = 0;
        v = std::stod(item, &used);
        ok = used == item.size();
      } catch (const std::exception&) {
        ok = false;
      }
    if (!ok)
      throw std::invalid_argument("--cost-multipliers " + text + ": \"" + item + "\" is not a number; must be " +
                                  allowed);
    if (!std::isfinite(v) || v < 0.0 || v > kMaxCostMultiplier)
      throw std::invalid_argument("--cost-multipliers " + text + ": " + item + " is out of range; must be " + allowed);
    if (std::find(out.begin(), out.end(), v) != out.end())
      throw std::invalid_argument("--cost-multipliers " + text + ": " + item + " is listed twice; must be " + allowed);
    out.push_back(v);
    if (end == text.size()) break;
    begin = end + 1;
  }
  return out;
}

namespace {

// A checkpoint directory evaluation can read: resolve_checkpoint, and the learner weights there.
fs::path checkpoint_dir(const fs::path& arg) {
  fs::path dir;
  try {
    dir = resolve_checkpoint(arg);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string("--checkpoint ") + e.what());
  }
  if (!fs::is_regular_file(dir / "learner.online.safetensors") && !fs::is_regular_file(dir / "learner.safetensors"))
    throw std::invalid_argument("--checkpoint " + dir.string() +
                                ": no learner weights there (learner.online.safetensors for DQN, learner.safetensors "
                                "for PPO: not a foxhunt train checkpoint)");
  return dir;
}

// The run directories under a multi-seed parent (each resolving to a checkpoint), in name order.
std::vector<fs::path> runs_under(const fs::path& parent) {
  std::vector<fs::path> dirs;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(parent, ec))
    if (e.is_directory(ec) && e.path().filename() != "eval") dirs.push_back(e.path());
  std::sort(dirs.begin(), dirs.end());
  std::vector<fs::path> runs;
  for (const fs::path& d : dirs) try {
      (void)resolve_checkpoint(d);
      runs.push_back(d);
    } catch (const std::invalid_argument&) {
    }
  return runs;
}

// The agents of a run of several agents (<p>/agents/<name>, each resolving to a checkpoint), in
// name order; empty when `p` is not such a run.
std::vector<fs::path> agents_under(const fs::path& p) {
  std::error_code ec;
  if (!fs::is_directory(p / "agents", ec)) return {};
  return runs_under(p / "agents");
}

EvalTarget load_target(const fs::path& checkpoint, const std::optional<fs::path>& config) {
  EvalTarget t;
  t.checkpoint = checkpoint;
  t.agent = agent_of_checkpoint(checkpoint);
  if (config) {
    t.config_file = *config;
  } else if (auto f = run_config_of(checkpoint)) {
    t.config_file = *f;
  } else {
    throw std::invalid_argument("--config: missing, and the checkpoint " + checkpoint.string() +
                                " has no config.resolved.toml (nor its run directory): give the run's config");
  }
  try {
    t.config = load_run_config(t.config_file);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string("--config: ") + e.what());
  }
  return t;
}

}  // namespace

std::string agent_of_checkpoint(const fs::path& checkpoint) {
  fs::path dir = checkpoint;
  if (!dir.has_filename()) dir = dir.parent_path();  // a trailing separator
  const fs::path checkpoints = dir.parent_path(), agent = checkpoints.parent_path();
  if (checkpoints.filename() != "checkpoints" || agent.parent_path().filename() != "agents") return "";
  return agent.filename().string();
}

EvalPlan plan_eval(const EvalRequest& req) {
  EvalPlan plan;
  if (req.checkpoints.empty())
    throw std::invalid_argument("--checkpoint: missing (a checkpoint or run directory, or a directory of runs)");
  if (req.config && !fs::is_regular_file(*req.config))
    throw std::invalid_argument("--config " + req.config->string() + ": no such file");
  std::optional<fs::path> parent;  // the first argument, when it was a run of several agents or a multi-seed parent
  for (std::size_t k = 0; k < req.checkpoints.size(); ++k) {
    const fs::path& arg = req.checkpoints[k];
    if (arg.empty()) throw std::invalid_argument("--checkpoint: empty path");
    if (!fs::is_directory(arg)) throw std::invalid_argument("--checkpoint " + arg.string() + ": no such directory");
    bool resolves = true;
    try {
      (void)resolve_checkpoint(arg);
    } catch (const std::invalid_argument&) {
      resolves = false;
    }
    std::vector<fs::path> dirs;
    if (resolves) {
      dirs.push_back(checkpoint_dir(arg));
    } else if (const std::vector<fs::path> agents = agents_under(arg); !agents.empty()) {
      for (const fs::path& a : agents) dirs.push_back(checkpoint_dir(a));
      if (k == 0) parent = arg;
    } else {
      const std::vector<fs::path> runs = runs_under(arg);
      if (runs.empty()) dirs.push_back(checkpoint_dir(arg));  // throws the located reason
      for (const fs::path& r : runs) dirs.push_back(checkpoint_dir(r));
      if (k == 0 && !runs.empty()) parent = arg;
    }
    for (const fs::path& d : dirs) plan.targets.push_back(load_target(d, req.config));
  }
  const EvalTarget& first = plan.targets.front();
  for (std::size_t k = 1; k < plan.targets.size(); ++k) {
    const EvalTarget& t = plan.targets[k];
    for (std::size_t j = 0; j < k; ++j)
      if (fs::equivalent(plan.targets[j].checkpoint, t.checkpoint))
        throw std::invalid_argument("--checkpoint " + t.checkpoint.string() + ": given twice");
    bool same = t.config.env.kind == first.config.env.kind;
    if (same && first.config.env.kind == "market") try {
        same = market_config(t.config) == market_config(first.config);
      } catch (const std::invalid_argument&) {
        same = false;
      }
    if (!same)
      throw std::invalid_argument("--checkpoint " + t.checkpoint.string() + ": its environment (" +
                                  t.config_file.string() + ") differs from that of " + first.checkpoint.string() +
                                  " (" + first.config_file.string() +
                                  "): every checkpoint of one eval runs on the same environment and paths");
  }
  if (req.episodes < 1 || req.episodes > kMaxEvalEpisodes)
    throw std::invalid_argument("--episodes " + std::to_string(req.episodes) + ": must be in [1, " +
                                std::to_string(kMaxEvalEpisodes) + "]");
  if (req.cost_multipliers.empty()) throw std::invalid_argument("--cost-multipliers: empty; give at least one, e.g. 1");
  for (double m : req.cost_multipliers)
    if (!std::isfinite(m) || m < 0.0 || m > kMaxCostMultiplier)
      throw std::invalid_argument("--cost-multipliers: " + std::to_string(m) + " must be in [0, " +
                                  std::to_string(static_cast<int>(kMaxCostMultiplier)) + "]");
  if (first.config.env.kind != "market" && (req.cost_multipliers.size() != 1 || req.cost_multipliers[0] != 1.0))
    throw std::invalid_argument("--cost-multipliers: env.kind = \"" + first.config.env.kind +
                                "\" has no trading costs; allowed: 1 (the default)");
  if (first.config.env.kind == "market") {
    const rl::MarketConfig mc = market_config(first.config);
    const bool split_market = mc.process == rl::PriceProcess::replay && mc.split.given;
    plan.split = req.split ? *req.split : (split_market ? rl::Split::test : rl::Split::train);
    try {
      (void)rl::split_market(mc, plan.split);
    } catch (const rl::ConfigError& e) {
      throw std::invalid_argument(std::string("--split ") + rl::to_string(plan.split) + ": " + e.what());
    }
  } else if (req.split && *req.split != rl::Split::train) {
    throw std::invalid_argument(std::string("--split ") + rl::to_string(*req.split) + ": env.kind = \"" +
                                first.config.env.kind + "\" is not split by time; allowed: train");
  }
  plan.episodes = req.episodes;
  plan.seed = req.seed ? *req.seed : eval_seed(first.config.run.seed);
  plan.cost_multipliers = req.cost_multipliers;
  plan.report_dir = req.report_dir ? *req.report_dir : (parent ? *parent : first.checkpoint) / "eval";
  return plan;
}

namespace {

// Fees, half-spread and slippage times m (borrow is a financing rate, not a trading cost).
rl::MarketConfig scale_costs(rl::MarketConfig c, double m) {
  c.fee_bps *= m;
  c.half_spread_bps *= m;
  c.slippage *= m;
  return c;
}

// "test part: bars 3115-3650, 2019-12-02 to 2021-12-31": the bars a replay market's part reads
// (the first market.window of them are the observation's history).
std::string describe_bars(const rl::MarketConfig& mc) {
  const rl::OhlcvData d = rl::load_ohlcv(mc);
  auto date = [](std::int64_t seconds) {
    const std::time_t t = static_cast<std::time_t>(seconds);
    std::tm tm{};
    gmtime_r(&t, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%Y-%m-%d", &tm);
    return std::string(buf);
  };
  std::string s = std::string(rl::to_string(mc.replay_split)) + " part: bars " + std::to_string(d.first_bar) + "-" +
                  std::to_string(d.first_bar + d.bars - 1);
  if (!d.timestamps.empty()) s += ", " + date(d.timestamps.front()) + " to " + date(d.timestamps.back());
  return s;
}

// The market environment of an evaluation run (the one place that builds it): mc is already the
// evaluated part (rl::split_market); a replay market's bars are loaded here.
std::unique_ptr<rl::MarketEnv> make_eval_market(const rl::MarketConfig& mc, std::int64_t n) {
  return rl::make_market_env(mc, n);
}

// Device record of one run: the trace arrays for N environments and T steps.
struct TraceBuffers {
  gpu::DeviceBuffer<double> equity, cost, borrow, turnover;
  gpu::DeviceBuffer<float> weight;
  gpu::DeviceBuffer<std::int32_t> trades;
  gpu::DeviceBuffer<std::uint8_t> ended;
  rl::MarketTrace view;
  TraceBuffers(std::int64_t n, std::int64_t steps, int assets) {
    const auto te = static_cast<std::size_t>(n * steps);
    equity = gpu::DeviceBuffer<double>(te);
    cost = gpu::DeviceBuffer<double>(te);
    borrow = gpu::DeviceBuffer<double>(te);
    turnover = gpu::DeviceBuffer<double>(te);
    weight = gpu::DeviceBuffer<float>(te * static_cast<std::size_t>(assets));
    trades = gpu::DeviceBuffer<std::int32_t>(te);
    ended = gpu::DeviceBuffer<std::uint8_t>(te);
    view = {steps,           equity.data(), cost.data(),   borrow.data(),
            turnover.data(), weight.data(), trades.data(), ended.data()};
  }
};

// What one run leaves on the host.
struct EpisodesResult {
  rl::EpisodeStats stats{};
  std::vector<rl::EpisodeMetrics> metrics;  // markets: one per episode
  std::vector<double> curves;               // markets: (steps + 1, curve_columns)
};

// The device side of the metrics: scratch and the exits, allocated once per evaluation.
struct MetricsStage {
  rl::TraceShape shape;
  gpu::DeviceBuffer<std::byte> workspace;
  gpu::DeviceBuffer<rl::EpisodeMetrics> metrics;
  gpu::DeviceBuffer<double> curves;
  gpu::ExitArray<rl::EpisodeMetrics> metrics_exit;
  gpu::ExitArray<double> curves_exit;
  explicit MetricsStage(const rl::TraceShape& s)
      : shape(s),
        workspace(rl::eval_metrics_workspace_bytes(s)),
        metrics(static_cast<std::size_t>(s.episodes)),
        curves(static_cast<std::size_t>((s.steps + 1) * rl::curve_columns(s.assets))),
        metrics_exit(static_cast<std::size_t>(s.episodes)),
        curves_exit(static_cast<std::size_t>((s.steps + 1) * rl::curve_columns(s.assets))) {}
};

// N environments for `steps` steps acting through `policy`; with `stage`, the trace (already set
// on the environment) becomes metrics and curves against `reference`. Everything leaves the
// device through the exit module; the host waits once, at the end.
EpisodesResult run_episodes(rl::VecEnv& env, EvalPolicy& policy, std::int64_t steps, std::uint64_t seed, cudaStream_t s,
                            MetricsStage* stage = nullptr, const rl::MarketTrace* trace = nullptr,
                            const rl::MarketTrace* reference = nullptr) {
  const std::int64_t N = env.num_envs(), O = env.obs_dim();
  const rl::ActionSpace space = env.action_space();
  const auto NO = static_cast<std::size_t>(N * O);
  gpu::DeviceBuffer<float> obs(NO), next_obs(NO), reward(static_cast<std::size_t>(N));
  gpu::DeviceBuffer<std::uint8_t> term(static_cast<std::size_t>(N)), trunc(static_cast<std::size_t>(N));
  const auto NW = static_cast<std::size_t>(N * space.width());
  gpu::DeviceBuffer<std::int32_t> discrete(space.kind == rl::ActionSpace::Kind::discrete ? NW : 0);
  gpu::DeviceBuffer<float> continuous(space.kind == rl::ActionSpace::Kind::continuous ? NW : 0);
  const EvalActions actions{discrete.size() ? discrete.data() : nullptr,
                            continuous.size() ? continuous.data() : nullptr};
  env.reset(obs.data(), gpu::DType::f32, seed, s);
  for (std::int64_t t = 0; t < steps; ++t) {
    policy.act(actions, obs.data(), N, t, s);
    rl::StepOutputs out;
    out.obs = next_obs.data();
    out.reward = reward.data();
    out.terminated = term.data();
    out.truncated = trunc.data();
    out.obs_dtype = gpu::DType::f32;
    rl::ActionInput in;
    in.discrete = actions.discrete;
    in.continuous = actions.continuous;
    env.step(out, in, 1, s);
    std::swap(obs, next_obs);
  }
  gpu::ExitSlot<rl::EpisodeStats> exit;
  env.export_stats(exit, true, s);
  if (stage != nullptr) {
    rl::eval_episode_metrics(stage->metrics.data(), stage->workspace.data(), *trace, reference, stage->shape, s);
    rl::eval_mean_curves(stage->curves.data(), stage->metrics.data(), stage->workspace.data(), *trace, stage->shape, s);
    stage->metrics_exit.publish(stage->metrics.data(), s);
    stage->curves_exit.publish(stage->curves.data(), s);
  }
  FH_CHECK(cudaStreamSynchronize(s));  // evaluation is not a pipeline: the host waits once per run, here
  EpisodesResult r;
  r.stats = exit.wait();
  if (stage != nullptr) {
    r.metrics = stage->metrics_exit.wait();
    r.curves = stage->curves_exit.wait();
  }
  return r;
}

struct ColumnSpec {
  const char* key;
  const char* label;
  report::Unit unit;
};
// Labels and units of rl::EpisodeMetrics, in its field order.
constexpr ColumnSpec kColumns[] = {
    {"length", "episode length", report::Unit::steps},
    {"terminated", "ruined", report::Unit::fraction},
    {"total_return", "total return", report::Unit::fraction},
    {"annual_return", "annual return", report::Unit::fraction},
    {"annual_volatility", "annual volatility", report::Unit::fraction},
    {"sharpe", "Sharpe", report::Unit::number},
    {"sortino", "Sortino", report::Unit::number},
    {"calmar", "Calmar", report::Unit::number},
    {"max_drawdown", "max drawdown", report::Unit::fraction},
    {"max_drawdown_steps", "max drawdown steps", report::Unit::steps},
    {"turnover", "turnover", report::Unit::number},
    {"trades", "trades", report::Unit::count},
    {"hit_rate", "hit rate", report::Unit::fraction},
    {"avg_holding_steps", "avg holding steps", report::Unit::steps},
    {"var95", "VaR 95%", report::Unit::fraction},
    {"es95", "ES 95%", report::Unit::fraction},
    {"exposure", "exposure", report::Unit::number},
    {"corr_reference", "corr(buy & hold)", report::Unit::number},
    {"cost", "costs", report::Unit::fraction},
    {"borrow", "borrow", report::Unit::fraction},
};
static_assert(sizeof(kColumns) / sizeof(kColumns[0]) == rl::kEpisodeMetricCount, "one column per metric");

report::PolicyRun to_run(const std::string& policy, bool agent, int checkpoint, double m, const EpisodesResult& r,
                         std::int64_t steps, int assets) {
  report::PolicyRun run;
  run.policy = policy;
  run.agent = agent;
  run.checkpoint = checkpoint;
  run.cost_multiplier = m;
  run.episode_stats = rl::named_fields(r.stats);
  if (!r.metrics.empty()) {
    run.episodes.assign(rl::kEpisodeMetricCount, std::vector<double>(r.metrics.size()));
    for (std::size_t i = 0; i < r.metrics.size(); ++i) {
      const double* f = reinterpret_cast<const double*>(&r.metrics[i]);
      for (int k = 0; k < rl::kEpisodeMetricCount; ++k) run.episodes[k][i] = f[k];
    }
  }
  if (!r.curves.empty()) {
    const int C = rl::curve_columns(assets);
    report::Curves& c = run.curves;
    c.rows = steps + 1;
    c.assets = assets;
    c.equity.resize(static_cast<std::size_t>(c.rows));
    c.drawdown.resize(static_cast<std::size_t>(c.rows));
    c.weight.resize(static_cast<std::size_t>(c.rows * assets));
    for (std::int64_t s = 0; s < c.rows; ++s) {
      c.equity[s] = r.curves[s * C];
      c.drawdown[s] = r.curves[s * C + 1];
      for (int a = 0; a < assets; ++a) c.weight[s * assets + a] = r.curves[s * C + 2 + a];
    }
  }
  return run;
}

}  // namespace

EvalReport evaluate(const EvalPlan& plan) {
  FH_EXPECT(!plan.targets.empty(), "evaluate: the plan has no checkpoint (plan_eval makes one)");
  const RunConfig& cfg = plan.targets.front().config;
  gpu::require_device("foxhunt eval");
  FH_CHECK(cudaSetDevice(cfg.run.device));
  const std::int64_t N = plan.episodes;
  gpu::DeviceContext ctx(cfg.run.device, 1);
  const gpu::BlasLane lane = ctx.blas(0);
  const cudaStream_t s = lane.stream;

  EvalReport out;
  out.market = cfg.env.kind != "cartpole";
  out.episodes = N;
  out.seed = plan.seed;
  report::Report& rep = out.report;
  rep.environment = cfg.env.kind;
  rep.episodes = N;
  rep.seed = plan.seed;
  rep.cost_multipliers = plan.cost_multipliers;
  for (const EvalTarget& t : plan.targets)
    rep.checkpoints.push_back(
        {t.checkpoint.string(), t.config_file.string(), t.config.run.seed, t.config.learner.kind, t.agent});

  if (!out.market) {
    std::unique_ptr<rl::VecEnv> env = make_env(cfg, N);
    out.steps = rl::CartPoleConstants::max_episode_steps;
    rep.steps = out.steps;
    for (std::size_t k = 0; k < plan.targets.size(); ++k) {
      const EvalTarget& t = plan.targets[k];
      std::unique_ptr<EvalPolicy> policy = make_checkpoint_policy(t.config, t.config_file, t.checkpoint, *env, lane);
      const EpisodesResult r = run_episodes(*env, *policy, out.steps, plan.seed, s);
      out.rows.push_back({policy->name(), static_cast<int>(k), 1.0, r.stats});
      rep.runs.push_back(to_run(policy->name(), true, static_cast<int>(k), 1.0, r, out.steps, 0));
    }
    report::summarize(rep);
    return out;
  }

  const rl::MarketConfig mc = rl::split_market(market_config(cfg), plan.split);
  out.split = plan.split;
  out.steps = mc.episode_length;
  rep.steps = out.steps;
  rep.market = cfg.env.market;
  if (mc.process == rl::PriceProcess::replay) rep.data = describe_bars(mc);
  rep.assets = mc.assets;
  rep.periods_per_year = 1.0 / mc.dt;
  rep.initial_equity = mc.initial_cash;
  rep.reference_policy = "buy_and_hold";
  for (const ColumnSpec& c : kColumns) rep.columns.push_back({c.key, c.label, c.unit});
  const rl::TraceShape shape{N, out.steps, mc.assets, mc.initial_cash, 1.0 / mc.dt};
  MetricsStage stage(shape);
  TraceBuffers ref_trace(N, out.steps, mc.assets), run_trace(N, out.steps, mc.assets);

  // The policies of the checkpoints, built once (a load synchronizes) for every multiplier.
  std::vector<std::unique_ptr<EvalPolicy>> agents;
  {
    const std::unique_ptr<rl::MarketEnv> shape_env = make_eval_market(mc, N);
    for (const EvalTarget& t : plan.targets)
      agents.push_back(make_checkpoint_policy(t.config, t.config_file, t.checkpoint, *shape_env, lane));
  }
  std::vector<rl::BaselinePolicy> baselines = {rl::BaselinePolicy::buy_and_hold, rl::BaselinePolicy::flat};
  if (mc.process == rl::PriceProcess::ou) baselines.push_back(rl::BaselinePolicy::ou_oracle);
  if (mc.process == rl::PriceProcess::gbm && mc.regimes >= 2 && mc.jump_intensity == 0.0)
    baselines.push_back(rl::BaselinePolicy::regime_oracle);
  baselines.push_back(rl::BaselinePolicy::random);

  for (const double m : plan.cost_multipliers) {
    const rl::MarketConfig mcm = scale_costs(mc, m);
    // Buy-and-hold first: its trace is the reference every other run's correlation reads.
    EpisodesResult hold;
    {
      const std::unique_ptr<rl::MarketEnv> env = make_eval_market(mcm, N);
      env->set_trace(ref_trace.view);
      MarketBaselinePolicy policy(rl::BaselinePolicy::buy_and_hold, *env, plan.seed);
      hold = run_episodes(*env, policy, out.steps, plan.seed, s, &stage, &ref_trace.view, &ref_trace.view);
    }
    for (std::size_t k = 0; k < agents.size(); ++k) {
      const std::unique_ptr<rl::MarketEnv> env = make_eval_market(mcm, N);
      env->set_trace(run_trace.view);
      const EpisodesResult r =
          run_episodes(*env, *agents[k], out.steps, plan.seed, s, &stage, &run_trace.view, &ref_trace.view);
      out.rows.push_back({agents[k]->name(), static_cast<int>(k), m, r.stats});
      rep.runs.push_back(to_run(agents[k]->name(), true, static_cast<int>(k), m, r, out.steps, mc.assets));
    }
    for (const rl::BaselinePolicy kind : baselines) {
      EpisodesResult r;
      if (kind == rl::BaselinePolicy::buy_and_hold) {
        r = std::move(hold);
      } else {
        const std::unique_ptr<rl::MarketEnv> env = make_eval_market(mcm, N);
        env->set_trace(run_trace.view);
        MarketBaselinePolicy policy(kind, *env, plan.seed);
        r = run_episodes(*env, policy, out.steps, plan.seed, s, &stage, &run_trace.view, &ref_trace.view);
      }
      out.rows.push_back({baseline_name(kind), -1, m, r.stats});
      rep.runs.push_back(to_run(baseline_name(kind), false, -1, m, r, out.steps, mc.assets));
    }
  }
  report::summarize(rep);
  return out;
}

namespace {

std::string pct(double v) {
  char b[32];
  if (!std::isfinite(v)) return "n/a";
  std::snprintf(b, sizeof b, "%.3f%%", 100.0 * v);
  return b;
}
std::string num(double v, const char* f = "%.3f") {
  char b[32];
  if (!std::isfinite(v)) return "n/a";
  std::snprintf(b, sizeof b, f, v);
  return b;
}
std::string ci(const report::Interval& i, bool percent) {
  if (!std::isfinite(i.low) || !std::isfinite(i.high)) return "n/a";
  return "[" + (percent ? pct(i.low) : num(i.low)) + ", " + (percent ? pct(i.high) : num(i.high)) + "]";
}

}  // namespace

std::string format_eval_table(const EvalReport& r) {
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line, "%lld environments x %lld steps, eval seed %llu\n",
                static_cast<long long>(r.episodes), static_cast<long long>(r.steps),
                static_cast<unsigned long long>(r.seed));
  out += line;
  if (!r.report.data.empty()) out += r.report.data + "\n";
  const report::Report& rep = r.report;
  if (rep.checkpoints.size() > 1)
    for (std::size_t k = 0; k < rep.checkpoints.size(); ++k) {
      const report::CheckpointInfo& c = rep.checkpoints[k];
      out += "[" + std::to_string(k + 1) + "] " + (c.agent.empty() ? "" : "agent " + c.agent + " (" + c.learner + "): ") +
             c.path + "\n";
    }
  auto label = [&](std::size_t i) {
    const EvalRow& row = r.rows[i];
    if (rep.runs.size() == r.rows.size()) return report::run_label(rep, rep.runs[i]);  // runs[i] is rows[i]
    if (row.checkpoint < 0 || rep.checkpoints.size() <= 1) return row.policy;
    return row.policy + "[" + std::to_string(row.checkpoint + 1) + "]";
  };
  if (!r.market) {
    std::snprintf(line, sizeof line, "%-14s %9s %12s %12s %12s\n", "policy", "episodes", "mean return", "std return",
                  "mean length");
    out += line;
    for (std::size_t i = 0; i < r.rows.size(); ++i) {
      const rl::EpisodeStats& s = r.rows[i].stats;
      std::snprintf(line, sizeof line, "%-14s %9.0f %12.2f %12.2f %12.1f\n", label(i).c_str(), s.episodes,
                    s.mean_return, s.std_return, s.mean_length);
      out += line;
    }
    return out;
  }
  const int c_total = report::column_index(rep, "total_return"), c_sharpe = report::column_index(rep, "sharpe"),
            c_dd = report::column_index(rep, "max_drawdown"), c_sortino = report::column_index(rep, "sortino"),
            c_hit = report::column_index(rep, "hit_rate"), c_exp = report::column_index(rep, "exposure"),
            c_corr = report::column_index(rep, "corr_reference");
  auto metric = [&](std::size_t i, int c) -> const report::Interval* {
    if (i >= rep.runs.size() || c < 0 || c >= static_cast<int>(rep.runs[i].summary.size())) return nullptr;
    return &rep.runs[i].summary[c];
  };
  auto mean = [&](std::size_t i, int c) {
    const report::Interval* v = metric(i, c);
    return v ? v->mean : std::nan("");
  };
  std::vector<double> multipliers;
  for (const EvalRow& row : r.rows)
    if (std::find(multipliers.begin(), multipliers.end(), row.cost_multiplier) == multipliers.end())
      multipliers.push_back(row.cost_multiplier);
  const bool costs_line = multipliers.size() > 1 || (multipliers.size() == 1 && multipliers[0] != 1.0);
  for (const double m : multipliers) {
    if (costs_line) {
      std::snprintf(line, sizeof line, "costs x%g (fees, half-spread and slippage)\n", m);
      out += line;
    }
    std::snprintf(line, sizeof line, "%-14s %9s %12s %12s %10s %12s %12s %9s %9s %9s %10s\n", "policy", "episodes",
                  "mean return", "total return", "Sharpe", "max drawdown", "turnover", "Sortino", "hit rate",
                  "exposure", "corr(B&H)");
    out += line;
    for (std::size_t i = 0; i < r.rows.size(); ++i) {
      if (r.rows[i].cost_multiplier != m) continue;
      const rl::EpisodeStats& s = r.rows[i].stats;
      std::snprintf(line, sizeof line, "%-14s %9.0f %12.5g %11.3f%% %10.3f %11.3f%% %12.4g %9s %9s %9s %10s\n",
                    label(i).c_str(), s.episodes, s.mean_return, 100.0 * s.mean_total_return, s.mean_sharpe,
                    100.0 * s.mean_max_drawdown, s.mean_turnover, num(mean(i, c_sortino)).c_str(),
                    pct(mean(i, c_hit)).c_str(), num(mean(i, c_exp)).c_str(), num(mean(i, c_corr)).c_str());
      out += line;
    }
    if (!rep.runs.empty()) {
      std::snprintf(line, sizeof line, "%-14s %-26s %-20s %-26s\n", "95% CI", "total return", "Sharpe", "max drawdown");
      out += line;
      for (std::size_t i = 0; i < r.rows.size(); ++i) {
        if (r.rows[i].cost_multiplier != m) continue;
        const report::Interval none;
        const report::Interval* t = metric(i, c_total);
        const report::Interval* sh = metric(i, c_sharpe);
        const report::Interval* dd = metric(i, c_dd);
        std::snprintf(line, sizeof line, "%-14s %-26s %-20s %-26s\n", label(i).c_str(), ci(t ? *t : none, true).c_str(),
                      ci(sh ? *sh : none, false).c_str(), ci(dd ? *dd : none, true).c_str());
        out += line;
      }
    }
  }
  if (rep.checkpoints.size() > 1)
    for (const report::Aggregate& a : rep.aggregates) {
      if (c_total < 0 || c_sharpe < 0 || c_dd < 0 || a.values.empty()) break;
      if (a.values[0].size() < 2) continue;  // one checkpoint of its kind: no interval across
      std::snprintf(line, sizeof line,
                    "%s over %zu checkpoints, costs x%g (mean, Student-t 95%% CI): total return %s %s, Sharpe %s %s, "
                    "max drawdown %s %s\n",
                    (a.learner.empty() ? a.policy : a.policy + " (" + a.learner + ")").c_str(), a.values[0].size(), a.cost_multiplier, pct(a.across[c_total].mean).c_str(),
                    ci(a.across[c_total], true).c_str(), num(a.across[c_sharpe].mean).c_str(),
                    ci(a.across[c_sharpe], false).c_str(), pct(a.across[c_dd].mean).c_str(),
                    ci(a.across[c_dd], true).c_str());
      out += line;
    }
  out +=
      "(means over episodes; Sharpe annualized per episode; turnover = traded notional / equity, summed;\n"
      " 95% CI: percentile bootstrap over episodes; docs/eval.md defines every metric)\n";
  return out;
}

std::vector<fs::path> write_eval_report(const EvalReport& r, const fs::path& dir) {
  std::vector<fs::path> files = report::write_report(r.report, dir);
  const report::Report& rep = r.report;
  std::int64_t rows = 0;
  for (const report::PolicyRun& run : rep.runs) rows = std::max(rows, run.curves.rows);
  if (rows == 0) return files;
  TensorBoardWriter tb(dir / "tensorboard");
  const double wall = wall_time_now();
  for (std::int64_t t = 0; t < rows; ++t) {
    std::vector<std::pair<std::string, double>> scalars;
    for (const report::PolicyRun& run : rep.runs) {
      const report::Curves& c = run.curves;
      if (t >= c.rows) continue;
      char m[32];
      std::snprintf(m, sizeof m, "%g", run.cost_multiplier);
      const std::string prefix = "eval/" + report::run_label(rep, run) + "/costs_x" + m + "/";
      scalars.emplace_back(prefix + "equity", c.equity[t]);
      scalars.emplace_back(prefix + "drawdown", c.drawdown[t]);
      for (int a = 0; a < c.assets; ++a)
        scalars.emplace_back(prefix + "weight_" + std::to_string(a), c.weight[t * c.assets + a]);
    }
    tb.scalars(t, scalars, wall);
  }
  tb.flush();
  files.push_back(tb.path());
  return files;
}

}  // namespace foxhunt::actors
