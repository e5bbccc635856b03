#include "rl/envs/market_config.hpp"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>
#include <system_error>
#include <utility>

#include "config/reader.hpp"
#include "rl/envs/market_generator_config.hpp"
#include "rl/envs/ohlcv_csv.hpp"

namespace foxhunt::rl {
namespace {

namespace fs = std::filesystem;
using config::Range;

constexpr double kInf = std::numeric_limits<double>::infinity();

// The allowed values of every scalar key: the reader checks a file with them, check() a config
// built in code.
const Range kDt = Range::open_low(0.0, 1.0);
const Range kCash = Range::open(0.0, kInf);
const Range kMinEquity = Range::open_high(0.0, 1.0);
const Range kJumpIntensity = Range::open_high(0.0, kInf);
const Range kJumpMean = Range::closed(-5.0, 5.0);
const Range kJumpStddev = Range::closed(0.0, 5.0);
const Range kBps = Range::closed(0.0, 1000.0);
const Range kSlippage = Range::closed(0.0, 100.0);
const Range kLiquidity = Range::open(0.0, kInf);
const Range kLimit = Range::open_low(0.0, 100.0);
const Range kBorrow = Range::closed(0.0, 10.0);
const Range kSharpeEta = Range::open(0.0, 1.0);
const Range kPenalty = Range::open_high(0.0, kInf);
const Range kScale = Range::open_low(0.0, 1e6);
constexpr int kMaxEpisode = 100'000'000;
constexpr int kMaxExtra = 4096;

std::string fmt(double v) { return config::format_number(v); }

using Complain = std::function<void(const std::string& key, const std::string& what)>;

void check(const MarketConfig& c, const Complain& bad) {
  // One complaint per key: the first value out of range.
  auto in = [&](const std::string& key, double v, const Range& range) {
    if (!range.contains(v)) bad(key, "must be in " + range.text() + " (got " + fmt(v) + ")");
    return range.contains(v);
  };
  auto all_in = [&](const std::string& key, const std::vector<double>& vs, const Range& range) {
    for (double v : vs)
      if (!in(key, v, range)) return;
  };
  auto invalid = [&](const std::string& key, const std::string& msg) { bad(key, msg); };
  in("market.assets", c.assets, Range::closed(1, kMaxAssets));
  in("market.dt", c.dt, kDt);
  in("market.episode_length", c.episode_length, Range::closed(1, kMaxEpisode));
  in("market.window", c.window, Range::closed(1, kMaxWindow));
  in("market.initial_cash", c.initial_cash, kCash);
  in("market.min_equity", c.min_equity, kMinEquity);
  in("market.extra_features", c.extra_features, Range::closed(0, kMaxExtra));
  const int a = c.assets;
  const int r = c.regimes;
  if (!in("process.regimes", r, Range::closed(1, kMaxRegimes))) return;
  const bool replay = c.process == PriceProcess::replay;
  const bool generated = c.process == PriceProcess::generated;
  const std::string rp = r > 1 ? "process.regimes." : "process.";
  auto sized = [&](const std::vector<double>& v, const std::string& key, bool required) {
    if (v.empty() && !required) return;
    if (static_cast<int>(v.size()) != r * a)
      invalid(key,
              "must have " + std::to_string(r * a) + " values (regimes x assets), got " + std::to_string(v.size()));
  };
  if (!replay) {
    if (static_cast<int>(c.initial_price.size()) != a)
      invalid("process.initial_price", "must have " + std::to_string(a) + " values (one per asset), got " +
                                           std::to_string(c.initial_price.size()));
    all_in("process.initial_price", c.initial_price, Range::open(0.0, kInf));
    sized(c.sigma, rp + "sigma", true);
    // A generated market's sigma normalizes the model's returns: it cannot be 0.
    all_in(rp + "sigma", c.sigma, generated ? Range::open_low(0.0, 10.0) : Range::closed(0.0, 10.0));
    if (generated) {
      if (r != 1) invalid("process.regimes", "only allowed for process.kind = \"gbm\" or \"ou\"");
      if (!c.correlation.empty()) invalid("process.correlation", "only allowed for process.kind = \"gbm\" or \"ou\"");
      if (c.jump_intensity != 0.0) invalid("process.jumps.intensity", "only allowed for process.kind = \"gbm\" or \"ou\"");
      if (c.generator_checkpoint.empty())
        invalid("process.checkpoint", "required for process.kind = \"generated\": a diffusion pretrain checkpoint or run "
                                      "directory");
      if (!c.generator_sampler.empty() && c.generator_sampler != "ddpm" && c.generator_sampler != "ddim")
        invalid("process.sampler", "must be one of \"ddpm\" | \"ddim\" (got \"" + c.generator_sampler + "\")");
      in("process.sample_steps", c.generator_sample_steps, Range::closed(0, kMaxGeneratorSampleSteps));
      if (c.generator_eta > 1.0) invalid("process.eta", "must be in [0, 1] (got " + fmt(c.generator_eta) + ")");
    } else if (c.process == PriceProcess::gbm) {
      sized(c.mu, rp + "mu", true);
      all_in(rp + "mu", c.mu, Range::closed(-10.0, 10.0));
    } else {
      sized(c.kappa, rp + "kappa", true);
      all_in(rp + "kappa", c.kappa, Range::open_low(0.0, 1e4));
      sized(c.theta, rp + "theta", true);
      all_in(rp + "theta", c.theta, Range::closed(-10.0, 10.0));
    }
    if (static_cast<int>(c.transition.size()) != r * r) {
      invalid("process.regimes.transition", "must be a " + std::to_string(r) + " x " + std::to_string(r) + " matrix");
    } else {
      all_in("process.regimes.transition", c.transition, Range::closed(0.0, 1.0));
      for (int i = 0; i < r; ++i) {
        double row = 0;
        for (int j = 0; j < r; ++j) row += c.transition[i * r + j];
        if (std::abs(row - 1.0) > 1e-9) {
          invalid("process.regimes.transition", "row " + std::to_string(i) + " must sum to 1 (got " + fmt(row) + ")");
          break;
        }
      }
    }
    if (!c.correlation.empty()) {
      const auto correlation_problem = [&]() -> std::string {
        if (static_cast<int>(c.correlation.size()) != a * a)
          return "must be an " + std::to_string(a) + " x " + std::to_string(a) + " matrix";
        for (int i = 0; i < a; ++i)
          for (int j = 0; j < a; ++j) {
            const double v = c.correlation[i * a + j];
            if (i == j && v != 1.0) return "diagonal entries must be 1 (got " + fmt(v) + ")";
            if (std::abs(v - c.correlation[j * a + i]) > 1e-12) return "must be symmetric";
            if (v < -1.0 || v > 1.0) return "must be in [-1, 1] (got " + fmt(v) + ")";
          }
        try {
          correlation_cholesky(c);
        } catch (const ConfigError& e) {
          return std::string(e.what()).substr(std::string("process.correlation: ").size());
        }
        return {};
      }();
      if (!correlation_problem.empty()) invalid("process.correlation", correlation_problem);
    }
    if (in("process.jumps.intensity", c.jump_intensity, kJumpIntensity) && c.jump_intensity * c.dt > 1.0)
      invalid("process.jumps.intensity", "process.jumps.intensity * market.dt must be in [0, 1] (got " +
                                             fmt(c.jump_intensity * c.dt) + " jumps per step)");
    in("process.jumps.mean", c.jump_mean, kJumpMean);
    in("process.jumps.stddev", c.jump_stddev, kJumpStddev);
  }
  if (!generated && !c.generator_checkpoint.empty())
    invalid("process.checkpoint", "only allowed for process.kind = \"generated\"");
  if (replay) {
    if (c.files.empty()) invalid("replay.files", "must name at least one CSV file when process.kind = \"replay\"");
    if (c.layout == CsvLayout::per_asset && static_cast<int>(c.files.size()) != a)
      invalid("replay.files", "layout \"per_asset\" needs one file per asset (" + std::to_string(a) + "), got " +
                                  std::to_string(c.files.size()));
    if (c.layout == CsvLayout::long_format) {
      if (c.files.size() != 1) invalid("replay.files", "layout \"long\" needs exactly one file");
      if (static_cast<int>(c.symbols.size()) != a)
        invalid("replay.symbols", "layout \"long\" needs one symbol per asset (" + std::to_string(a) + "), got " +
                                      std::to_string(c.symbols.size()));
    }
  }
  in("execution.fee_bps", c.fee_bps, kBps);
  in("execution.half_spread_bps", c.half_spread_bps, kBps);
  in("execution.slippage", c.slippage, kSlippage);
  in("execution.liquidity", c.liquidity, kLiquidity);
  in("execution.position_limit", c.position_limit, kLimit);
  in("execution.leverage_cap", c.leverage_cap, kLimit);
  in("execution.borrow_rate", c.borrow_rate, kBorrow);
  if (c.action == ActionMode::discrete) {
    if (c.levels.size() < 2 || c.levels.size() > static_cast<std::size_t>(kMaxLevels))
      invalid("action.levels",
              "must have 2 to " + std::to_string(kMaxLevels) + " values, got " + std::to_string(c.levels.size()));
    all_in("action.levels", c.levels, Range::closed(-1.0, 1.0));
  }
  in("reward.sharpe_eta", c.sharpe_eta, kSharpeEta);
  in("reward.drawdown_penalty", c.drawdown_penalty, kPenalty);
  in("reward.turnover_penalty", c.turnover_penalty, kPenalty);
  in("reward.scale", c.reward_scale, kScale);
  if (c.price_level && (replay || generated))
    invalid("observation.price_level",
            "only allowed for process.kind = \"gbm\" or \"ou\" (a replay or a generated market has no model level)");
  if (c.split.given && !replay) invalid("split", "only allowed for process.kind = \"replay\"");
  if (c.replay_split != Split::train && !c.split.given)
    invalid("split", std::string("the environment replays the ") + to_string(c.replay_split) +
                         " part, but the market has no [split]");
  const SplitPoint &t = c.split.train_end, &v = c.split.validation_end;
  if (c.split.given && t.bar >= 0 && v.bar >= 0 && v.bar <= t.bar)
    invalid("split.validation_end", "must be after split.train_end (bar " + std::to_string(v.bar) +
                                        " is not after bar " + std::to_string(t.bar) + ")");
}

// A [split] boundary: an integer (a bar index >= 1), a date string as the CSV's timestamps are
// written, or a TOML date / date-time.
void read_split_point(config::Reader& r, const std::string& key, SplitPoint& point) {
  const toml::node* n = r.node(key);
  if (n == nullptr) return;
  const std::string allowed =
      "must be a bar index (an integer >= 1) or a date (\"YYYY-MM-DD[ HH:MM[:SS]]\" or a TOML date): the first bar "
      "past the part";
  std::string date;
  if (n->is_integer()) {
    const std::int64_t v = n->as_integer()->get();
    if (v < 1) return r.fail(key, allowed);
    point.bar = v;
    return;
  }
  if (n->is_string()) {
    date = n->as_string()->get();
  } else if (n->is_date() || n->is_date_time()) {
    const toml::date d = n->is_date() ? n->as_date()->get() : n->as_date_time()->get().date;
    char buf[48];
    if (n->is_date()) {
      std::snprintf(buf, sizeof buf, "%04u-%02u-%02u", unsigned{d.year}, unsigned{d.month}, unsigned{d.day});
    } else {
      const toml::time t = n->as_date_time()->get().time;
      std::snprintf(buf, sizeof buf, "%04u-%02u-%02u %02u:%02u:%02u", unsigned{d.year}, unsigned{d.month},
                    unsigned{d.day}, unsigned{t.hour}, unsigned{t.minute}, unsigned{t.second});
    }
    date = buf;
  } else {
    return r.fail(key, allowed);
  }
  std::int64_t seconds = 0;
  if (!parse_timestamp(date, seconds)) return r.fail(key, allowed);
  if (n->is_date_time())
    if (const auto& off = n->as_date_time()->get().offset) seconds -= std::int64_t{off->minutes} * 60;
  point.by_time = true;
  point.time = seconds;
}

// One pass over a market file: every key read (defaults where absent), every problem collected.
// `base` (a file's folder) resolves relative replay paths and checks that they exist.
void read_file(config::Reader& r, MarketConfig& cfg, const fs::path* base) {
  r.table("market");
  const std::size_t before = r.errors().size();
  r.integer("assets", cfg.assets, 1, kMaxAssets);
  const bool assets_ok = r.errors().size() == before;  // the per-asset sizes below depend on it
  r.number("dt", cfg.dt, kDt);
  r.integer("episode_length", cfg.episode_length, 1, kMaxEpisode);
  r.integer("window", cfg.window, 1, kMaxWindow);
  r.number("initial_cash", cfg.initial_cash, kCash);
  r.number("min_equity", cfg.min_equity, kMinEquity);
  r.integer("extra_features", cfg.extra_features, 0, kMaxExtra);
  const std::size_t a = static_cast<std::size_t>(cfg.assets);

  const bool has_process = r.table("process", true, "kind = \"gbm\" | \"ou\" | \"replay\" | \"generated\"");
  if (has_process) r.require("kind", "must be one of \"gbm\" | \"ou\" | \"replay\" | \"generated\"");
  r.choice("kind", cfg.process,
           {{"gbm", PriceProcess::gbm},
            {"ou", PriceProcess::ou},
            {"replay", PriceProcess::replay},
            {"generated", PriceProcess::generated}});
  for (const char* k :
       {"initial_price", "mu", "sigma", "kappa", "theta", "correlation", "checkpoint", "sampler", "sample_steps", "eta"})
    r.declare(k);
  const bool ou = cfg.process == PriceProcess::ou;
  const bool gbm = cfg.process == PriceProcess::gbm;
  const bool replay = cfg.process == PriceProcess::replay;
  const bool generated = cfg.process == PriceProcess::generated;
  auto only_for = [&](const char* key, bool allowed, const char* kinds) {
    if (!allowed && r.given(key)) r.fail(key, std::string("only allowed for process.kind = ") + kinds);
  };
  only_for("process.mu", gbm, "\"gbm\"");
  only_for("process.kappa", ou, "\"ou\"");
  only_for("process.theta", ou, "\"ou\"");
  for (const char* k : {"process.sigma", "process.initial_price"}) only_for(k, !replay, "\"gbm\", \"ou\" or \"generated\"");
  for (const char* k : {"process.correlation", "process.jumps", "process.regimes"})
    only_for(k, !replay && !generated, "\"gbm\" or \"ou\"");
  for (const char* k : {"process.checkpoint", "process.sampler", "process.sample_steps", "process.eta"})
    only_for(k, generated, "\"generated\"");
  if (generated) {
    if (r.given("process.checkpoint")) {
      r.text("checkpoint", cfg.generator_checkpoint);
      if (base != nullptr && !cfg.generator_checkpoint.empty()) {
        fs::path p(cfg.generator_checkpoint);
        if (p.is_relative()) p = (*base / p).lexically_normal();
        cfg.generator_checkpoint = p.string();
      }
    } else {
      r.require("checkpoint", "a diffusion pretrain checkpoint or run directory, relative to this file");
    }
    r.choice("sampler", cfg.generator_sampler, {"ddpm", "ddim"});
    r.integer("sample_steps", cfg.generator_sample_steps, 1, kMaxGeneratorSampleSteps);
    r.number("eta", cfg.generator_eta, Range::closed(0.0, 1.0));
  }
  const bool regimes = r.given("process.regimes");
  if (has_process && !replay && assets_ok) {
    if (r.given("process.initial_price"))
      r.numbers("initial_price", cfg.initial_price, a, true);
    else
      r.require("initial_price", "a number or one per asset, > 0");
    r.matrix("correlation", cfg.correlation, a, a, "one per asset");
    if (!regimes) {
      cfg.regimes = 1;
      cfg.transition = {1.0};
      if (r.given("process.sigma"))
        r.numbers("sigma", cfg.sigma, a, true);
      else
        r.require("sigma", "annual volatility, a number or one per asset, >= 0");
      if (gbm) {
        cfg.mu.assign(a, 0.0);
        r.numbers("mu", cfg.mu, a, true);
      }
      if (ou) {
        if (r.given("process.kappa"))
          r.numbers("kappa", cfg.kappa, a, true);
        else
          r.require("kappa", "mean-reversion speed per year, > 0");
        cfg.theta.assign(a, 0.0);
        r.numbers("theta", cfg.theta, a, true);
      }
    }
  }

  r.table("process.jumps");
  r.number("intensity", cfg.jump_intensity, kJumpIntensity);
  r.number("mean", cfg.jump_mean, kJumpMean);
  r.number("stddev", cfg.jump_stddev, kJumpStddev);

  const bool has_regimes = r.table("process.regimes");
  for (const char* k : {"transition", "mu", "sigma", "kappa", "theta"}) r.declare(k);
  if (has_regimes && !replay && !generated && assets_ok) {
    for (const char* k : {"mu", "sigma", "kappa", "theta"})
      if (r.given(std::string("process.") + k))
        r.fail(std::string("process.") + k,
               std::string("not allowed with [process.regimes]: give process.regimes.") + k + " per regime");
    only_for("process.regimes.mu", gbm, "\"gbm\"");
    only_for("process.regimes.kappa", ou, "\"ou\"");
    only_for("process.regimes.theta", ou, "\"ou\"");
    const toml::node* tn = r.node("process.regimes.transition");
    const std::size_t rows = tn != nullptr && tn->is_array() ? tn->as_array()->size() : 0;
    if (tn == nullptr) {
      r.require("transition", "an R x R list of per-step probabilities, 2 <= R <= 4");
    } else if (rows < 2 || rows > static_cast<std::size_t>(kMaxRegimes)) {
      r.fail("process.regimes.transition",
             "must be a list of 2 to " + std::to_string(kMaxRegimes) + " rows (one per regime) of as many numbers");
    } else {
      cfg.regimes = static_cast<int>(rows);
      r.matrix("transition", cfg.transition, rows, rows, "one per regime");
      if (r.given("process.regimes.sigma"))
        r.matrix("sigma", cfg.sigma, rows, a, "one per regime");
      else
        r.require("sigma", "one row per regime");
      if (gbm) {
        cfg.mu.assign(rows * a, 0.0);
        r.matrix("mu", cfg.mu, rows, a, "one per regime");
      }
      if (ou) {
        if (r.given("process.regimes.kappa"))
          r.matrix("kappa", cfg.kappa, rows, a, "one per regime");
        else
          r.require("kappa", "one row per regime, > 0");
        cfg.theta.assign(rows * a, 0.0);
        r.matrix("theta", cfg.theta, rows, a, "one per regime");
      }
    }
  }

  r.table("execution");
  r.number("fee_bps", cfg.fee_bps, kBps);
  r.number("half_spread_bps", cfg.half_spread_bps, kBps);
  r.number("slippage", cfg.slippage, kSlippage);
  r.number("liquidity", cfg.liquidity, kLiquidity);
  r.number("position_limit", cfg.position_limit, kLimit);
  r.number("leverage_cap", cfg.leverage_cap, kLimit);
  r.number("borrow_rate", cfg.borrow_rate, kBorrow);

  r.table("action");
  r.choice("kind", cfg.action, {{"discrete", ActionMode::discrete}, {"continuous", ActionMode::continuous}});
  r.declare("levels");
  if (const toml::node* n = r.node("action.levels")) {
    if (cfg.action != ActionMode::discrete)
      r.fail("action.levels", "only allowed for action.kind = \"discrete\"");
    else if (!n->is_array())
      r.fail("action.levels", "must be a list of 2 to " + std::to_string(kMaxLevels) + " numbers in [-1, 1]");
    else
      r.numbers("levels", cfg.levels, n->as_array()->size(), false);  // count and range: check()
  }

  r.table("reward");
  r.choice("kind", cfg.reward,
           {{"pnl", RewardKind::pnl},
            {"log_return", RewardKind::log_return},
            {"differential_sharpe", RewardKind::differential_sharpe}});
  r.number("sharpe_eta", cfg.sharpe_eta, kSharpeEta);
  r.number("drawdown_penalty", cfg.drawdown_penalty, kPenalty);
  r.number("turnover_penalty", cfg.turnover_penalty, kPenalty);
  r.number("scale", cfg.reward_scale, kScale);

  r.table("observation");
  r.boolean("price_level", cfg.price_level);

  const bool has_replay = r.table("replay", replay && has_process, "files = [...], layout = \"per_asset\" | \"long\"");
  for (const char* k : {"files", "layout", "symbols"}) r.declare(k);
  if (has_replay && !replay) {
    r.fail("replay", "only allowed for process.kind = \"replay\"");
  } else if (has_replay) {
    r.choice("layout", cfg.layout, {{"per_asset", CsvLayout::per_asset}, {"long", CsvLayout::long_format}});
    if (r.given("replay.files"))
      r.strings("files", cfg.files);
    else
      r.require("files", "a CSV file per asset (layout \"per_asset\") or one long file");
    r.strings("symbols", cfg.symbols);
    if (base != nullptr)
      for (auto& f : cfg.files) {
        fs::path p(f);
        if (p.is_relative()) p = (*base / p).lexically_normal();
        f = p.string();
        std::error_code ec;
        const fs::file_status st = fs::status(p, ec);
        if (ec == std::errc::too_many_symbolic_link_levels)
          r.fail("replay.files", p.string() + " is a symlink loop");
        else if (!fs::exists(st))
          r.fail("replay.files", p.string() + " does not exist (paths are relative to this file)");
        else if (!fs::is_regular_file(st))
          r.fail("replay.files", p.string() + " is not a regular file");
      }
  }

  const bool has_split = r.table("split");
  for (const char* k : {"train_end", "validation_end"}) r.declare(k);
  if (has_split && !replay) {
    r.fail("split", "only allowed for process.kind = \"replay\" (the bars of a history, split by time)");
  } else if (has_split) {
    cfg.split.given = true;
    r.require("train_end", "a bar index or a date (YYYY-MM-DD): the first bar past the train part");
    read_split_point(r, "split.train_end", cfg.split.train_end);
    read_split_point(r, "split.validation_end", cfg.split.validation_end);
  }

  // Ranges of lists, sizes and relations; a key already reported is not reported twice.
  const auto complain = [&](const std::string& key, const std::string& what) {
    if (!r.has_error(key)) r.fail(key, what);
  };
  if (assets_ok) check(cfg, complain);

  // A generated market's model: read from its checkpoint (base set: a file) and held against the
  // market, once the keys it is compared with are sound.
  bool model_ok = base != nullptr && generated && assets_ok;
  for (const char* k : {"market.dt", "process.checkpoint", "process.sigma", "process.sampler", "process.sample_steps",
                        "process.eta"})
    model_ok = model_ok && !r.has_error(k);
  if (model_ok)
    for (const auto& [key, what] : generator_problems(cfg, nullptr)) complain(key, what);

  // A replay's bars: every CSV problem as `file:line` under replay.files, then [split] against
  // the data (dates resolved to bars, every part long enough for an episode).
  bool data_ok = base != nullptr && replay && has_replay && assets_ok;
  for (const char* k :
       {"market.window", "market.episode_length", "replay.files", "replay.layout", "replay.symbols", "split"})
    data_ok = data_ok && !r.has_error(k);
  if (data_ok) {
    try {
      const OhlcvData data = load_ohlcv_all(cfg);
      // A missing or bad boundary is reported above.
      if (!cfg.split.given || (cfg.split.train_end.set() && !r.has_error("split.validation_end"))) {
        MarketConfig resolved;
        check_split(cfg, data.timestamps, complain, &resolved);
        cfg.split = resolved.split;
      }
    } catch (const CsvError& e) {
      r.fail("replay.files", e.what());
    }
  }
}

MarketConfig read(const std::string& text, const std::string& source, const fs::path* base) {
  config::Reader r(text, source);
  MarketConfig cfg;
  read_file(r, cfg, base);
  try {
    r.finish();
  } catch (const config::Error& e) {
    throw ConfigError(source, e.errors());
  }
  return cfg;
}

}  // namespace

const char* to_string(PriceProcess p) {
  switch (p) {
    case PriceProcess::gbm:
      return "gbm";
    case PriceProcess::ou:
      return "ou";
    case PriceProcess::replay:
      return "replay";
    case PriceProcess::generated:
      return "generated";
  }
  return "?";
}
const char* to_string(Split s) {
  switch (s) {
    case Split::train:
      return "train";
    case Split::validation:
      return "validation";
    case Split::test:
      return "test";
  }
  return "?";
}

Split parse_split(const std::string& name) {
  for (Split s : {Split::train, Split::validation, Split::test})
    if (name == to_string(s)) return s;
  throw std::invalid_argument("split \"" + name + "\": must be one of train | validation | test");
}

MarketConfig split_market(const MarketConfig& c, Split which) {
  if (which != Split::train) {
    if (c.process != PriceProcess::replay)
      throw ConfigError(std::string("split: a ") + to_string(c.process) + " market has no " + to_string(which) +
                        " part (only replay markets are split by time)");
    if (!c.split.given)
      throw ConfigError(std::string("split: the market has no [split], so no ") + to_string(which) +
                        " part (add [split] train_end = ... to the market config)");
    if (which == Split::validation && !c.split.has_validation())
      throw ConfigError("split.validation_end: the market's [split] has no validation part (give validation_end)");
  }
  MarketConfig out = c;
  out.replay_split = which;
  return out;
}

const char* to_string(ActionMode m) { return m == ActionMode::discrete ? "discrete" : "continuous"; }
const char* to_string(RewardKind k) {
  switch (k) {
    case RewardKind::pnl:
      return "pnl";
    case RewardKind::log_return:
      return "log_return";
    case RewardKind::differential_sharpe:
      return "differential_sharpe";
  }
  return "?";
}

std::vector<double> correlation_cholesky(const MarketConfig& config) {
  const int n = config.assets;
  std::vector<double> l(static_cast<std::size_t>(n * n), 0.0);
  if (config.correlation.empty()) {
    for (int a = 0; a < n; ++a) l[a * n + a] = 1.0;
    return l;
  }
  const auto& m = config.correlation;
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j <= i; ++j) {
      double s = m[i * n + j];
      for (int k = 0; k < j; ++k) s -= l[i * n + k] * l[j * n + k];
      if (i == j) {
        if (!(s > 1e-12))
          throw ConfigError("process.correlation: must be positive definite (Cholesky pivot " + fmt(s) + " at row " +
                            std::to_string(i) + ")");
        l[i * n + i] = std::sqrt(s);
      } else {
        l[i * n + j] = s / l[j * n + j];
      }
    }
  }
  return l;
}

std::vector<double> regime_stationary(const MarketConfig& config) {
  const int r = config.regimes;
  std::vector<double> pi(static_cast<std::size_t>(r), 1.0 / r);
  if (r == 1) return pi;
  // Power iteration on pi P (the chain is validated row-stochastic); converges for any
  // irreducible aperiodic chain; for a periodic one the average of two iterates is stationary.
  for (int it = 0; it < 100000; ++it) {
    std::vector<double> next(static_cast<std::size_t>(r), 0.0);
    for (int i = 0; i < r; ++i)
      for (int j = 0; j < r; ++j) next[j] += pi[i] * config.transition[i * r + j];
    double diff = 0;
    for (int j = 0; j < r; ++j) {
      next[j] = 0.5 * (next[j] + pi[j]);  // lazy chain: same stationary law, never periodic
      diff += std::abs(next[j] - pi[j]);
    }
    pi = next;
    if (diff < 1e-15) break;
  }
  return pi;
}

void validate(const MarketConfig& c) {
  std::vector<std::string> problems;
  check(c, [&](const std::string& key, const std::string& what) { problems.push_back(key + ": " + what); });
  if (!problems.empty()) throw ConfigError("market config", problems);
}

std::vector<std::string> market_config_keys() {
  config::Reader r("", "keys");
  MarketConfig cfg;
  read_file(r, cfg, nullptr);
  return r.accepted_keys();
}

MarketConfig parse_market_config(const std::string& toml_text, const std::string& source) {
  return read(toml_text, source, nullptr);
}

MarketConfig load_market_config(const std::filesystem::path& file) {
  std::error_code ec;
  if (fs::is_directory(file, ec)) throw ConfigError(file.string() + ": is a directory, not a market config file");
  std::ifstream in(file, std::ios::binary);
  if (!in) throw ConfigError(file.string() + ": cannot open the file");
  std::ostringstream text;
  text << in.rdbuf();
  const fs::path base = file.parent_path();
  return read(text.str(), file.string(), &base);
}

}  // namespace foxhunt::rl
