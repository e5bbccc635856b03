#pragma once
// The shipped configs as a user runs them after `foxhunt pretrain`: the run configs with
// [features] (configs/*_features_regime.toml) name the pretrain run "../runs/regime-lstm", which a
// checkout does not have. stage_shipped_configs(root) copies configs/ to root/configs and puts a
// stand-in for that run at root/runs/regime-lstm: the resolved config of
// configs/pretrain/lstm_regime.toml (an LSTM of width 64 on the regime2 market, a 64-return window)
// and a weights file that reads on the host only (no device test loads it). So every shipped run
// config loads and checks on the host, [features] ones included. Returns root/configs.
#include <filesystem>
#include <fstream>
#include <string>

#include "tests/support/paths.hpp"

namespace foxhunt::test {

inline std::filesystem::path stage_shipped_configs(const std::filesystem::path& root) {
  namespace fs = std::filesystem;
  fs::remove_all(root);
  fs::create_directories(root);
  const fs::path configs = root / "configs";
  fs::copy(configs_dir(), configs, fs::copy_options::recursive);
  const fs::path pre = root / "runs" / "regime-lstm";
  fs::create_directories(pre);
  std::ofstream(pre / "config.resolved.toml")
      << "[model]\nkind = \"lstm\"\nhidden = 64\nlayers = 1\n[data]\nsource = \"market\"\nmarket = \""
      << (configs / "markets" / "regime2.toml").string() << "\"\nwindow = 64\n[task]\nkind = \"regime\"\n";
  std::ofstream(pre / "model.safetensors") << "stand-in weights";
  return configs;
}

}  // namespace foxhunt::test
