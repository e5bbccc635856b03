#pragma once
// Test support for generated markets (process.kind = "generated"): a diffusion pretrain checkpoint
// directory written as `foxhunt pretrain` writes one (config.resolved.toml from the real writer,
// market.resolved.toml, model.safetensors), and the text of a market file pointing at it.
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "pretrain/config.hpp"
#include "rl/envs/market_config.hpp"
#include "support/paths.hpp"

namespace foxhunt::test {

// A fresh, empty folder under the temp directory (removed by the caller).
inline std::filesystem::path fresh_dir(const std::string& tag) {
  static int n = 0;
  const auto dir = std::filesystem::temp_directory_path() /
                   ("foxhunt_gen_" + tag + "_" + std::to_string(::getpid()) + "_" + std::to_string(n++));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

inline void write_text(const std::filesystem::path& file, const std::string& text) {
  std::ofstream out(file, std::ios::binary);
  out << text;
}

inline rl::MarketConfig ou_market_config() {
  return rl::load_market_config(configs_dir() / "markets" / "ou_mean_reversion.toml");
}

// configs/pretrain/diffusion_ou.toml (the OU market, window 16, ddpm over 1000 steps) as read.
inline pretrain::PretrainConfig diffusion_ou_config() {
  return pretrain::load_pretrain_config(configs_dir() / "pretrain" / "diffusion_ou.toml");
}

// The same made small for unit tests: window 8, hidden 16, 2 blocks, 100 steps, ddim over 10.
inline pretrain::PretrainConfig small_diffusion_config() {
  pretrain::PretrainConfig c = diffusion_ou_config();
  c.model.hidden = 16;
  c.model.layers = 2;
  c.model.family.integers["embed"] = 8;
  c.model.family.integers["expand"] = 2;
  c.model.family.integers["diffusion_steps"] = 100;
  c.model.family.integers["sample_steps"] = 10;
  c.model.family.choices["sampler"] = "ddim";
  c.model.family.numbers["eta"] = 0.0;
  c.data.window = 8;
  c.optim.batch = 64;
  c.optim.steps = 20;
  c.optim.warmup_steps = 2;
  return c;
}

// dir/config.resolved.toml and dir/market.resolved.toml as a pretrain run keeps them; an empty
// model.safetensors unless one is there (the config readers only check that it exists).
inline void write_checkpoint_files(const std::filesystem::path& dir, const pretrain::PretrainConfig& c,
                                   const rl::MarketConfig& trained_on) {
  std::filesystem::create_directories(dir);
  pretrain::PretrainConfig kept = c;
  kept.data.market = "market.resolved.toml";
  write_text(dir / "config.resolved.toml", pretrain::resolved_pretrain_toml(kept));
  write_text(dir / "market.resolved.toml", rl::market_config_toml(trained_on));
  if (!std::filesystem::exists(dir / "model.safetensors")) write_text(dir / "model.safetensors", "");
}

// A generated market of ou_mean_reversion's dt (and, by default, its sigma: the normalization fits).
inline std::string generated_market_text(const std::string& checkpoint, const std::string& process_extra = "",
                                         const std::string& tail = "", int assets = 1, double sigma = 0.2) {
  return "[market]\nassets = " + std::to_string(assets) +
         "\ndt = 0.003968253968253968\nwindow = 12\nepisode_length = 20\n\n"
         "[process]\nkind = \"generated\"\ncheckpoint = \"" +
         checkpoint + "\"\ninitial_price = 100.0\nsigma = " + std::to_string(sigma) + "\n" + process_extra +
         "\n[execution]\nfee_bps = 5.0\nhalf_spread_bps = 1.0\nslippage = 0.1\nborrow_rate = 0.02\n" + tail;
}

}  // namespace foxhunt::test
