#include "rl/envs/market_generator_config.hpp"

#include <cmath>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <system_error>

#include <toml++/toml.h>

#include "config/reader.hpp"

namespace foxhunt::rl {
namespace {

namespace fs = std::filesystem;

std::string fmt(double v) { return config::format_number(v); }

std::optional<std::string> read_text(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// The name a `latest` file holds (trimmed), if any.
std::optional<fs::path> latest_in(const fs::path& root) {
  const auto text = read_text(root / "latest");
  if (!text) return std::nullopt;
  std::string name = *text;
  while (!name.empty() && (name.back() == '\n' || name.back() == '\r' || name.back() == ' ')) name.pop_back();
  if (name.empty()) return std::nullopt;
  return root / name;
}

}  // namespace

std::vector<double> market_return_scale(const MarketConfig& c) {
  const std::vector<double> pi = regime_stationary(c);
  std::vector<double> scale(static_cast<std::size_t>(c.assets), 1.0);
  for (int a = 0; a < c.assets; ++a) {
    double var_ref = 0;
    for (int r = 0; r < c.regimes; ++r) {
      const std::size_t k = static_cast<std::size_t>(r * c.assets + a);
      if (k < c.sigma.size()) var_ref += pi[static_cast<std::size_t>(r)] * c.sigma[k] * c.sigma[k];
    }
    const double sig_ref = std::sqrt(var_ref);
    scale[static_cast<std::size_t>(a)] = sig_ref > 0 ? 1.0 / (sig_ref * std::sqrt(c.dt)) : 1.0;
  }
  return scale;
}

fs::path resolve_generator_checkpoint(const fs::path& path) {
  std::error_code ec;
  if (!fs::exists(path, ec))
    throw std::runtime_error(path.string() +
                             " does not exist: pretrain the model first (foxhunt pretrain --config "
                             "configs/pretrain/diffusion_ou.toml --run-dir " + path.string() + ")");
  if (!fs::is_directory(path, ec)) throw std::runtime_error(path.string() + " is not a directory");
  if (fs::exists(path / "model.safetensors", ec)) return path;
  for (const fs::path& root : {path / "checkpoints", path}) {
    if (const auto dir = latest_in(root)) {
      if (!fs::exists(*dir / "model.safetensors", ec))
        throw std::runtime_error((root / "latest").string() + " names " + dir->string() +
                                 ", which holds no model.safetensors");
      return *dir;
    }
  }
  throw std::runtime_error(path.string() +
                           " is neither a checkpoint (no model.safetensors) nor a run directory (no checkpoints/latest)");
}

std::vector<std::pair<std::string, std::string>> generator_problems(const MarketConfig& market, GeneratorModel* out) {
  std::vector<std::pair<std::string, std::string>> problems;
  const std::string key = "process.checkpoint";
  auto bad = [&](const std::string& k, const std::string& what) { problems.emplace_back(k, what); };
  GeneratorModel m;
  try {
    m.checkpoint = resolve_generator_checkpoint(market.generator_checkpoint);
  } catch (const std::exception& e) {
    bad(key, e.what());
    return problems;
  }
  m.weights = m.checkpoint / "model.safetensors";
  const std::string where = "the checkpoint " + m.checkpoint.string();
  const fs::path cfg_file = m.checkpoint / "config.resolved.toml";
  const auto cfg_text = read_text(cfg_file);
  if (!cfg_text) {
    bad(key, where + " has no config.resolved.toml (not a foxhunt pretrain checkpoint)");
    return problems;
  }
  toml::table t;
  try {
    t = toml::parse(*cfg_text, cfg_file.string());
  } catch (const toml::parse_error& e) {
    bad(key, cfg_file.string() + " is not valid TOML: " + std::string(e.description()));
    return problems;
  }
  const std::string kind = t["model"]["kind"].value_or(std::string{});
  const std::string task = t["task"]["kind"].value_or(std::string{});
  if (kind != "diffusion" || task != "generate") {
    bad(key, where + " is a [model] kind = \"" + kind + "\", [task] kind = \"" + task +
                 "\" model; a generated market needs a diffusion model ([model] kind = \"diffusion\", [task] kind = "
                 "\"generate\")");
    return problems;
  }
  const auto integer = [&](const char* table, const char* k) -> std::int64_t {
    const auto v = t[table][k].value<std::int64_t>();
    if (!v) bad(key, cfg_file.string() + " has no integer " + table + "." + k);
    return v.value_or(0);
  };
  m.window = integer("data", "window");
  m.hidden = integer("model", "hidden");
  m.blocks = integer("model", "layers");
  m.expand = integer("model", "expand");
  m.embed = integer("model", "embed");
  m.diffusion_steps = integer("model", "diffusion_steps");
  const std::int64_t context = integer("model", "context");
  m.schedule = t["model"]["schedule"].value_or(std::string{});
  m.beta_start = t["model"]["beta_start"].value_or(1e-4);
  m.beta_end = t["model"]["beta_end"].value_or(0.02);
  m.sampler = t["model"]["sampler"].value_or(std::string{});
  m.sample_steps = t["model"]["sample_steps"].value_or(std::int64_t{0});
  m.eta = t["model"]["eta"].value_or(0.0);
  m.bf16 = t["optim"]["math"].value_or(std::string{"fp32"}) == "bf16";
  if (!problems.empty()) return problems;
  for (const auto& [name, v] : {std::pair<const char*, std::int64_t>{"data.window", m.window},
                                {"model.hidden", m.hidden}, {"model.layers", m.blocks}, {"model.expand", m.expand},
                                {"model.embed", m.embed}, {"model.diffusion_steps", m.diffusion_steps}})
    if (v < 1) bad(key, cfg_file.string() + ": " + name + " = " + std::to_string(v) + " is not a model's (>= 1)");
  if (m.schedule != "linear" && m.schedule != "cosine")
    bad(key, cfg_file.string() + ": model.schedule = \"" + m.schedule + "\" is not \"linear\" or \"cosine\"");
  if (m.sampler != "ddpm" && m.sampler != "ddim")
    bad(key, cfg_file.string() + ": model.sampler = \"" + m.sampler + "\" is not \"ddpm\" or \"ddim\"");
  if (!problems.empty()) return problems;
  m.context = context;
  if (context < 0 || context > m.window)
    bad(key, where + " is conditioned on a context of " + std::to_string(context) +
                 " returns (model.context), more than its window of " + std::to_string(m.window) +
                 " (data.window): a generated market conditions each window on the end of the one before it");
  if (t["data"]["source"].value_or(std::string{}) != "market") {
    bad(key, where + " was trained on historical bars (data.source = \"csv\"): its return normalization is the "
                     "data's, not a market config's; train the generator on data.source = \"market\"");
    return problems;
  }

  // The model's market and its normalization.
  const fs::path model_market_file = m.checkpoint / "market.resolved.toml";
  const auto market_text = read_text(model_market_file);
  if (!market_text) {
    bad(key, where + " has no market.resolved.toml (the market the model was trained on)");
    return problems;
  }
  MarketConfig trained;
  try {
    trained = parse_market_config(*market_text, model_market_file.string());
  } catch (const ConfigError& e) {
    bad(key, model_market_file.string() + " is not a valid market config: " + e.what());
    return problems;
  }
  m.assets = trained.assets;
  if (trained.assets != market.assets) {
    bad(key, where + " generates " + std::to_string(trained.assets) + " assets (its market " +
                 model_market_file.string() + "), but market.assets = " + std::to_string(market.assets));
    return problems;
  }
  m.ret_scale = market_return_scale(trained);
  const std::vector<double> mine = market_return_scale(market);
  for (int a = 0; a < market.assets; ++a) {
    const double theirs = m.ret_scale[static_cast<std::size_t>(a)], ours = mine[static_cast<std::size_t>(a)];
    if (std::abs(theirs - ours) > 1e-6 * std::abs(theirs)) {
      const std::string their_sigma = trained.regimes == 1
                                          ? "sigma " + fmt(trained.sigma[static_cast<std::size_t>(a)])
                                          : "the regimes' sigma_ref " + fmt(1.0 / (theirs * std::sqrt(trained.dt)));
      bad(key, where + " samples returns normalized by 1 / (sigma sqrt(dt)) = " + fmt(theirs) + " for asset " +
                   std::to_string(a) + " (its market " + model_market_file.string() + ": " + their_sigma + ", dt " +
                   fmt(trained.dt) + "), this market by " + fmt(ours) + " (process.sigma " +
                   fmt(market.sigma[static_cast<std::size_t>(a)]) + ", market.dt " + fmt(market.dt) +
                   "): give the model's sigma and dt");
      break;
    }
  }

  // The market's sampler overrides, against the model's schedule.
  if (!market.generator_sampler.empty()) m.sampler = market.generator_sampler;
  if (market.generator_sample_steps > 0) m.sample_steps = market.generator_sample_steps;
  if (market.generator_eta >= 0.0) {
    if (m.sampler != "ddim")
      bad("process.eta", "only ddim has eta (the sampler is \"" + m.sampler + "\"; set process.sampler = \"ddim\")");
    m.eta = market.generator_eta;
  } else if (m.sampler != "ddim") {
    m.eta = 0.0;
  }
  if (m.sample_steps < 1 || m.sample_steps > m.diffusion_steps)
    bad(market.generator_sample_steps > 0 ? "process.sample_steps" : key,
        "the sampler's " + std::to_string(m.sample_steps) + " steps must be in [1, the model's diffusion_steps = " +
            std::to_string(m.diffusion_steps) + "] (" + where + ")");
  if (out != nullptr) *out = m;
  return problems;
}

GeneratorModel read_generator_checkpoint(const MarketConfig& market) {
  if (market.process != PriceProcess::generated)
    throw ConfigError(std::string("process.kind: \"") + to_string(market.process) + "\" is not \"generated\"");
  GeneratorModel m;
  const auto problems = generator_problems(market, &m);
  if (!problems.empty()) {
    std::vector<std::string> lines;
    for (const auto& [k, what] : problems) lines.push_back(k + ": " + what);
    throw ConfigError("market config", lines);
  }
  return m;
}

}  // namespace foxhunt::rl
