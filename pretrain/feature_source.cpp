#include "pretrain/feature_source.hpp"

#include <cmath>
#include <stdexcept>
#include <system_error>

#include "rl/envs/market_params.hpp"

namespace foxhunt::pretrain {
namespace fs = std::filesystem;

FeatureOutput parse_feature_output(const std::string& name) {
  if (name == "embedding") return FeatureOutput::embedding;
  if (name == "head") return FeatureOutput::head;
  if (name == "score") return FeatureOutput::score;
  if (name == "both") return FeatureOutput::both;
  throw std::invalid_argument("features.output = \"" + name +
                              "\": one of \"embedding\", \"head\", \"score\", \"both\"");
}

const char* to_string(FeatureOutput o) {
  switch (o) {
    case FeatureOutput::embedding: return "embedding";
    case FeatureOutput::head: return "head";
    case FeatureOutput::score: return "score";
    case FeatureOutput::both: return "both";
  }
  return "?";
}

FeatureSource load_feature_source(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw std::invalid_argument(dir.string() + " is not a directory (a `foxhunt pretrain` checkpoint directory)");
  for (const char* f : {kFeatureModelFile, kFeatureConfigFile})
    if (!fs::is_regular_file(dir / f, ec))
      throw std::invalid_argument(dir.string() + " has no " + f + " (not a `foxhunt pretrain` checkpoint directory)");
  FeatureSource s;
  s.dir = dir;
  try {
    s.config = load_pretrain_config(dir / kFeatureConfigFile);
  } catch (const std::exception& e) {
    throw std::invalid_argument((dir / kFeatureConfigFile).string() + " is not a valid pretrain config: " + e.what());
  }
  std::int64_t assets = static_cast<std::int64_t>(s.config.data.path.size()), regimes = 1;
  if (s.config.data.source == "market") {
    s.market = pretrain_market(s.config);
    assets = s.market.assets;
    regimes = s.market.regimes;
  }
  s.model.kind = s.config.model.kind;
  s.model.in = assets;
  s.model.hidden = s.config.model.hidden;
  s.model.layers = s.config.model.layers;
  s.model.sequence_length = s.config.data.window;
  s.model.math = s.config.optim.math == "bf16" ? gpu::LinearMath::bf16 : gpu::LinearMath::fp32;
  s.model.family = s.config.model.family;
  s.embedding = s.config.model.hidden;  // every family's out_features() (checked when the model is built)
  s.head_outputs = task_shape(s.config, assets, regimes).outputs;
  if (s.diffusion()) {
    s.diffusion_context = s.config.model.family.integers.at("context");
    s.diffusion_steps = s.config.model.family.integers.at("diffusion_steps");
  }
  return s;
}

std::string feature_input_problem(const FeatureSource& s, const rl::MarketConfig& env) {
  const std::string model = "the model of " + s.dir.string() + " (" + s.config.model.kind + ")";
  if (s.config.data.source != "market")
    return model + " trained on CSV bars (data.source = \"csv\"), whose return scale the environment does not "
                   "share: not supported yet (pretrain on a simulated market, data.source = \"market\")";
  if (env.process == rl::PriceProcess::replay)
    return "env.market replays history (process.kind = \"replay\"): not supported yet with [features] (the "
           "observation's return scale comes from the history, not from the model's market " +
           s.config.data.market + ")";
  if (env.assets != s.market.assets)
    return model + " reads " + std::to_string(s.market.assets) + " asset(s) per step (its market " +
           s.config.data.market + "), but env.market has " + std::to_string(env.assets);
  const rl::MarketParams a = rl::make_market_params(s.market, nullptr, nullptr);
  const rl::MarketParams b = rl::make_market_params(env, nullptr, nullptr);
  for (int k = 0; k < env.assets; ++k)
    if (std::fabs(a.ret_scale[k] - b.ret_scale[k]) > 1e-6f * std::fabs(a.ret_scale[k]))
      return model + " reads returns normalized by 1 / (sigma_ref sqrt(dt)) = " + std::to_string(a.ret_scale[k]) +
             " for asset " + std::to_string(k) + " (its market " + s.config.data.market + "), but env.market's is " +
             std::to_string(b.ret_scale[k]) + " (a different process.sigma or market.dt)";
  if (s.diffusion() && env.window != s.config.data.window + s.diffusion_context)
    return model + " reads windows of " + std::to_string(s.config.data.window + s.diffusion_context) +
           " returns (data.window = " + std::to_string(s.config.data.window) + " after model.context = " +
           std::to_string(s.diffusion_context) + "), but env.market's observation shows market.window = " +
           std::to_string(env.window);
  return {};
}

std::string feature_output_problem(const FeatureSource& s, FeatureOutput o) {
  const std::string model = "the model of " + s.dir.string() + " (" + s.config.model.kind + ")";
  if (s.diffusion() && o == FeatureOutput::head)
    return model + " has no head (a diffusion model offers \"embedding\", \"score\", \"both\")";
  if (!s.diffusion() && (o == FeatureOutput::score || o == FeatureOutput::both))
    return std::string("\"") + to_string(o) + "\" is a diffusion model's anomaly score, but " + model +
           " is a sequence model (it offers \"embedding\", \"head\")";
  return {};
}

std::string feature_noise_step_problem(const FeatureSource& s, std::int64_t step) {
  if (!s.diffusion() || (step >= 0 && step < s.diffusion_steps)) return {};
  return "features.noise_step = " + std::to_string(step) + " is not a step of the diffusion model of " +
         s.dir.string() + " (in [0, model.diffusion_steps = " + std::to_string(s.diffusion_steps) + "))";
}

}  // namespace foxhunt::pretrain
