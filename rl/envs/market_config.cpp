#include "rl/envs/market_config.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <sstream>
#include <string_view>
#include <utility>

#include <toml++/toml.h>

namespace foxhunt::rl {
namespace {

// ---- reading TOML nodes, with the key path and line in every message ------------------------

struct Ctx {
  std::string source;
};

std::string fmt(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

[[noreturn]] void fail(const Ctx& c, const toml::node* n, const std::string& key, const std::string& msg) {
  std::ostringstream s;
  s << c.source;
  if (n != nullptr && n->source().begin.line > 0) s << ':' << n->source().begin.line;
  s << ": " << key << ": " << msg;
  throw ConfigError(s.str());
}

std::string join(std::initializer_list<std::string_view> names) {
  std::string out;
  for (auto n : names) out += (out.empty() ? "" : ", ") + std::string(n);
  return out;
}

void check_keys(const Ctx& c, const toml::table& t, const std::string& path,
                std::initializer_list<std::string_view> allowed) {
  for (auto&& [k, v] : t) {
    const std::string_view key = k.str();
    if (std::find(allowed.begin(), allowed.end(), key) == allowed.end())
      fail(c, &v, path.empty() ? std::string(key) : path + "." + std::string(key),
           "unknown key; allowed here: " + join(allowed));
  }
}

const toml::table* table_at(const Ctx& c, const toml::table& parent, std::string_view key, const std::string& path) {
  const toml::node* n = parent.get(key);
  if (n == nullptr) return nullptr;
  if (!n->is_table()) fail(c, n, path, "must be a table");
  return n->as_table();
}

double number_of(const Ctx& c, const toml::node& n, const std::string& path) {
  if (!n.is_number()) fail(c, &n, path, "must be a number");
  const double v = n.is_integer() ? static_cast<double>(n.as_integer()->get()) : n.as_floating_point()->get();
  if (!std::isfinite(v)) fail(c, &n, path, "must be a finite number (got " + fmt(v) + ")");
  return v;
}

bool read_number(const Ctx& c, const toml::table& t, std::string_view key, const std::string& path, double& out) {
  const toml::node* n = t.get(key);
  if (n == nullptr) return false;
  out = number_of(c, *n, path);
  return true;
}

bool read_int(const Ctx& c, const toml::table& t, std::string_view key, const std::string& path, int& out) {
  const toml::node* n = t.get(key);
  if (n == nullptr) return false;
  if (!n->is_integer()) fail(c, n, path, "must be an integer");
  const std::int64_t v = n->as_integer()->get();
  if (v < -(std::int64_t{1} << 30) || v > (std::int64_t{1} << 30))
    fail(c, n, path, "integer out of range (got " + std::to_string(v) + ")");
  out = static_cast<int>(v);
  return true;
}

bool read_bool(const Ctx& c, const toml::table& t, std::string_view key, const std::string& path, bool& out) {
  const toml::node* n = t.get(key);
  if (n == nullptr) return false;
  if (!n->is_boolean()) fail(c, n, path, "must be a boolean, true or false");
  out = n->as_boolean()->get();
  return true;
}

template <class E>
bool read_enum(const Ctx& c, const toml::table& t, std::string_view key, const std::string& path, E& out,
               std::initializer_list<std::pair<std::string_view, E>> choices) {
  const toml::node* n = t.get(key);
  if (n == nullptr) return false;
  std::string allowed;
  for (const auto& [name, value] : choices) allowed += (allowed.empty() ? "\"" : ", \"") + std::string(name) + "\"";
  if (!n->is_string()) fail(c, n, path, "must be a string, one of " + allowed);
  const std::string& s = n->as_string()->get();
  for (const auto& [name, value] : choices)
    if (s == name) {
      out = value;
      return true;
    }
  fail(c, n, path, "must be one of " + allowed + " (got \"" + s + "\")");
}

// A number (broadcast to `count` values) or an array of exactly `count` numbers.
void vector_of(const Ctx& c, const toml::node& n, const std::string& path, int count, std::vector<double>& out) {
  if (n.is_number()) {
    out.assign(static_cast<std::size_t>(count), number_of(c, n, path));
    return;
  }
  if (!n.is_array()) fail(c, &n, path, "must be a number or an array of " + std::to_string(count) + " numbers");
  const toml::array& a = *n.as_array();
  if (static_cast<int>(a.size()) != count)
    fail(c, &n, path, "must have " + std::to_string(count) + " values, got " + std::to_string(a.size()));
  out.clear();
  for (std::size_t k = 0; k < a.size(); ++k) out.push_back(number_of(c, a[k], path + "[" + std::to_string(k) + "]"));
}

bool read_vector(const Ctx& c, const toml::table& t, std::string_view key, const std::string& path, int count,
                 std::vector<double>& out) {
  const toml::node* n = t.get(key);
  if (n == nullptr) return false;
  vector_of(c, *n, path, count, out);
  return true;
}

// An array of `rows` entries, each a number (broadcast over `cols`) or an array of `cols` numbers.
bool read_matrix(const Ctx& c, const toml::table& t, std::string_view key, const std::string& path, int rows, int cols,
                 const char* what, std::vector<double>& out) {
  const toml::node* n = t.get(key);
  if (n == nullptr) return false;
  const std::string shape = "an array of " + std::to_string(rows) + " rows (" + what + "), each a number or " +
                            std::to_string(cols) + " numbers";
  if (!n->is_array()) fail(c, n, path, "must be " + shape);
  const toml::array& a = *n->as_array();
  if (static_cast<int>(a.size()) != rows)
    fail(c, n, path, "must be " + shape + "; got " + std::to_string(a.size()) + " rows");
  out.clear();
  for (int r = 0; r < rows; ++r) {
    std::vector<double> row;
    vector_of(c, a[static_cast<std::size_t>(r)], path + "[" + std::to_string(r) + "]", cols, row);
    out.insert(out.end(), row.begin(), row.end());
  }
  return true;
}

bool read_strings(const Ctx& c, const toml::table& t, std::string_view key, const std::string& path,
                  std::vector<std::string>& out) {
  const toml::node* n = t.get(key);
  if (n == nullptr) return false;
  if (n->is_string()) {
    out = {n->as_string()->get()};
    return true;
  }
  if (!n->is_array()) fail(c, n, path, "must be a string or an array of strings");
  out.clear();
  for (const auto& e : *n->as_array()) {
    if (!e.is_string()) fail(c, &e, path, "must be an array of strings");
    out.push_back(e.as_string()->get());
  }
  return true;
}

// ---- validation messages -------------------------------------------------------------------

[[noreturn]] void invalid(const std::string& key, const std::string& msg) { throw ConfigError(key + ": " + msg); }

void expect_range(const std::string& key, double v, double lo, double hi, bool lo_open, bool hi_open) {
  const bool ok = (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);
  if (!ok) {
    std::string range = std::string(lo_open ? "(" : "[") + fmt(lo) + ", " + (std::isinf(hi) ? "inf" : fmt(hi)) +
                        (hi_open || std::isinf(hi) ? ")" : "]");
    invalid(key, "must be in " + range + " (got " + fmt(v) + ")");
  }
}
constexpr double kInf = std::numeric_limits<double>::infinity();

}  // namespace

const char* to_string(PriceProcess p) {
  switch (p) {
    case PriceProcess::gbm:
      return "gbm";
    case PriceProcess::ou:
      return "ou";
    case PriceProcess::replay:
      return "replay";
  }
  return "?";
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
          invalid("process.correlation",
                  "must be positive definite (Cholesky pivot " + fmt(s) + " at row " + std::to_string(i) + ")");
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
  expect_range("market.assets", c.assets, 1, kMaxAssets, false, false);
  expect_range("market.dt", c.dt, 0.0, 1.0, true, false);
  expect_range("market.episode_length", c.episode_length, 1, 1e8, false, false);
  expect_range("market.window", c.window, 1, kMaxWindow, false, false);
  expect_range("market.initial_cash", c.initial_cash, 0.0, kInf, true, true);
  expect_range("market.min_equity", c.min_equity, 0.0, 1.0, false, true);
  expect_range("market.extra_features", c.extra_features, 0, 4096, false, false);
  const int a = c.assets;
  const int r = c.regimes;
  expect_range("process.regimes", r, 1, kMaxRegimes, false, false);
  const bool replay = c.process == PriceProcess::replay;
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
    for (double p : c.initial_price) expect_range("process.initial_price", p, 0.0, kInf, true, true);
    sized(c.sigma, rp + "sigma", true);
    for (double s : c.sigma) expect_range(rp + "sigma", s, 0.0, 10.0, false, false);
    if (c.process == PriceProcess::gbm) {
      sized(c.mu, rp + "mu", true);
      for (double m : c.mu) expect_range(rp + "mu", m, -10.0, 10.0, false, false);
    } else {
      sized(c.kappa, rp + "kappa", true);
      for (double k : c.kappa) expect_range(rp + "kappa", k, 0.0, 1e4, true, false);
      sized(c.theta, rp + "theta", true);
      for (double t : c.theta) expect_range(rp + "theta", t, -10.0, 10.0, false, false);
    }
    if (static_cast<int>(c.transition.size()) != r * r)
      invalid("process.regimes.transition", "must be a " + std::to_string(r) + " x " + std::to_string(r) + " matrix");
    for (int i = 0; i < r; ++i) {
      double row = 0;
      for (int j = 0; j < r; ++j) {
        expect_range("process.regimes.transition", c.transition[i * r + j], 0.0, 1.0, false, false);
        row += c.transition[i * r + j];
      }
      if (std::abs(row - 1.0) > 1e-9)
        invalid("process.regimes.transition", "row " + std::to_string(i) + " must sum to 1 (got " + fmt(row) + ")");
    }
    if (!c.correlation.empty()) {
      if (static_cast<int>(c.correlation.size()) != a * a)
        invalid("process.correlation", "must be an " + std::to_string(a) + " x " + std::to_string(a) + " matrix");
      for (int i = 0; i < a; ++i)
        for (int j = 0; j < a; ++j) {
          const double v = c.correlation[i * a + j];
          if (i == j && v != 1.0) invalid("process.correlation", "diagonal entries must be 1 (got " + fmt(v) + ")");
          if (std::abs(v - c.correlation[j * a + i]) > 1e-12) invalid("process.correlation", "must be symmetric");
          expect_range("process.correlation", v, -1.0, 1.0, false, false);
        }
      correlation_cholesky(c);  // throws when not positive definite
    }
    expect_range("process.jumps.intensity", c.jump_intensity, 0.0, kInf, false, true);
    expect_range("process.jumps.intensity * market.dt", c.jump_intensity * c.dt, 0.0, 1.0, false, false);
    expect_range("process.jumps.mean", c.jump_mean, -5.0, 5.0, false, false);
    expect_range("process.jumps.stddev", c.jump_stddev, 0.0, 5.0, false, false);
  } else {
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
  expect_range("execution.fee_bps", c.fee_bps, 0.0, 1000.0, false, false);
  expect_range("execution.half_spread_bps", c.half_spread_bps, 0.0, 1000.0, false, false);
  expect_range("execution.slippage", c.slippage, 0.0, 100.0, false, false);
  expect_range("execution.liquidity", c.liquidity, 0.0, kInf, true, true);
  expect_range("execution.position_limit", c.position_limit, 0.0, 100.0, true, false);
  expect_range("execution.leverage_cap", c.leverage_cap, 0.0, 100.0, true, false);
  expect_range("execution.borrow_rate", c.borrow_rate, 0.0, 10.0, false, false);
  if (c.action == ActionMode::discrete) {
    if (c.levels.size() < 2 || c.levels.size() > static_cast<std::size_t>(kMaxLevels))
      invalid("action.levels",
              "must have 2 to " + std::to_string(kMaxLevels) + " values, got " + std::to_string(c.levels.size()));
    for (double l : c.levels) expect_range("action.levels", l, -1.0, 1.0, false, false);
  }
  expect_range("reward.sharpe_eta", c.sharpe_eta, 0.0, 1.0, true, true);
  expect_range("reward.drawdown_penalty", c.drawdown_penalty, 0.0, kInf, false, true);
  expect_range("reward.turnover_penalty", c.turnover_penalty, 0.0, kInf, false, true);
  expect_range("reward.scale", c.reward_scale, 0.0, 1e6, true, false);
  if (c.price_level && replay)
    invalid("observation.price_level",
            "only allowed for process.kind = \"gbm\" or \"ou\" (a replay has no model level)");
}

MarketConfig parse_market_config(const std::string& toml_text, const std::string& source) {
  const Ctx c{source};
  toml::table root;
  try {
    root = toml::parse(toml_text, source);
  } catch (const toml::parse_error& e) {
    std::ostringstream s;
    s << source << ':' << e.source().begin.line << ": TOML syntax error: " << e.description();
    throw ConfigError(s.str());
  }
  check_keys(c, root, "", {"market", "process", "execution", "action", "reward", "observation", "replay"});
  MarketConfig cfg;

  if (const toml::table* m = table_at(c, root, "market", "market")) {
    check_keys(c, *m, "market",
               {"assets", "dt", "episode_length", "window", "initial_cash", "min_equity", "extra_features"});
    read_int(c, *m, "assets", "market.assets", cfg.assets);
    read_number(c, *m, "dt", "market.dt", cfg.dt);
    read_int(c, *m, "episode_length", "market.episode_length", cfg.episode_length);
    read_int(c, *m, "window", "market.window", cfg.window);
    read_number(c, *m, "initial_cash", "market.initial_cash", cfg.initial_cash);
    read_number(c, *m, "min_equity", "market.min_equity", cfg.min_equity);
    read_int(c, *m, "extra_features", "market.extra_features", cfg.extra_features);
  }
  if (cfg.assets < 1 || cfg.assets > kMaxAssets)  // sizes below depend on it
    fail(c, root.get("market"), "market.assets",
         "must be in [1, " + std::to_string(kMaxAssets) + "] (got " + std::to_string(cfg.assets) + ")");
  const int a = cfg.assets;

  const toml::table* p = table_at(c, root, "process", "process");
  if (p == nullptr) fail(c, nullptr, "process", "missing table [process] (kind = \"gbm\" | \"ou\" | \"replay\")");
  check_keys(c, *p, "process",
             {"kind", "initial_price", "mu", "sigma", "kappa", "theta", "correlation", "jumps", "regimes"});
  if (!read_enum(c, *p, "kind", "process.kind", cfg.process,
                 {{"gbm", PriceProcess::gbm}, {"ou", PriceProcess::ou}, {"replay", PriceProcess::replay}}))
    fail(c, p, "process.kind", "missing; must be one of \"gbm\", \"ou\", \"replay\"");
  const bool ou = cfg.process == PriceProcess::ou;
  const bool gbm = cfg.process == PriceProcess::gbm;
  const bool replay = cfg.process == PriceProcess::replay;
  auto only_for = [&](const toml::table& t, std::string_view key, const std::string& path, bool allowed,
                      const char* kinds) {
    if (!allowed && t.get(key) != nullptr)
      fail(c, t.get(key), path, std::string("only allowed for process.kind = ") + kinds);
  };
  only_for(*p, "mu", "process.mu", gbm, "\"gbm\"");
  only_for(*p, "kappa", "process.kappa", ou, "\"ou\"");
  only_for(*p, "theta", "process.theta", ou, "\"ou\"");
  only_for(*p, "sigma", "process.sigma", !replay, "\"gbm\" or \"ou\"");
  only_for(*p, "initial_price", "process.initial_price", !replay, "\"gbm\" or \"ou\"");
  only_for(*p, "correlation", "process.correlation", !replay, "\"gbm\" or \"ou\"");
  only_for(*p, "jumps", "process.jumps", !replay, "\"gbm\" or \"ou\"");
  only_for(*p, "regimes", "process.regimes", !replay, "\"gbm\" or \"ou\"");

  if (!replay) {
    if (!read_vector(c, *p, "initial_price", "process.initial_price", a, cfg.initial_price))
      fail(c, p, "process.initial_price", "missing; a number or one per asset, > 0");
    if (const toml::node* n = p->get("correlation")) {
      if (!n->is_array()) fail(c, n, "process.correlation", "must be an array of " + std::to_string(a) + " arrays");
      read_matrix(c, *p, "correlation", "process.correlation", a, a, "one per asset", cfg.correlation);
    }
    if (const toml::table* j = table_at(c, *p, "jumps", "process.jumps")) {
      check_keys(c, *j, "process.jumps", {"intensity", "mean", "stddev"});
      read_number(c, *j, "intensity", "process.jumps.intensity", cfg.jump_intensity);
      read_number(c, *j, "mean", "process.jumps.mean", cfg.jump_mean);
      read_number(c, *j, "stddev", "process.jumps.stddev", cfg.jump_stddev);
    }
    if (const toml::table* rg = table_at(c, *p, "regimes", "process.regimes")) {
      check_keys(c, *rg, "process.regimes", {"transition", "mu", "sigma", "kappa", "theta"});
      const toml::node* tn = rg->get("transition");
      if (tn == nullptr || !tn->is_array() || tn->as_array()->empty())
        fail(c, tn ? tn : rg, "process.regimes.transition",
             "missing; an R x R array of per-step probabilities, 2 <= R <= 4");
      const int r = static_cast<int>(tn->as_array()->size());
      if (r < 2 || r > kMaxRegimes)
        fail(c, tn, "process.regimes.transition",
             "must have 2 to " + std::to_string(kMaxRegimes) + " rows (regimes), got " + std::to_string(r));
      cfg.regimes = r;
      std::vector<double> tr;
      read_matrix(c, *rg, "transition", "process.regimes.transition", r, r, "one per regime", tr);
      cfg.transition = tr;
      for (const char* key : {"mu", "sigma", "kappa", "theta"}) {
        const std::string top = std::string("process.") + key;
        if (p->get(key) != nullptr)
          fail(c, p->get(key), top,
               std::string("not allowed with [process.regimes]: give process.regimes.") + key + " per regime");
      }
      only_for(*rg, "mu", "process.regimes.mu", gbm, "\"gbm\"");
      only_for(*rg, "kappa", "process.regimes.kappa", ou, "\"ou\"");
      only_for(*rg, "theta", "process.regimes.theta", ou, "\"ou\"");
      if (!read_matrix(c, *rg, "sigma", "process.regimes.sigma", r, a, "one per regime", cfg.sigma))
        fail(c, rg, "process.regimes.sigma", "missing; one row per regime");
      if (gbm && !read_matrix(c, *rg, "mu", "process.regimes.mu", r, a, "one per regime", cfg.mu))
        cfg.mu.assign(static_cast<std::size_t>(r * a), 0.0);
      if (ou) {
        if (!read_matrix(c, *rg, "kappa", "process.regimes.kappa", r, a, "one per regime", cfg.kappa))
          fail(c, rg, "process.regimes.kappa", "missing; one row per regime, > 0");
        if (!read_matrix(c, *rg, "theta", "process.regimes.theta", r, a, "one per regime", cfg.theta))
          cfg.theta.assign(static_cast<std::size_t>(r * a), 0.0);
      }
    } else {
      cfg.regimes = 1;
      cfg.transition = {1.0};
      if (!read_vector(c, *p, "sigma", "process.sigma", a, cfg.sigma))
        fail(c, p, "process.sigma", "missing; annual volatility, a number or one per asset, >= 0");
      if (gbm && !read_vector(c, *p, "mu", "process.mu", a, cfg.mu)) cfg.mu.assign(static_cast<std::size_t>(a), 0.0);
      if (ou) {
        if (!read_vector(c, *p, "kappa", "process.kappa", a, cfg.kappa))
          fail(c, p, "process.kappa", "missing; mean-reversion speed per year, > 0");
        if (!read_vector(c, *p, "theta", "process.theta", a, cfg.theta))
          cfg.theta.assign(static_cast<std::size_t>(a), 0.0);
      }
    }
  }

  if (const toml::table* e = table_at(c, root, "execution", "execution")) {
    check_keys(
        c, *e, "execution",
        {"fee_bps", "half_spread_bps", "slippage", "liquidity", "position_limit", "leverage_cap", "borrow_rate"});
    read_number(c, *e, "fee_bps", "execution.fee_bps", cfg.fee_bps);
    read_number(c, *e, "half_spread_bps", "execution.half_spread_bps", cfg.half_spread_bps);
    read_number(c, *e, "slippage", "execution.slippage", cfg.slippage);
    read_number(c, *e, "liquidity", "execution.liquidity", cfg.liquidity);
    read_number(c, *e, "position_limit", "execution.position_limit", cfg.position_limit);
    read_number(c, *e, "leverage_cap", "execution.leverage_cap", cfg.leverage_cap);
    read_number(c, *e, "borrow_rate", "execution.borrow_rate", cfg.borrow_rate);
  }
  if (const toml::table* ac = table_at(c, root, "action", "action")) {
    check_keys(c, *ac, "action", {"kind", "levels"});
    read_enum(c, *ac, "kind", "action.kind", cfg.action,
              {{"discrete", ActionMode::discrete}, {"continuous", ActionMode::continuous}});
    if (const toml::node* n = ac->get("levels")) {
      if (cfg.action != ActionMode::discrete)
        fail(c, n, "action.levels", "only allowed for action.kind = \"discrete\"");
      if (!n->is_array()) fail(c, n, "action.levels", "must be an array of 2 to 9 numbers in [-1, 1]");
      cfg.levels.clear();
      for (const auto& v : *n->as_array()) cfg.levels.push_back(number_of(c, v, "action.levels"));
    }
  }
  if (const toml::table* rw = table_at(c, root, "reward", "reward")) {
    check_keys(c, *rw, "reward", {"kind", "sharpe_eta", "drawdown_penalty", "turnover_penalty", "scale"});
    read_enum(c, *rw, "kind", "reward.kind", cfg.reward,
              {{"pnl", RewardKind::pnl},
               {"log_return", RewardKind::log_return},
               {"differential_sharpe", RewardKind::differential_sharpe}});
    read_number(c, *rw, "sharpe_eta", "reward.sharpe_eta", cfg.sharpe_eta);
    read_number(c, *rw, "drawdown_penalty", "reward.drawdown_penalty", cfg.drawdown_penalty);
    read_number(c, *rw, "turnover_penalty", "reward.turnover_penalty", cfg.turnover_penalty);
    read_number(c, *rw, "scale", "reward.scale", cfg.reward_scale);
  }
  if (const toml::table* ob = table_at(c, root, "observation", "observation")) {
    check_keys(c, *ob, "observation", {"price_level"});
    read_bool(c, *ob, "price_level", "observation.price_level", cfg.price_level);
  }
  const toml::table* rp = table_at(c, root, "replay", "replay");
  if (rp != nullptr && !replay) fail(c, root.get("replay"), "replay", "only allowed for process.kind = \"replay\"");
  if (replay) {
    if (rp == nullptr)
      fail(c, nullptr, "replay", "missing table [replay] (files = [...], layout = \"per_asset\" | \"long\")");
    check_keys(c, *rp, "replay", {"files", "layout", "symbols"});
    read_enum(c, *rp, "layout", "replay.layout", cfg.layout,
              {{"per_asset", CsvLayout::per_asset}, {"long", CsvLayout::long_format}});
    if (!read_strings(c, *rp, "files", "replay.files", cfg.files))
      fail(c, rp, "replay.files", "missing; a CSV file per asset (layout \"per_asset\") or one long file");
    read_strings(c, *rp, "symbols", "replay.symbols", cfg.symbols);
  }

  try {
    validate(cfg);
  } catch (const ConfigError& e) {
    throw ConfigError(source + ": " + e.what());
  }
  return cfg;
}

MarketConfig load_market_config(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw ConfigError(file.string() + ": cannot open the file");
  std::ostringstream text;
  text << in.rdbuf();
  MarketConfig cfg = parse_market_config(text.str(), file.string());
  for (auto& f : cfg.files) {
    const std::filesystem::path p(f);
    if (p.is_relative()) f = (file.parent_path() / p).lexically_normal().string();
  }
  return cfg;
}

}  // namespace foxhunt::rl
