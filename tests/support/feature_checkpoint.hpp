#pragma once
// A `foxhunt pretrain` checkpoint of a sequence model for the feature-extractor tests: its resolved
// config as given and its weights at the model's and head's initialization (random, from `seed`),
// so an extractor loads it as it would a trained one.
#include <cuda_runtime.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "gpu/arena.hpp"
#include "models/dense.hpp"
#include "pretrain/feature_source.hpp"
#include "pretrain/model_factory.hpp"

namespace foxhunt::test {

// dir/model.safetensors: the model and head that `src` (read from dir) declares, initialized.
inline void write_initialized_feature_weights(const std::filesystem::path& dir, const pretrain::FeatureSource& src,
                                              std::uint64_t seed, cudaStream_t stream) {
  auto model = pretrain::make_model(src.model);
  models::DenseSpec hs;
  hs.name = "head";
  hs.in = src.embedding;
  hs.out = src.head_outputs;
  models::Dense head(hs);
  gpu::ParameterArena arena;
  model->declare(arena);
  head.declare(arena);
  arena.finalize(stream);
  std::mt19937_64 init(seed);
  model->init(arena, init, stream);
  head.init(arena, init, stream);
  arena.save(dir / pretrain::kFeatureModelFile, stream);
}

// dir/config.resolved.toml = config_toml, then the weights above; returns the source as
// load_feature_source reads it.
inline pretrain::FeatureSource write_feature_checkpoint(const std::filesystem::path& dir, const std::string& config_toml,
                                                        std::uint64_t seed, cudaStream_t stream) {
  std::filesystem::create_directories(dir);
  std::ofstream(dir / pretrain::kFeatureConfigFile) << config_toml;
  std::ofstream(dir / pretrain::kFeatureModelFile) << "";  // load_feature_source checks that it exists
  pretrain::FeatureSource src = pretrain::load_feature_source(dir);
  write_initialized_feature_weights(dir, src, seed, stream);
  return src;
}

}  // namespace foxhunt::test
