#include "pretrain/config.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <system_error>

#include "config/reader.hpp"
#include "config/text_file.hpp"
#include "pretrain/model_factory.hpp"

namespace foxhunt::pretrain {
namespace {

namespace fs = std::filesystem;
using config::Range;

constexpr std::int64_t kBig = std::int64_t{1} << 40;
constexpr const char* kSplitKeys[] = {"data.split.train", "data.split.validation", "data.split.test",
                                      "data.split.train_end", "data.split.validation_end"};

std::string quoted_list(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& k : v) s += (s.empty() ? "\"" : " | \"") + k + "\"";
  return s;
}

// task.quantiles: a list of 1..32 levels in (0, 1), strictly increasing.
void read_quantiles(config::Reader& r, PretrainConfig& c) {
  const toml::node* n = r.node("task.quantiles");
  std::size_t count = c.task.quantiles.size();
  if (n != nullptr && n->is_array()) count = n->as_array()->size();
  if (n != nullptr && (count < 1 || count > 32)) {
    r.declare("quantiles");
    r.fail("task.quantiles", "must be a list of 1 to 32 quantile levels in (0, 1), increasing");
    return;
  }
  r.numbers("quantiles", c.task.quantiles, count, false);
  if (r.has_error("task.quantiles")) return;
  bool ok = true;
  for (std::size_t i = 0; i < c.task.quantiles.size(); ++i) {
    const double q = c.task.quantiles[i];
    if (!(q > 0.0 && q < 1.0) || (i > 0 && !(q > c.task.quantiles[i - 1]))) ok = false;
  }
  if (!ok) r.fail("task.quantiles", "must be quantile levels in (0, 1), strictly increasing");
}

void read_betas(config::Reader& r, PretrainConfig& c) {
  r.numbers("betas", c.optim.betas, 2, false);
  if (r.has_error("optim.betas")) return;
  for (const double b : c.optim.betas)
    if (!(b >= 0.0 && b < 1.0)) {
      r.fail("optim.betas", "must be [beta1, beta2], each in [0, 1)");
      return;
    }
}

// One pass reads every field (defaults where absent) and checks the relations between keys.
// all_families: read every family's [model] keys (listing the keys).
void read_all(config::Reader& r, PretrainConfig& c, bool all_families) {
  const std::vector<std::string> kinds = model_kinds();
  if (r.table("model", true, "kind = " + quoted_list(kinds) + ", hidden, layers and the family's keys"))
    r.require("kind", "must be one of " + quoted_list(kinds));
  r.choice("kind", c.model.kind, kinds);
  r.integer("hidden", c.model.hidden, 1, 8192);
  r.integer("layers", c.model.layers, 1, 64);
  if (all_families)
    declare_all_family_keys(r);
  else
    read_family_keys(r, c.model.kind, c.model.family);

  if (r.table("data", true, "source = \"market\" | \"csv\", window, horizon"))
    r.require("source", "must be one of \"market\" | \"csv\"");
  r.choice("source", c.data.source, {"market", "csv"});
  r.path("market", c.data.market);
  r.strings("path", c.data.path);
  r.integer("window", c.data.window, 2, 4096);
  r.integer("horizon", c.data.horizon, 1, 256);
  r.integer("vol_horizon", c.data.vol_horizon, 1, 4096);
  const bool market = c.data.source == "market", csv = c.data.source == "csv";
  if (market && c.data.market.empty()) {
    if (r.given("data.market"))
      r.fail("data.market", "must name a market config file (e.g. \"../markets/ou_mean_reversion.toml\", relative to "
                            "this file)");
    else if (r.given("data.source"))
      r.require("market", "data.source = \"market\" needs a market config file (e.g. "
                          "\"../markets/ou_mean_reversion.toml\", relative to this file)");
  }
  if (csv && c.data.path.empty() && !r.has_error("data.path")) {
    if (r.given("data.path"))
      r.fail("data.path", "must name one CSV file per asset");
    else if (r.given("data.source"))
      r.require("path", "data.source = \"csv\" needs the CSV files of the bars, one per asset");
  }
  for (const auto& p : c.data.path)
    if (p.empty()) r.fail("data.path", "must not hold an empty file name");

  r.table("data.split");
  r.number("train", c.data.split.train, Range::open(0.0, 1.0));
  r.number("validation", c.data.split.validation, Range::open(0.0, 1.0));
  r.number("test", c.data.split.test, Range::closed(0.0, 1.0));
  r.integer("train_end", c.data.split.train_end, -1, kBig);
  r.integer("validation_end", c.data.split.validation_end, -1, kBig);
  const bool by_bar = c.data.split.train_end >= 0;

  if (r.table("task", true, "kind = \"returns\" | \"volatility\" | \"regime\" | \"direction\" | \"generate\""))
    r.require("kind", "must be one of \"returns\" | \"volatility\" | \"regime\" | \"direction\" | \"generate\"");
  r.choice("kind", c.task.kind, {"returns", "volatility", "regime", "direction", "generate"});
  r.choice("loss", c.task.loss, {"mse", "quantile"});
  read_quantiles(r, c);
  const bool regression = c.task.kind == "returns" || c.task.kind == "volatility";

  r.table("optim");
  r.number("lr", c.optim.lr, Range::open_low(0.0, 1.0));
  r.number("weight_decay", c.optim.weight_decay, Range::closed(0.0, 10.0));
  read_betas(r, c);
  r.number("eps", c.optim.eps, Range::closed(0.0, 1.0));
  r.integer("warmup_steps", c.optim.warmup_steps, 0, kBig);
  r.choice("decay", c.optim.decay, {"cosine", "linear", "none"});
  r.number("grad_clip", c.optim.grad_clip, Range::closed(0.0, 1e6));
  r.integer("batch", c.optim.batch, 1, 1 << 16);
  r.integer("steps", c.optim.steps, 1, kBig);
  r.choice("math", c.optim.math, {"fp32", "bf16"});

  r.table("run");
  r.plain_name("name", c.run.name);
  r.unsigned_integer("seed", c.run.seed);
  r.integer("device", c.run.device, 0, 63);
  r.integer("eval_every", c.run.eval_every, 1, kBig);
  r.integer("eval_windows", c.run.eval_windows, 1, 1 << 24);
  r.boolean("interpret", c.run.interpret);
  r.integer("baseline_fit_samples", c.run.baseline_fit_samples, 1, 1 << 26);
  r.integer("checkpoint_every", c.run.checkpoint_every, 0, kBig);
  r.integer("keep", c.run.keep, 0, 1'000'000);
  r.integer("log_every", c.run.log_every, 1, kBig);
  r.boolean("tensorboard", c.run.tensorboard);
  r.boolean("jsonl", c.run.jsonl);
  r.choice("level", c.run.level, {"trace", "debug", "info", "warn", "error"});

  // Relations between keys.
  r.relation(c.task.kind != "volatility" || c.task.loss == "mse", "task.loss", "task.kind",
             "realized-volatility regression trains on the mean squared error (\"mse\")");
  r.relation(c.task.kind != "regime" || market, "task.kind", "data.source",
             "regime labels exist only in simulated markets (data.source = \"market\")");
  const bool generative = c.model.kind == "diffusion";
  r.relation(generative == (c.task.kind == "generate"), "task.kind", "model.kind",
             "a diffusion model learns to generate windows (task.kind = \"generate\"), and only it does");
  r.relation(!c.run.interpret || c.model.kind == "tft", "run.interpret", "model.kind",
             "only the Temporal Fusion Transformer (\"tft\") has attention and variable selection weights to export");
  r.relation(c.optim.warmup_steps <= c.optim.steps, "optim.warmup_steps", "optim.steps",
             "the warm-up must fit in the run");
  if (csv && !by_bar)
    r.relation(c.data.split.train + c.data.split.validation + c.data.split.test <= 1.0 + 1e-9, "data.split.train",
               "data.split.validation", "train + validation + test must be <= 1 (fractions of the bars)");
  if (csv && by_bar) {
    if (!r.given("data.split.validation_end") && !r.has_error("data.split.train_end")) {
      r.table("data.split");
      r.require("validation_end", "data.split.train_end needs validation_end (the first bar of the test part)");
    }
    r.relation(c.data.split.validation_end < 0 || c.data.split.validation_end > c.data.split.train_end,
               "data.split.validation_end", "data.split.train_end", "must be > data.split.train_end");
  }
  // Keys that do nothing under the options chosen.
  r.no_effect("data.market", market, "data.source", "only data.source = \"market\" reads a market file");
  r.no_effect("data.path", csv, "data.source", "only data.source = \"csv\" reads CSV files");
  for (const char* k : kSplitKeys) r.no_effect(k, csv, "data.source", "a simulated market has no split");
  if (csv)
    for (const char* k : {"data.split.train", "data.split.validation", "data.split.test"})
      r.no_effect(k, !by_bar, "data.split.train_end", "the parts are given as bar indices");
  r.no_effect("data.vol_horizon", c.task.kind == "volatility", "task.kind", "the realized-volatility label's length");
  r.no_effect("data.horizon", c.task.kind == "returns", "task.kind", "the next returns a label holds");
  r.no_effect("task.loss", regression, "task.kind",
              c.task.kind == "generate" ? "generation trains on the epsilon-prediction loss"
                                        : "classification trains on its cross-entropy");
  r.no_effect("task.quantiles", c.task.kind == "returns" && c.task.loss == "quantile", "task.loss",
              "the quantile loss's levels");
  r.no_effect("optim.decay", c.optim.steps > c.optim.warmup_steps, "optim.warmup_steps",
              "no step follows the warm-up");
  r.no_effect("run.baseline_fit_samples", regression, "task.kind", "the linear baseline of the regression tasks");
}

// TOML text of one value.
std::string toml_number(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  std::string s = buf;
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}
std::string toml_string(const std::string& s) {
  std::string out = "\"";
  for (const char ch : s) {
    if (ch == '"' || ch == '\\') out += '\\';
    out += ch;
  }
  return out + "\"";
}
std::string toml_bool(bool b) { return b ? "true" : "false"; }

fs::path absolute_of(const std::string& p, const fs::path& base) {
  fs::path f(p);
  if (f.is_relative()) f = base / f;
  std::error_code ec;
  fs::path abs = fs::absolute(f, ec);
  if (ec) abs = f;
  return abs.lexically_normal();
}

// Why `p` is not a readable regular file ("" when it is).
std::string file_problem(const fs::path& p) {
  std::error_code ec;
  const fs::file_status st = fs::status(p, ec);
  if (ec == std::errc::too_many_symbolic_link_levels) return "is a symlink loop";
  if (ec && ec != std::errc::no_such_file_or_directory) return "cannot be read (" + ec.message() + ")";
  if (!fs::exists(st)) return "does not exist";
  if (fs::is_directory(st)) return "is a directory";
  if (!fs::is_regular_file(st)) return "is not a regular file";
  return "";
}

// data.market / data.path resolved against the config's folder, opened and checked.
void read_files(config::Reader& r, PretrainConfig& c, const fs::path& base) {
  if (c.data.source == "market" && !c.data.market.empty() && !r.has_error("data.market")) {
    const fs::path abs = absolute_of(c.data.market, base);
    if (const std::string why = file_problem(abs); !why.empty()) {
      r.fail("data.market", abs.string() + " " + why + " (data.market names a market config file, relative to this file)");
      return;
    }
    rl::MarketConfig m;
    try {
      m = rl::load_market_config(abs);
    } catch (const rl::ConfigError& e) {
      r.fail("data.market", "the market file " + abs.string() + " is invalid:");
      for (const auto& line : e.errors()) r.add_error("  " + line);
      return;
    }
    c.data.market = abs.string();
    if (m.process == rl::PriceProcess::replay)
      r.fail("data.market", "is a replay market: pretrain on historical bars with data.source = \"csv\"");
    else if (m.process == rl::PriceProcess::generated)
      r.fail("data.market", "is a generated market: pretrain on the simulated market its model was trained on");
    else if (c.task.kind == "regime" && m.regimes < 2)
      r.relation(false, "task.kind", "data.market",
                 "regime classification needs a market with [process.regimes] of >= 2 regimes");
  }
  if (c.data.source == "csv" && !r.has_error("data.path")) {
    for (auto& p : c.data.path) {
      const fs::path abs = absolute_of(p, base);
      if (const std::string why = file_problem(abs); !why.empty()) {
        r.fail("data.path", abs.string() + " " + why + " (data.path names CSV files, relative to this file)");
        return;
      }
      p = abs.string();
    }
  }
}

PretrainConfig read(const std::string& text, const std::string& source, const fs::path* base) {
  config::Reader r(text, source);
  PretrainConfig c;
  read_all(r, c, false);
  if (base != nullptr) read_files(r, c, *base);
  r.finish();
  return c;
}

}  // namespace

PretrainConfig parse_pretrain_config(const std::string& text, const std::string& source) {
  return read(text, source, nullptr);
}

PretrainConfig load_pretrain_config(const fs::path& file) {
  const fs::path base = file.parent_path();
  return read(config::read_config_text(file, "pretrain config file"), file.string(), &base);
}

std::string resolved_pretrain_toml(const PretrainConfig& c) {
  std::ostringstream o;
  o << "# foxhunt pretrain: the resolved configuration of this run (every default filled in)\n";
  o << "[model]\nkind = " << toml_string(c.model.kind) << "\nhidden = " << c.model.hidden
    << "\nlayers = " << c.model.layers << "\n";
  for (const auto& [k, v] : c.model.family.integers) o << k << " = " << v << "\n";
  for (const auto& [k, v] : c.model.family.numbers) o << k << " = " << toml_number(v) << "\n";
  for (const auto& [k, v] : c.model.family.choices) o << k << " = " << toml_string(v) << "\n";
  for (const auto& [k, v] : c.model.family.flags) o << k << " = " << toml_bool(v) << "\n";
  const bool csv = c.data.source == "csv";
  o << "\n[data]\nsource = " << toml_string(c.data.source) << "\n";
  if (csv) {
    o << "path = [";
    for (std::size_t i = 0; i < c.data.path.size(); ++i) o << (i ? ", " : "") << toml_string(c.data.path[i]);
    o << "]\n";
  } else {
    o << "market = " << toml_string(c.data.market) << "\n";
  }
  o << "window = " << c.data.window << "\n";
  if (c.task.kind == "returns") o << "horizon = " << c.data.horizon << "\n";
  if (c.task.kind == "volatility") o << "vol_horizon = " << c.data.vol_horizon << "\n";
  if (csv) {
    o << "\n[data.split]\n";
    if (c.data.split.train_end >= 0)
      o << "train_end = " << c.data.split.train_end << "\nvalidation_end = " << c.data.split.validation_end << "\n";
    else
      o << "train = " << toml_number(c.data.split.train) << "\nvalidation = " << toml_number(c.data.split.validation)
        << "\ntest = " << toml_number(c.data.split.test) << "\n";
  }
  o << "\n[task]\nkind = " << toml_string(c.task.kind) << "\n";
  if (c.task.kind == "returns" || c.task.kind == "volatility") o << "loss = " << toml_string(c.task.loss) << "\n";
  if (c.task.kind == "returns" && c.task.loss == "quantile") {
    o << "quantiles = [";
    for (std::size_t i = 0; i < c.task.quantiles.size(); ++i) o << (i ? ", " : "") << toml_number(c.task.quantiles[i]);
    o << "]\n";
  }
  o << "\n[optim]\nlr = " << toml_number(c.optim.lr) << "\nweight_decay = " << toml_number(c.optim.weight_decay)
    << "\nbetas = [" << toml_number(c.optim.betas[0]) << ", " << toml_number(c.optim.betas[1]) << "]"
    << "\neps = " << toml_number(c.optim.eps) << "\nwarmup_steps = " << c.optim.warmup_steps << "\n";
  if (c.optim.steps > c.optim.warmup_steps) o << "decay = " << toml_string(c.optim.decay) << "\n";
  o << "grad_clip = " << toml_number(c.optim.grad_clip) << "\nbatch = " << c.optim.batch
    << "\nsteps = " << c.optim.steps << "\nmath = " << toml_string(c.optim.math) << "\n";
  o << "\n[run]\nname = " << toml_string(c.run.name) << "\nseed = " << c.run.seed << "\ndevice = " << c.run.device
    << "\neval_every = " << c.run.eval_every << "\neval_windows = " << c.run.eval_windows << "\n";
  if (c.model.kind == "tft") o << "interpret = " << toml_bool(c.run.interpret) << "\n";
  if (c.task.kind == "returns" || c.task.kind == "volatility")
    o << "baseline_fit_samples = " << c.run.baseline_fit_samples << "\n";
  o << "checkpoint_every = " << c.run.checkpoint_every << "\nkeep = " << c.run.keep
    << "\nlog_every = " << c.run.log_every << "\ntensorboard = " << toml_bool(c.run.tensorboard)
    << "\njsonl = " << toml_bool(c.run.jsonl) << "\nlevel = " << toml_string(c.run.level) << "\n";
  return o.str();
}

std::vector<std::string> pretrain_config_keys() {
  PretrainConfig c;
  config::Reader r("", "keys");
  read_all(r, c, true);
  return r.accepted_keys();
}

rl::MarketConfig pretrain_market(const PretrainConfig& c) {
  if (c.data.source != "market")
    throw std::invalid_argument("data.source = \"" + c.data.source + "\": not a simulated market");
  try {
    return rl::load_market_config(c.data.market);
  } catch (const std::exception& e) {
    throw std::invalid_argument("data.market = \"" + c.data.market + "\": " + e.what());
  }
}

TaskShape task_shape(const PretrainConfig& c, std::int64_t assets, std::int64_t regimes) {
  TaskShape t;
  if (c.task.kind == "returns") {
    t.targets = c.data.horizon * assets;
    t.outputs = c.task.loss == "quantile" ? t.targets * static_cast<std::int64_t>(c.task.quantiles.size()) : t.targets;
  } else if (c.task.kind == "volatility") {
    t.targets = assets;
    t.outputs = assets;
  } else if (c.task.kind == "regime") {
    t.classes = regimes;
    t.outputs = regimes;
  } else if (c.task.kind == "generate") {  // the denoiser's output is a window, not a head
  } else {  // direction: one logit per asset
    t.classes = 2;
    t.outputs = assets;
  }
  return t;
}

std::int64_t label_horizon(const PretrainConfig& c) { return c.task.kind == "returns" ? c.data.horizon : 1; }
std::int64_t label_vol_horizon(const PretrainConfig& c) { return c.task.kind == "volatility" ? c.data.vol_horizon : 1; }

std::int64_t sample_window(const PretrainConfig& c) {
  if (c.model.kind != "diffusion") return c.data.window;
  const auto it = c.model.family.integers.find("context");
  return c.data.window + (it == c.model.family.integers.end() ? 0 : it->second);
}

std::int64_t bars_per_window(const PretrainConfig& c) {
  return sample_window(c) + 1 + std::max(label_horizon(c), label_vol_horizon(c));
}

BarSplit resolve_split(const PretrainConfig& c, std::int64_t bars) {
  BarSplit s;
  s.bars = bars;
  if (c.data.split.train_end >= 0) {
    s.train_end = c.data.split.train_end;
    s.validation_end = c.data.split.validation_end;
  } else {
    s.train_end = static_cast<std::int64_t>(std::floor(c.data.split.train * static_cast<double>(bars)));
    s.validation_end =
        static_cast<std::int64_t>(std::floor((c.data.split.train + c.data.split.validation) * static_cast<double>(bars)));
  }
  const std::int64_t need = bars_per_window(c);
  const auto part = [&](const char* name, std::int64_t first, std::int64_t end) {
    if (end - first < need)
      throw std::invalid_argument("[data.split]: the " + std::string(name) + " part holds bars [" +
                                  std::to_string(first) + ", " + std::to_string(end) + ") of " + std::to_string(bars) +
                                  ", fewer than one window reads (data.window + 1 + the label's returns = " +
                                  std::to_string(need) + ")");
  };
  if (s.validation_end > bars)
    throw std::invalid_argument("[data.split]: validation_end = " + std::to_string(s.validation_end) +
                                " is past the data's " + std::to_string(bars) + " bars");
  part("train", 0, s.train_end);
  part("validation", s.train_end, s.validation_end);
  if (c.data.split.test > 0.0 || c.data.split.train_end >= 0) part("test", s.validation_end, bars);
  return s;
}

}  // namespace foxhunt::pretrain
